"""The engine tier's probe: the REAL vLLM engine (LLMEngine, ngram drafter, rejection sampler,
structured outputs, stat loggers) on a real tiny model, on CPU.

One `LLM` per process (a second one fails on CPU), so every engine scenario of
a job shares one engine configuration (`engine_config` refuses a job whose
scenarios disagree). The engine core runs in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), which makes per-step records
deterministic and lets `engine_capture` observe the scheduler directly.
Decoding is greedy; prefix caching is off so a run never depends on the runs
before it in the same process; `enforce_eager` skips torch.compile (seconds of
load time, no effect on which tokens greedy decoding picks).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from . import engine_truncation, stats
from .engine_capture import CaptureLogger, StepTap, counter_delta, prometheus_spec_counters

#: The keys of a scenario's `engine` mapping that configure the one engine of a probe process.
ENGINE_KEYS = (
    "k", "prompt_lookup_min", "prompt_lookup_max", "seed", "max_model_len", "max_num_seqs", "method", "async_scheduling",
    "model",
)
#: Defaults for keys a job may omit (older jobs, hand-written jobs).
ENGINE_DEFAULTS: dict[str, Any] = {"method": "ngram", "async_scheduling": False, "model": None}
MAX_STEPS = 5000


def engine_config(scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """The one engine configuration all scenarios of the job share; ValueError if they differ."""
    configs = {
        s.get("name", "?"): {k: {**ENGINE_DEFAULTS, **s["engine"]}[k] for k in ENGINE_KEYS} for s in scenarios
    }
    distinct = {tuple(sorted(c.items())) for c in configs.values()}
    if len(distinct) > 1:
        raise ValueError(f"engine scenarios of one job must share one engine config (one engine per process): {configs}")
    return next(iter(configs.values()))


class EngineSession:
    """One engine for the whole probe process, with its three stats views attached."""

    def __init__(self, model_dir: Path, cfg: dict[str, Any]) -> None:
        from vllm import LLM

        self.cfg = cfg
        self.k = int(cfg["k"])
        method = str(cfg.get("method", "ngram"))
        spec: dict[str, Any] = {"method": method, "num_speculative_tokens": self.k}
        if method in ("ngram", "ngram_gpu"):
            spec.update(prompt_lookup_min=int(cfg["prompt_lookup_min"]), prompt_lookup_max=int(cfg["prompt_lookup_max"]))
        elif method == "draft_model":
            spec["model"] = str(model_dir)  # the tiny model drafts for itself: every draft is accepted
        extra: dict[str, Any] = {"async_scheduling": True} if cfg.get("async_scheduling") else {}
        self.llm = LLM(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype="float32",
            seed=int(cfg["seed"]),
            max_model_len=int(cfg["max_model_len"]),
            max_num_seqs=int(cfg["max_num_seqs"]),
            enable_prefix_caching=False,
            enforce_eager=True,
            disable_log_stats=False,
            per_request_spec_decode_metrics="detailed",
            speculative_config=spec,
            **extra,
        )
        self.engine = self.llm.llm_engine
        self.logger = CaptureLogger()
        assert self.engine.logger_manager is not None, "disable_log_stats=False must create a StatLoggerManager"
        self.engine.logger_manager.stat_loggers.append(self.logger)
        # In-process engine core only (VLLM_ENABLE_V1_MULTIPROCESSING=0): the tap needs the scheduler object.
        self.tap = StepTap(self.engine.engine_core.engine_core.scheduler)
        self.tokenizer_eos = self.engine.input_processor.renderer.get_eos_token_id()

    def tokenize(self, prompt: str) -> list[int]:
        return list(self.engine.input_processor.renderer.tokenizer.encode(prompt))

    def add(self, rid: str, prompt: Any, params: Any, eos: int | None) -> None:
        """Add a request; `eos` makes that token the request's EOS through the frontend's own path.

        The input processor sets a request's EOS from `renderer.get_eos_token_id()`
        (the tokenizer's EOS) via `SamplingParams.update_from_generation_config`;
        with one engine per process the tokenizer cannot change, so for this one
        call the renderer reports `eos` instead. Everything downstream (the
        scheduler's `check_stop`, finish reason `stop` with no stop_reason) is
        the engine's real EOS handling.
        """
        renderer = self.engine.input_processor.renderer
        if eos is not None:
            renderer.get_eos_token_id = lambda: eos
        try:
            self.engine.add_request(rid, prompt, params)
        finally:
            if eos is not None:
                del renderer.get_eos_token_id

    def play(self, entries: list[tuple[str, Any, Any, int | None]]) -> dict[str, Any]:
        """Run a batch to completion; everything the three views saw, plus the final outputs."""
        self.tap.take()
        self.logger.take()
        before = prometheus_spec_counters(self.llm)
        for rid, prompt, params, eos in entries:
            self.add(rid, prompt, params, eos)
        finals: dict[str, Any] = {}
        n = 0
        while self.engine.has_unfinished_requests():
            n += 1
            if n > MAX_STEPS:
                raise RuntimeError(f"batch did not finish within {MAX_STEPS} engine steps")
            for out in self.engine.step():
                if out.finished:
                    finals[out.request_id] = out
        records, tap_stats = self.tap.take()
        logged = self.logger.take()
        after = prometheus_spec_counters(self.llm)
        return {
            "records": records,
            "tap_stats": tap_stats,
            "logged": logged,
            "prometheus": counter_delta(before, after, self.k),
            "finals": finals,
        }


def _sampling_params(req: dict[str, Any], cut: dict[str, Any] | None, seed: int) -> tuple[Any, int | None]:
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    kwargs: dict[str, Any] = {"temperature": 0.0, "max_tokens": int(req["max_tokens"])}
    structured = req.get("structured")
    if structured:
        kwargs["structured_outputs"] = StructuredOutputsParams(**structured)
    eos = None
    if cut is not None:
        if cut["kind"] == "stop":
            kwargs["stop_token_ids"] = [cut["token"]]
        elif cut["kind"] in ("max_tokens", "boundary"):
            kwargs["max_tokens"] = int(cut["max_tokens"])
        elif cut["kind"] == "eos":
            eos = int(cut["token"])
    return SamplingParams(**kwargs), eos


def _spec_metrics(completion: Any) -> dict[str, Any] | None:
    metrics = getattr(completion, "spec_decode_metrics", None)
    if metrics is None:
        return None
    out = dataclasses.asdict(metrics) if dataclasses.is_dataclass(metrics) else {}
    if hasattr(metrics, "to_dict"):
        out["response"] = metrics.to_dict()
    return out


def _steps_agree(logged: list[Any], tapped: list[Any]) -> bool:
    """The stat logger saw exactly the stats the scheduler returned, step by step."""
    a = [stats.stats_dict(s) for s in logged if s is not None]
    b = [stats.stats_dict(s) for s in tapped]
    return a == b


def run_one(
    session: EngineSession, scenario: dict[str, Any], run: dict[str, Any], cuts: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """One (scenario, run) on the shared engine: a ProbeRun-shaped dict."""
    from vllm.v1.spec_decode.metrics import SpecDecodingLogging, SpecDecodingStats

    start = time.perf_counter()
    specs = {r["id"]: r for r in scenario["requests"]}
    reference = run.get("role") == "reference"
    entries = []
    used_cuts: dict[str, dict[str, Any]] = {}
    prompts: dict[str, list[int]] = {}
    for rid in run["order"]:
        req = specs[rid]
        cut = None
        if not reference and req.get("truncate", "none") != "none":
            if rid not in cuts:
                raise RuntimeError(f"no truncation point for request {rid!r}: its reference run failed or did not run")
            cut = used_cuts[rid] = cuts[rid]
        params, eos = _sampling_params(req, cut, int(scenario.get("seed", 0)))
        prompts[rid] = _prompt_ids(session, req, cuts)
        if len(prompts[rid]) < 2:
            raise ValueError(f"request {rid!r}: the prompt is {len(prompts[rid])} token(s); use >= 2 (#50518)")
        entries.append((rid, {"prompt_token_ids": prompts[rid]}, params, eos))
    played = session.play(entries)

    outputs: dict[str, list[int]] = {}
    finish: dict[str, str] = {}
    stop_reasons: dict[str, Any] = {}
    per_request: dict[str, Any] = {}
    texts: dict[str, str] = {}
    for internal, final in played["finals"].items():
        rid = internal
        completion = final.outputs[0]
        outputs[rid] = [int(t) for t in completion.token_ids]
        finish[rid] = str(completion.finish_reason)
        stop_reasons[rid] = completion.stop_reason
        per_request[rid] = _spec_metrics(completion)
        texts[rid] = completion.text

    logged = [s for s in played["logged"] if s is not None]
    logged_dicts = [stats.stats_dict(s) for s in logged]
    field_names = [f.name for f in dataclasses.fields(SpecDecodingStats)]
    mean, notes = stats.branch_mean(SpecDecodingLogging, logged)
    totals = stats.totals(logged_dicts, mean, session.k, field_names)
    tap_totals = stats.totals([s for s in (r.get("stats") for r in played["records"]) if s], mean, session.k, field_names)
    notes.update(
        role="reference" if reference else "measured",
        engine=session.cfg,
        prompt_token_ids=prompts,
        outputs_text=texts,
        stop_reasons=stop_reasons,
        per_request_spec_decode=per_request,
        prometheus=played["prometheus"],
        stat_logger_steps=len(played["logged"]),
        scheduler_totals={k: tap_totals[k] for k in stats.CORE_FIELDS},
        stat_logger_matches_scheduler=_steps_agree(played["logged"], played["tap_stats"]),
        tokenizer_eos=session.tokenizer_eos,
        steps=len(played["records"]),
    )
    if used_cuts:
        notes["truncation"] = {rid: _with_outcome(c, finish.get(rid), stop_reasons.get(rid)) for rid, c in used_cuts.items()}
    if reference:
        rid = run["order"][0]
        kind = specs[rid].get("truncate", "none")
        if kind != "none":
            avoid = {t for t in (session.tokenizer_eos,) if t is not None}
            cuts[rid] = engine_truncation.choose(kind, rid, played["records"], outputs.get(rid, []), avoid)
            notes["truncation_choice"] = cuts[rid]
    return {
        "scenario": scenario["name"],
        "tier": "engine",
        "order": list(run["order"]),
        "label": run["label"],
        "status": "ok",
        "error": None,
        "steps": played["records"],
        "totals": totals,
        "outputs": outputs,
        "finish_reasons": finish,
        "duration_s": round(time.perf_counter() - start, 6),
        "notes": notes,
    }


def _prompt_ids(session: EngineSession, req: dict[str, Any], state: dict[str, Any]) -> list[int]:
    """The request's prompt tokens; with `prime: m`, followed by the model's own first m greedy tokens.

    Priming puts the model's loop into the prompt, so the ngram drafter can
    propose tokens the output has not emitted yet (the only way a stop/EOS
    token can be a first occurrence AND an accepted draft). Computed once per
    scenario by an unmeasured greedy play, and recorded in the run's notes.
    """
    ids = session.tokenize(req["prompt"])
    m = int(req.get("prime") or 0)
    if m <= 0:
        return ids
    key = f"prime:{req['id']}"
    if key not in state:
        from vllm.sampling_params import SamplingParams

        played = session.play([(key, {"prompt_token_ids": ids}, SamplingParams(temperature=0.0, max_tokens=m), None)])
        state[key] = ids + [int(t) for t in played["finals"][key].outputs[0].token_ids]
    return list(state[key])


def _with_outcome(cut: dict[str, Any], finish: str | None, stop_reason: Any) -> dict[str, Any]:
    """The cut used, plus how the request really ended (EOS: finish `stop`, no stop_reason)."""
    return {**cut, "finish_reason": finish, "stop_reason": stop_reason}

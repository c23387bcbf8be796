"""The engine tier's probe: the REAL vLLM engine (LLMEngine, ngram drafter, rejection sampler,
structured outputs, stat loggers) on a real tiny model, on CPU.

One `LLM` per process (a second one fails on CPU), so every engine scenario of
a job shares one engine configuration (`engine_config` refuses a job whose
scenarios disagree). The engine core runs in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), which makes per-step records
deterministic and lets `capture` observe the scheduler directly.
Decoding is greedy; `enforce_eager` skips torch.compile (seconds of load time,
no effect on which tokens greedy decoding picks). The serving conditions a
folder may turn on are the engine's own settings: prefix caching (the cache is
reset before every batch, so no run depends on the runs before it in the same
process), the KV block size and pool (`num_gpu_blocks_override`: small enough
to preempt), the token budget (`max_num_batched_tokens`: small enough to chunk
a prefill); an abort is `LLMEngine.abort_request` between two steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..protocol import DidNotFinish
from .capture import (
    CaptureLogger,
    RunnerTap,
    StepTap,
    counter_delta,
    prometheus_spec_counters,
    prometheus_token_counters,
)

#: The keys of a scenario's `engine` mapping that configure the one engine of a probe process.
ENGINE_KEYS = (
    "k",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "seed",
    "max_model_len",
    "max_num_seqs",
    "method",
    "async_scheduling",
    "model",
    "prefix_caching",
    "block_size",
    "kv_blocks",
    "max_num_batched_tokens",
)
#: Defaults for keys a job may omit (older jobs, hand-written jobs): the engine's plain case.
ENGINE_DEFAULTS: dict[str, Any] = {
    "method": "ngram",
    "async_scheduling": False,
    "model": None,
    "prefix_caching": False,
    "block_size": None,
    "kv_blocks": None,
    "max_num_batched_tokens": None,
}
MAX_STEPS = 5000


def engine_config(scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """The one engine configuration all scenarios of the job share; ValueError if they differ."""
    configs = {
        s.get("name", "?"): {k: {**ENGINE_DEFAULTS, **s["engine"]}[k] for k in ENGINE_KEYS}
        for s in scenarios
    }
    distinct = {tuple(sorted(c.items())) for c in configs.values()}
    if len(distinct) > 1:
        raise ValueError(
            "engine scenarios of one job must share one engine config (one engine per process): "
            f"{configs}"
        )
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
            spec.update(
                prompt_lookup_min=int(cfg["prompt_lookup_min"]),
                prompt_lookup_max=int(cfg["prompt_lookup_max"]),
            )
        elif method == "draft_model":
            spec["model"] = str(
                model_dir
            )  # the tiny model drafts for itself: every draft is accepted
        extra: dict[str, Any] = {"async_scheduling": True} if cfg.get("async_scheduling") else {}
        #: Unset keys keep the platform's defaults (on CPU: block 128, a 1 GiB pool, budget 8192).
        optional = {
            "block_size": cfg.get("block_size"),
            "num_gpu_blocks_override": cfg.get("kv_blocks"),
            "max_num_batched_tokens": cfg.get("max_num_batched_tokens"),
        }
        extra.update({key: int(value) for key, value in optional.items() if value is not None})
        self.prefix_caching = bool(cfg.get("prefix_caching"))
        self.llm = LLM(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype="float32",
            seed=int(cfg["seed"]),
            max_model_len=int(cfg["max_model_len"]),
            max_num_seqs=int(cfg["max_num_seqs"]),
            enable_prefix_caching=self.prefix_caching,
            enforce_eager=True,
            disable_log_stats=False,
            per_request_spec_decode_metrics="detailed",
            speculative_config=spec,
            **extra,
        )
        self.engine = self.llm.llm_engine
        self.logger = CaptureLogger()
        assert self.engine.logger_manager is not None, (
            "disable_log_stats=False must create a StatLoggerManager"
        )
        self.engine.logger_manager.stat_loggers.append(self.logger)
        # In-process engine core only (VLLM_ENABLE_V1_MULTIPROCESSING=0): the tap needs the
        # scheduler object.
        core = self.engine.engine_core.engine_core
        self.runner_tap = RunnerTap(_model_runner(core))
        self.tap = StepTap(core.scheduler, self.runner_tap)
        self.tokenizer_eos = self.engine.input_processor.renderer.get_eos_token_id()
        self.settings = _effective_settings(core)

    def reset_prefix_cache(self) -> None:
        """Forget every cached block, so the coming batch hits only on what it computes itself."""
        if self.prefix_caching and not self.llm.reset_prefix_cache():
            raise RuntimeError(
                "the engine refused to reset its prefix cache (requests still running?): "
                "the run would depend on the runs before it"
            )

    def _describe(self, rids: list[str]) -> str:
        """Where each stuck request is, as the branch's scheduler sees it (tokens computed of
        total)."""
        requests = getattr(self.engine.engine_core.engine_core.scheduler, "requests", {})
        # The engine makes each id unique with a random suffix (`<id>-<8 characters>`).
        by_external = {**{key.rsplit("-", 1)[0]: r for key, r in requests.items()}, **requests}
        parts = []
        for rid in rids:
            req = by_external.get(rid)
            computed, total = (
                getattr(req, "num_computed_tokens", "?"),
                getattr(req, "num_tokens", "?"),
            )
            parts.append(f"{rid} ({computed} of {total} tokens computed)")
        return ", ".join(parts) or "none"

    def _abort(self, rids: list[str]) -> None:
        try:
            if rids:
                self.engine.abort_request(rids)
        except Exception:  # noqa: BLE001 - the branch's engine may not abort cleanly;
            pass  # the next run reports that itself

    def tokenize(self, prompt: str) -> list[int]:
        return list(self.engine.input_processor.renderer.tokenizer.encode(prompt))

    def detokenize(self, ids: list[int]) -> str:
        """The text of `ids`, special tokens skipped (as `SamplingParams` decodes by default)."""
        return str(
            self.engine.input_processor.renderer.tokenizer.decode(ids, skip_special_tokens=True)
        )

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

    def play(
        self,
        entries: list[tuple[str, Any, Any, int | None]],
        aborts: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """Run a batch to completion; everything the three views saw, plus the final outputs.

        `aborts` maps a request to the number of its sampling steps after which the
        probe aborts it (`LLMEngine.abort_request`, between two engine steps, as a
        client disconnecting does); its last output is kept in `partials`.
        """
        self.reset_prefix_cache()
        self.tap.reset()
        self.logger.take()
        before = prometheus_spec_counters(self.llm)
        tokens_before = prometheus_token_counters(self.llm)
        for rid, prompt, params, eos in entries:
            self.add(rid, prompt, params, eos)
        finals: dict[str, Any] = {}
        #: The latest output of every request (cumulative token ids), and how many steps gave one.
        latest: dict[str, Any] = {}
        sampled_steps: dict[str, int] = {}
        #: Aborted request -> the index of the last step record before its abort.
        aborted: dict[str, int] = {}
        n = 0
        try:
            while self.engine.has_unfinished_requests():
                n += 1
                if n > MAX_STEPS:
                    stuck = [rid for rid, *_ in entries if rid not in finals]
                    raise DidNotFinish(
                        f"the batch did not finish within {MAX_STEPS} engine steps; unfinished: "
                        f"{self._describe(stuck)}"
                    )
                for out in self.engine.step():
                    latest[out.request_id] = out
                    sampled_steps[out.request_id] = sampled_steps.get(out.request_id, 0) + 1
                    if out.finished:
                        finals[out.request_id] = out
                due = [
                    rid
                    for rid, after in (aborts or {}).items()
                    if rid not in finals and rid not in aborted and sampled_steps.get(rid) == after
                ]
                if due:
                    self.engine.abort_request(due)
                    for rid in due:
                        aborted[rid] = len(self.tap.records) - 1
        except BaseException:
            # The next run must start from an idle engine, not behind this run's leftovers.
            self._abort([rid for rid, *_ in entries if rid not in finals and rid not in aborted])
            raise
        records, tap_stats = self.tap.take()
        logged = self.logger.take()
        after = prometheus_spec_counters(self.llm)
        tokens_after = prometheus_token_counters(self.llm)
        return {
            "records": records,
            "tap_stats": tap_stats,
            "logged": logged,
            "prometheus": counter_delta(before, after, self.k),
            "prometheus_tokens": {
                name: tokens_after[name] - tokens_before[name] for name in tokens_after
            },
            "finals": finals,
            "partials": {rid: latest[rid] for rid in aborted},
            "aborted": aborted,
        }


def _model_runner(core: Any) -> Any:
    """The in-process model runner (uniprocess executor -> worker wrapper -> worker), or None."""
    obj = core
    for name in ("model_executor", "driver_worker", "worker", "model_runner"):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _effective_settings(core: Any) -> dict[str, Any]:
    """What the engine really runs with (the platform may override a setting): for the evidence."""
    cache = core.vllm_config.cache_config
    sched = core.vllm_config.scheduler_config
    return {
        "block_size": getattr(cache, "block_size", None),
        "num_gpu_blocks": getattr(cache, "num_gpu_blocks", None),
        "enable_prefix_caching": getattr(cache, "enable_prefix_caching", None),
        "max_num_batched_tokens": getattr(sched, "max_num_batched_tokens", None),
        "enable_chunked_prefill": getattr(sched, "enable_chunked_prefill", None),
        "async_scheduling": getattr(sched, "async_scheduling", None),
    }

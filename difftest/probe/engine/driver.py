"""One planned run on the shared engine: sampling parameters, truncation cuts, priming, the
record."""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import conditions
from ..common import stats
from ..protocol import REQUEST_METRICS_NOTE, TOKEN_COUNTERS_NOTE, RunResult
from . import truncation
from .session import EngineSession


def _sampling_params(
    req: dict[str, Any], cut: dict[str, Any] | None, seed: int
) -> tuple[Any, int | None]:
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    kwargs: dict[str, Any] = {"temperature": 0.0, "max_tokens": int(req["max_tokens"])}
    structured = req.get("structured")
    if structured:
        kwargs["structured_outputs"] = StructuredOutputsParams(**structured)
    # A reference run (cut not chosen yet) runs without min_tokens: the cut comes from the output
    # with nothing held back.
    if req.get("min_tokens") and cut is not None:
        kwargs["min_tokens"] = int(req["min_tokens"])
        if cut is not None and int(cut["position"]) >= int(req["min_tokens"]):
            # The scenario's, not the branch's: it reads "could not measure".
            raise ValueError(
                f"request {req['id']!r}: min_tokens {req['min_tokens']} does not hold back its "
                f"{cut['kind']} cut at output position {cut['position']}: raise min_tokens above "
                f"{cut['position']}"
            )
    eos = None
    if cut is not None:
        if cut["kind"] == "stop":
            kwargs["stop_token_ids"] = [cut["token"]]
        elif cut["kind"] in ("max_tokens", "boundary"):
            kwargs["max_tokens"] = int(cut["max_tokens"])
        elif cut["kind"] == "eos":
            eos = int(cut["token"])
            kwargs["ignore_eos"] = bool(req.get("ignore_eos"))
        elif cut["kind"] == "stop_string":
            kwargs["stop"] = [str(cut["stop_string"])]
            kwargs["include_stop_str_in_output"] = bool(req.get("include_stop_str_in_output"))
    return SamplingParams(**kwargs), eos


def _spec_metrics(completion: Any) -> dict[str, Any] | None:
    """The request's per-request spec-decode metrics as the response carries them (`to_dict()`,
    vLLM's `metrics.speculative_decoding`); None where the branch returned none."""
    metrics = getattr(completion, "spec_decode_metrics", None)
    to_dict = getattr(metrics, "to_dict", None)
    return dict(to_dict()) if callable(to_dict) else None


def _steps_agree(logged: list[Any], tapped: list[Any]) -> bool:
    """The stat logger saw exactly the stats the scheduler returned, step by step."""
    a = [stats.stats_dict(s) for s in logged if s is not None]
    b = [stats.stats_dict(s) for s in tapped]
    return a == b


#: The serving conditions (`probe.conditions`) the engine probe plays (engine settings through
#: `EngineSession`, aborts here); a scenario that sets another is refused.
PLAYED_CONDITIONS = frozenset(
    {
        "async_scheduling",
        "prefix_caching",
        "kv_blocks",
        "max_num_batched_tokens",
        "per_request_metrics",
        "abort",
    }
)


def run_one(
    session: EngineSession,
    scenario: dict[str, Any],
    run: dict[str, Any],
    cuts: dict[str, dict[str, Any]],
) -> RunResult:
    """One planned run of `scenario` on the shared engine; raises on any failure.

    `cuts` is the scenario's state across runs: a reference run stores the cut it
    chose for its request, and the later runs of that request use it.
    """
    from vllm.v1.spec_decode.metrics import SpecDecodingLogging, SpecDecodingStats

    conditions.refuse_unplayed("engine", scenario, PLAYED_CONDITIONS)
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
                raise RuntimeError(
                    f"no truncation point for request {rid!r}: "
                    "its reference run failed or did not run"
                )
            cut = used_cuts[rid] = cuts[rid]
        params, eos = _sampling_params(req, cut, int(scenario.get("seed", 0)))
        prompts[rid] = _prompt_ids(session, req, cuts)
        if len(prompts[rid]) < 2:
            raise ValueError(
                f"request {rid!r}: the prompt is {len(prompts[rid])} token(s); use >= 2 (#50518)"
            )
        entries.append((rid, {"prompt_token_ids": prompts[rid]}, params, eos))
    aborts = {rid: int(specs[rid]["abort"]) for rid in run["order"] if specs[rid].get("abort")}
    played = session.play(entries, aborts)

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
        returned = _spec_metrics(completion)
        if returned is not None:
            per_request[rid] = returned
        texts[rid] = completion.text
    for rid, last in played["partials"].items():
        # Aborted: the engine sends no final output; its last one holds every token emitted.
        outputs[rid] = [int(t) for t in last.outputs[0].token_ids]
        finish[rid] = "abort"
        texts[rid] = last.outputs[0].text

    logged = [s for s in played["logged"] if s is not None]
    logged_dicts = [d for s in logged if (d := stats.stats_dict(s)) is not None]
    field_names = [f.name for f in dataclasses.fields(SpecDecodingStats)]
    mean, notes = stats.branch_mean(SpecDecodingLogging, logged)
    totals = stats.totals(logged_dicts, mean, session.k, field_names)
    tap_totals = stats.totals(
        [s for s in (r.get("stats") for r in played["records"]) if s], mean, session.k, field_names
    )
    notes.update(
        engine=session.cfg,
        prompt_token_ids=prompts,
        outputs_text=texts,
        stop_reasons=stop_reasons,
        **{REQUEST_METRICS_NOTE: per_request, TOKEN_COUNTERS_NOTE: played["prometheus_tokens"]},
        prometheus=played["prometheus"],
        stat_logger_steps=len(played["logged"]),
        scheduler_totals={k: tap_totals[k] for k in stats.CORE_FIELDS},
        stat_logger_matches_scheduler=_steps_agree(played["logged"], played["tap_stats"]),
        tokenizer_eos=session.tokenizer_eos,
        steps=len(played["records"]),
    )
    if aborts:
        # Where each abort landed: after the request's n-th sampling step, after step record
        # `after_step`.
        notes["abort"] = {
            rid: {
                "after_steps": n,
                "applied": rid in played["aborted"],
                "after_step": played["aborted"].get(rid),
            }
            for rid, n in aborts.items()
        }
        missed = {rid: n for rid, n in aborts.items() if rid not in played["aborted"]}
        if missed:
            # The scenario's, not the branch's: it reads "could not measure" (unless the baseline
            # lands it), never a verdict on counters of a run that did not test an abort.
            raise ValueError(
                "abort never landed: "
                + ", ".join(
                    f"request {rid} finished ({finish.get(rid)}) before its {n}th sampling step"
                    for rid, n in missed.items()
                )
                + "; lower abort"
            )
    if used_cuts:
        notes["truncation"] = {
            rid: _with_outcome(c, finish.get(rid), stop_reasons.get(rid))
            for rid, c in used_cuts.items()
        }
        for rid, cut in used_cuts.items():
            if cut["kind"] == "eos" and specs[rid].get("ignore_eos"):
                notes["truncation"][rid]["ignore_eos"] = True
            if specs[rid].get("min_tokens"):
                notes["truncation"][rid]["min_tokens"] = int(specs[rid]["min_tokens"])
            if cut["kind"] == "stop_string":
                # What the user got (checked on the host against the reference run's text).
                notes["truncation"][rid].update(
                    text=texts.get(rid),
                    include_stop_str_in_output=bool(specs[rid].get("include_stop_str_in_output")),
                )
    if reference:
        rid = run["order"][0]
        kind = specs[rid].get("truncate", "none")
        if kind != "none":
            avoid = {t for t in (session.tokenizer_eos,) if t is not None}
            cuts[rid] = truncation.choose(
                kind,
                rid,
                played["records"],
                outputs.get(rid, []),
                avoid,
                session.detokenize,
                int(specs[rid].get("stop_string_tokens") or 1),
                texts.get(rid),
                specs[rid].get("place") or "accepted",
            )
            notes["truncation_choice"] = cuts[rid]
    return {
        "steps": played["records"],
        "totals": totals,
        "outputs": outputs,
        "finish_reasons": finish,
        "notes": notes,
    }


def _prompt_ids(session: EngineSession, req: dict[str, Any], state: dict[str, Any]) -> list[int]:
    """The request's prompt tokens; with `prime: m`, followed by the model's own first m greedy
    tokens (under the request's grammar, where it has one).

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
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams

        kwargs: dict[str, Any] = {"temperature": 0.0, "max_tokens": m}
        if req.get("structured"):
            # The grammar's own greedy path: what the request will generate, for ngram to draft.
            kwargs["structured_outputs"] = StructuredOutputsParams(**req["structured"])
        played = session.play([(key, {"prompt_token_ids": ids}, SamplingParams(**kwargs), None)])
        state[key] = ids + [int(t) for t in played["finals"][key].outputs[0].token_ids]
    return list(state[key])


def _with_outcome(cut: dict[str, Any], finish: str | None, stop_reason: Any) -> dict[str, Any]:
    """The cut used, plus how the request really ended (EOS: finish `stop`, no stop_reason)."""
    return {**cut, "finish_reason": finish, "stop_reason": stop_reason}

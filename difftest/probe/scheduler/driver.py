"""Plays one (scenario, order) against the real scheduler and records every step.

The probe is the model: after `schedule()` it verifies the scheduled drafts
against the scripted target (`script.verify`) and hands the sampled tokens to
`update_from_output`, exactly as a model runner would. Drafts reach the
scheduler the way the engine delivers them:
- sync: `update_draft_token_ids` after each step (grammar trims drafts first);
  where the runner skipped drafting (`drafter.skipped`) it delivers k zeros in
  a `DraftTokenIds` of their own, flagged `drafting_skipped` where the branch
  defines that field (feature-detected: a branch without it gets the bare
  zero-fill, as its own runner would send);
- async: `AsyncScheduler` schedules k placeholders, then
  `update_draft_token_ids_in_output` fills them before sampling, padding
  grammar-invalid drafts with -1 (as `EngineCore.step_with_batch_queue`).
What the scheduler emitted is read back from the `EngineCoreOutputs` it returns.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.spec_decode.metrics import SpecDecodingLogging, SpecDecodingStats

from ..common import stats
from ..protocol import DidNotFinish, RunResult, StepRecord, step_record
from . import script
from .factory import SchedulerFactory

MAX_STEPS = 20000


class _Request:
    """The script's view of one request: its target stream and how many steps it has completed."""

    def __init__(self, spec: dict[str, Any], seed: int) -> None:
        self.spec = spec
        self.target = script.target_stream(spec, seed)
        self.steps_done = 0


def _has_skip_flag() -> bool:
    """Whether this branch's `DraftTokenIds` can say that the runner skipped drafting (#54054's
    field)."""
    try:
        return "drafting_skipped" in {f.name for f in dataclasses.fields(DraftTokenIds)}
    except TypeError:  # not a dataclass on this branch: ask its constructor
        try:
            return "drafting_skipped" in inspect.signature(DraftTokenIds).parameters
        except (TypeError, ValueError):
            return False


HAS_SKIP_FLAG = _has_skip_flag()


def deliver_drafts(scheduler: Any, drafts: dict[str, list[int]], skipped: set[str]) -> None:
    """Hand the scheduler the runner's drafts: real ones in one call, a skipped drafter's zero-fill
    in another.

    vLLM's runner decides skipping for the whole batch, so one `DraftTokenIds` is
    either skipped or not; the scheduler handles each request on its own, so two
    calls are what a batch-wide skip looks like for the requests concerned.
    """
    real = [rid for rid in drafts if rid not in skipped]
    zero_filled = [rid for rid in drafts if rid in skipped]
    if real:
        scheduler.update_draft_token_ids(
            DraftTokenIds(req_ids=real, draft_token_ids=[drafts[r] for r in real])
        )
    if zero_filled:
        flag = {"drafting_skipped": True} if HAS_SKIP_FLAG else {}
        scheduler.update_draft_token_ids(
            DraftTokenIds(
                req_ids=zero_filled, draft_token_ids=[drafts[r] for r in zero_filled], **flag
            )
        )


def run_order(factory: SchedulerFactory, scenario: dict[str, Any], order: list[str]) -> RunResult:
    """One run of `order`; raises on any failure (the protocol's loop records it)."""
    k = int(scenario["k"])
    path = scenario.get("draft_path", "sync")
    seed = int(scenario.get("seed", 0))
    specs = {r["id"]: r for r in scenario["requests"]}
    reqs = {rid: _Request(specs[rid], seed) for rid in order}

    scheduler = factory.scheduler(k, path, factory.blocks_for([specs[rid] for rid in order], k))
    for rid in order:
        scheduler.add_request(factory.request(scheduler, specs[rid]))

    def proposal(rid: str) -> tuple[list[int], bool]:
        r = reqs[rid]
        position = len(scheduler.requests[rid].output_token_ids)
        return script.runner_drafts(r.spec, seed, k, r.target, position, r.steps_done - 1)

    steps: list[StepRecord] = []
    stats_objects: list[Any] = []
    outputs: dict[str, list[int]] = {rid: [] for rid in order}
    finish: dict[str, str] = {}
    #: Requests whose drafts for the coming step came from a runner that skipped drafting.
    skipped_next: set[str] = set()
    step = 0
    while scheduler.has_requests():
        if step >= MAX_STEPS:
            raise DidNotFinish(f"the batch did not finish within {MAX_STEPS} scheduler steps")
        out = scheduler.schedule()
        scheduled = list(out.num_scheduled_tokens)
        if path == "async":
            with_drafts = [rid for rid in scheduled if out.scheduled_spec_decode_tokens.get(rid)]
            if with_drafts:
                scheduler.update_draft_token_ids_in_output(
                    DraftTokenIds(
                        req_ids=with_drafts,
                        draft_token_ids=[proposal(rid)[0] for rid in with_drafts],
                    ),
                    out,
                )
        drafts = {rid: list(out.scheduled_spec_decode_tokens.get(rid) or []) for rid in scheduled}
        invalid = dict(out.num_invalid_spec_tokens or {})

        sampled: dict[str, list[int]] = {}
        for rid in scheduled:
            request = scheduler.requests[rid]
            if request.is_prefill_chunk:  # set by schedule(): a partial prefill samples nothing
                sampled[rid] = []
                continue
            position = len(request.output_token_ids)
            sampled[rid] = script.verify(reqs[rid].target, position, drafts[rid])
        runner_out = ModelRunnerOutput(
            req_ids=scheduled,
            req_id_to_index={rid: i for i, rid in enumerate(scheduled)},
            sampled_token_ids=[list(sampled[rid]) for rid in scheduled],
        )
        engine_outputs = scheduler.update_from_output(out, runner_out)

        emitted: dict[str, list[int]] = {}
        finished: dict[str, str] = {}
        step_stats = None
        for eco in engine_outputs.values():
            for o in eco.outputs:
                emitted[o.request_id] = list(o.new_token_ids)
                outputs.setdefault(o.request_id, []).extend(o.new_token_ids)
                if o.finish_reason is not None:
                    finished[o.request_id] = str(o.finish_reason)
            if (
                eco.scheduler_stats is not None
                and eco.scheduler_stats.spec_decoding_stats is not None
            ):
                step_stats = eco.scheduler_stats.spec_decoding_stats
        finish.update(finished)
        for rid in scheduled:
            reqs[rid].steps_done += 1
        if step_stats is not None:
            stats_objects.append(step_stats)

        skipped_now = [rid for rid in scheduled if rid in skipped_next]
        skipped_next = set()
        if path == "sync":
            live = [
                rid
                for rid in scheduled
                if rid in scheduler.requests and not scheduler.requests[rid].is_finished()
            ]
            proposals = {rid: proposal(rid) for rid in live}
            skipped_next = {rid for rid, (_d, skip) in proposals.items() if skip}
            deliver_drafts(scheduler, {rid: d for rid, (d, _s) in proposals.items()}, skipped_next)
        if not scheduled and step_stats is None and not emitted:
            step += 1
            continue  # the bookkeeping step after the last request finished
        steps.append(
            step_record(
                step,
                scheduled,
                drafts,
                invalid,
                sampled,
                emitted,
                finished,
                stats.stats_dict(step_stats),
                skipped_now,
            )
        )
        step += 1

    mean, notes = stats.branch_mean(SpecDecodingLogging, stats_objects)
    notes["steps"] = step
    notes["outputs_text"] = {rid: script.text(toks) for rid, toks in outputs.items()}
    step_dicts = [s["stats"] for s in steps if s["stats"] is not None]
    return {
        "steps": steps,
        "totals": stats.totals(
            step_dicts, mean, k, [f.name for f in dataclasses.fields(SpecDecodingStats)]
        ),
        "outputs": outputs,
        "finish_reasons": finish,
        "notes": notes,
    }

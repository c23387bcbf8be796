"""Plays one (scenario, order) against the real scheduler, as vLLM's engine core drives it, and
records every step.

The probe is the model runner: after `schedule()` it verifies the scheduled
drafts against the scripted target (`script.verify`) and hands the sampled
tokens to `update_from_output`. The loop is `EngineCore.step_with_batch_queue`'s:
- one step in flight (`in_flight: 1`): schedule, execute, update;
- two in flight (`in_flight: 2`, async path): step N+1 is scheduled before the
  output of step N is processed; N+1 executes once N's output is known, as the
  deferred (structured-output) path of the engine core does.
Drafts reach the scheduler the way the engine delivers them:
- sync: `update_draft_token_ids` after each step, for the requests that sampled
  in it (grammar trims drafts first); where the runner skipped drafting
  (`drafter.skipped`) it delivers k zeros in a `DraftTokenIds` of their own,
  flagged `drafting_skipped` where the branch defines that field
  (feature-detected: a branch without it gets the bare zero-fill);
- async: `AsyncScheduler` schedules k placeholders, then
  `update_draft_token_ids_in_output` fills them before sampling, padding
  grammar-invalid drafts with -1. A request the scheduler admitted in this very
  step (new, or resumed after a preemption) has no drafts in the runner: its
  placeholders (the scheduler's `-1` padding of a new decode) stay unfilled.
Serving conditions are played as the scenario says: requests arrive before a
given step, an abort lands between `schedule()` and `update_from_output()` with
the aborted request's tokens still in the model output, and the factory builds
the scheduler with prefix caching, a decode node's KV connector (its asynchronous
loads reported finished with the output of the step that started them), a small
KV pool, a small token budget or a short context. What the scheduler emitted is read back from the
`EngineCoreOutputs` it returns.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.outputs import DraftTokenIds, KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import RequestStatus
from vllm.v1.spec_decode.metrics import SpecDecodingLogging, SpecDecodingStats

from .. import conditions
from ..common import intervals, stats
from ..protocol import (
    INTERVALS_NOTE,
    REQUEST_METRICS_NOTE,
    RESET_NOTE,
    DidNotFinish,
    RunResult,
    StepRecord,
    step_record,
)
from . import script
from .factory import SchedulerFactory, Shape

MAX_STEPS = 20000
#: The serving conditions (`probe.conditions`) this driver and its factory play; a scenario that
#: sets another is refused (`refuse_unplayed`), never run as if it were not there.
PLAYED_CONDITIONS = frozenset(
    {
        "spec_decoding",
        "in_flight",
        "prefix_caching",
        "kv_connector",
        "kv_blocks",
        "max_num_batched_tokens",
        "max_model_len",
        "per_request_metrics",
        "log_every",
        "reset_prefix_cache",
        "arrive",
        "abort",
    }
)


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


@dataclass
class _Request:
    """The script's view of one request: its target stream, what it emitted, and how many of its
    sampling steps the scheduler has taken (the prefill's included)."""

    spec: dict[str, Any]
    target: list[int]
    output: list[int] = field(default_factory=list)
    delivered: int = 0
    finished: bool = False

    @property
    def abort_at(self) -> int | None:
        value = self.spec.get("abort")
        return None if value is None else int(value)


@dataclass
class _Scheduled:
    """One `schedule()` and what the model runner did with it."""

    number: int
    out: Any
    scheduled: list[str]
    #: Requests still prefilling after this step's chunk: they sample nothing.
    chunked: set[str]
    #: Requests the scheduler took from its waiting queue this step (new or resumed).
    admitted: set[str]
    drafts: dict[str, list[int]] = field(default_factory=dict)
    invalid: dict[str, int] = field(default_factory=dict)
    sampled: dict[str, list[int]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    executed: bool = False
    #: Requests whose output of this step the scheduler drops (in flight at a prefix-cache reset).
    dropped: set[str] = field(default_factory=set)


class _Play:
    """One run: the scheduler, the requests, the steps in flight, the records."""

    def __init__(self, factory: SchedulerFactory, scenario: dict[str, Any], order: list[str]):
        self.factory = factory
        self.shape = Shape.of(scenario)
        self.k = self.shape.k
        self.seed = int(scenario.get("seed", 0))
        self.in_flight = int(scenario.get("in_flight", 1))
        self.log_every = int(scenario.get("log_every") or 0)
        reset = scenario.get("reset_prefix_cache")
        #: The step after whose output the engine core resets the prefix cache (None: never).
        self.reset_after = None if reset is None else int(reset)
        #: The requests that reset preempted (None: it has not landed).
        self.reset_preempted: list[str] | None = None
        specs = {r["id"]: r for r in scenario["requests"]}
        self.order = order
        self.reqs = {
            rid: _Request(specs[rid], script.target_stream(specs[rid], self.seed)) for rid in order
        }
        blocks = scenario.get("kv_blocks") or factory.blocks_for([specs[r] for r in order], self.k)
        self.scheduler = factory.scheduler(self.shape, int(blocks))
        #: Requests not yet added, in the order they are added (by arrival step, then order).
        self.arrivals = sorted(
            order, key=lambda rid: (int(specs[rid].get("arrive", 0)), order.index(rid))
        )
        self.queue: deque[_Scheduled] = deque()
        #: Requests whose drafts for their next step came from a runner that skipped drafting.
        self.skipped_next: set[str] = set()
        self.steps: list[StepRecord] = []
        self.stats_objects: list[Any] = []
        #: The engine step (`schedule()` call) each of `stats_objects` came from.
        self.stats_steps: list[int] = []
        self.finish: dict[str, str] = {}
        #: Requests parked for an asynchronous KV load -> the step that started it; the load is
        #: reported finished with that step's output.
        self.loading: dict[str, int] = {}
        #: Per-request spec-decode metrics a finished request returned (`to_dict()`).
        self.request_metrics: dict[str, dict[str, Any]] = {}
        self.scheduled_count = 0

    # -- the engine loop --------------------------------------------------------------

    def run(self) -> RunResult:
        tick = 0
        while self.arrivals or self.scheduler.has_requests() or self.queue:
            if tick >= MAX_STEPS:
                raise DidNotFinish(f"the batch did not finish within {MAX_STEPS} scheduler steps")
            self._arrive(tick)
            self._engine_step()
            tick += 1
        if self.reset_after is not None and self.reset_preempted is None:
            # The scenario's, not the branch's: every branch reads "could not measure" rather than
            # a pass under a condition that never happened.
            raise ValueError(
                f"reset_prefix_cache: {self.reset_after} never landed: this batch ended after "
                f"{self.scheduled_count} schedule() call(s); lower it"
            )
        return self._result()

    def _arrive(self, tick: int) -> None:
        while self.arrivals and int(self.reqs[self.arrivals[0]].spec.get("arrive", 0)) <= tick:
            rid = self.arrivals.pop(0)
            request = self.factory.request(
                self.scheduler, self.reqs[rid].spec, self.shape.prefix_caching
            )
            self.scheduler.add_request(request)

    def _engine_step(self) -> None:
        """`EngineCore.step_with_batch_queue`: schedule if there is work, then (once the queue is
        full or nothing more can be scheduled) process the oldest step's output."""
        if self.scheduler.has_requests():
            running = {r.request_id for r in self.scheduler.running}
            new = self._schedule(running)
            if not self.queue:  # nothing in flight before it: its inputs are known now
                self._execute(new)
            self.queue.append(new)
            if len(self.queue) < self.in_flight and (
                new.out.total_num_scheduled_tokens > 0 or self.scheduler.has_requests()
            ):
                return
        if not self.queue:
            return
        self._deliver(self.queue.popleft())
        for waiting in self.queue:  # the step scheduled while this one was in flight
            if not waiting.executed:
                self._execute(waiting)

    def _schedule(self, running: set[str]) -> _Scheduled:
        out = self.scheduler.schedule()
        number = self.scheduled_count
        self.scheduled_count += 1
        scheduled = list(out.num_scheduled_tokens)
        for rid, req in self.scheduler.requests.items():
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS and rid not in self.loading:
                self.loading[rid] = number
        chunked = {
            rid
            for rid in scheduled
            if getattr(self.scheduler.requests.get(rid), "is_prefill_chunk", False)
        }
        return _Scheduled(
            number, out, scheduled, chunked, {rid for rid in scheduled if rid not in running}
        )

    def _execute(self, step: _Scheduled) -> None:
        """The model runner: fill the async placeholders, then verify every scheduled draft."""
        out = step.out
        if self.shape.path == "async" and self.shape.spec_decoding:
            fill = [
                rid
                for rid in step.scheduled
                if out.scheduled_spec_decode_tokens.get(rid)
                and rid not in step.admitted
                and self.reqs[rid].delivered >= 1
                and not self.reqs[rid].finished
            ]
            if fill:
                self.scheduler.update_draft_token_ids_in_output(
                    DraftTokenIds(
                        req_ids=fill, draft_token_ids=[self._proposal(rid)[0] for rid in fill]
                    ),
                    out,
                )
        step.drafts = {
            rid: list(out.scheduled_spec_decode_tokens.get(rid) or []) for rid in step.scheduled
        }
        step.invalid = dict(out.num_invalid_spec_tokens or {})
        for rid in step.scheduled:
            if rid in step.chunked:
                step.sampled[rid] = []  # a partial prefill samples nothing
                continue
            req = self.reqs[rid]
            # The model computes the tokens scheduled for the request: one sampled position and
            # the draft slots after it, whatever the draft list says beyond them.
            drafts = step.drafts[rid][: max(0, out.num_scheduled_tokens[rid] - 1)]
            if req.finished:  # in flight when it ended: the runner samples, the scheduler discards
                step.sampled[rid] = _stand_in(req.target, len(req.output), drafts)
            else:
                step.sampled[rid] = script.verify(req.target, len(req.output), drafts)
        # Whether or not the branch scheduled the zero-fill.
        step.skipped = [rid for rid in step.scheduled if rid in self.skipped_next]
        step.executed = True

    def _deliver(self, step: _Scheduled) -> None:
        """Aborts due now, then `update_from_output`, then (sync) the runner's next drafts."""
        aborted = []
        for rid in step.scheduled:
            req = self.reqs[rid]
            # A step the scheduler drops (in flight at a prefix-cache reset) is none of the
            # request's steps: its abort lands on the step that samples in its place.
            if (
                step.sampled.get(rid)
                and rid not in step.dropped
                and not req.finished
                and req.abort_at == req.delivered
            ):
                self.scheduler.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
                req.finished = True
                self.finish[rid] = "abort"
                aborted.append(rid)
        loaded = {rid for rid, started in self.loading.items() if started <= step.number}
        for rid in loaded:
            del self.loading[rid]
        runner_out = ModelRunnerOutput(
            req_ids=step.scheduled,
            req_id_to_index={rid: i for i, rid in enumerate(step.scheduled)},
            sampled_token_ids=[list(step.sampled[rid]) for rid in step.scheduled],
            kv_connector_output=KVConnectorOutput(finished_recving=loaded) if loaded else None,
        )
        engine_outputs = self.scheduler.update_from_output(step.out, runner_out)
        emitted: dict[str, list[int]] = {}
        finished: dict[str, str] = {}
        step_stats = None
        for eco in engine_outputs.values():
            for o in eco.outputs:
                emitted[o.request_id] = list(o.new_token_ids)
                if o.request_id in self.reqs:
                    self.reqs[o.request_id].output.extend(o.new_token_ids)
                if o.finish_reason is not None:
                    finished[o.request_id] = str(o.finish_reason)
                    returned = getattr(o, "spec_decode_metrics", None)
                    if returned is not None:
                        self.request_metrics[o.request_id] = returned.to_dict()
            if (
                eco.scheduler_stats is not None
                and eco.scheduler_stats.spec_decoding_stats is not None
            ):
                step_stats = eco.scheduler_stats.spec_decoding_stats
        self.finish.update(finished)
        sampled_now = []
        for rid in step.scheduled:
            req = self.reqs[rid]
            if step.sampled.get(rid) and not req.finished and rid not in step.dropped:
                req.delivered += 1
                sampled_now.append(rid)
            if rid in finished:
                req.finished = True
        if step_stats is not None:
            self.stats_objects.append(step_stats)
            self.stats_steps.append(step.number)
        self.skipped_next = set()
        if self.shape.path == "sync" and self.shape.spec_decoding:
            # Drafts for every request of the batch still running, as the engine's runner hands
            # them over; a request still prefilling gets the drafter's proposal too, which the
            # scheduler must ignore (`update_draft_token_ids` drops drafts of a prefill chunk).
            live = [
                rid
                for rid in step.scheduled
                if (rid in sampled_now or rid in step.chunked)
                and not self.reqs[rid].finished
                and rid in self.scheduler.requests
            ]
            proposals = {rid: self._proposal(rid) for rid in live}
            self.skipped_next = {rid for rid, (_d, skip) in proposals.items() if skip}
            deliver_drafts(
                self.scheduler, {rid: d for rid, (d, _s) in proposals.items()}, self.skipped_next
            )
        preempted = sorted(step.out.preempted_req_ids or ())
        reset = self._reset_prefix_cache() if step.number == self.reset_after else []
        if not step.scheduled and step_stats is None and not emitted and not (preempted or reset):
            return  # an empty step (waiting for an arrival), or bookkeeping after the last finish
        self.steps.append(
            step_record(
                step.number,
                step.scheduled,
                step.drafts,
                step.invalid,
                step.sampled,
                emitted,
                finished,
                stats.stats_dict(step_stats),
                step.skipped,
                tokens=dict(step.out.num_scheduled_tokens),
                preempted=preempted,
                aborted=aborted,
                dropped=sorted(step.dropped),
                reset=reset,
            )
        )

    def _reset_prefix_cache(self) -> list[str]:
        """`Scheduler.reset_prefix_cache(reset_running_requests=True)` as the engine core runs it:
        between two turns of its loop, so with two steps in flight the step scheduled after this
        one is still in flight and its output for the preempted requests is dropped."""
        running = sorted(r.request_id for r in self.scheduler.running)
        self.scheduler.reset_prefix_cache(reset_running_requests=True)
        for waiting in self.queue:
            waiting.dropped |= {rid for rid in waiting.scheduled if rid in running}
        # Their next step recomputes: no drafts the runner proposed before the reset reach it.
        self.skipped_next -= set(running)
        self.reset_preempted = running
        return running

    # -- the model runner's drafter ---------------------------------------------------

    def _proposal(self, rid: str) -> tuple[list[int], bool]:
        """The drafts the runner proposes for the request's next step: (draft ids, skipped). A
        request that has not sampled yet (still prefilling) gets its first decode's proposal."""
        req = self.reqs[rid]
        if not req.delivered:
            first = script.propose(req.spec, self.seed, self.k, req.target, len(req.output), 0)
            return first, False
        return script.runner_drafts(
            req.spec, self.seed, self.k, req.target, len(req.output), req.delivered - 1
        )

    def _result(self) -> RunResult:
        mean, notes = stats.branch_mean(SpecDecodingLogging, self.stats_objects)
        notes["steps"] = self.scheduled_count
        outputs = {rid: self.reqs[rid].output for rid in self.order}
        notes["outputs_text"] = {rid: script.text(toks) for rid, toks in outputs.items()}
        if self.shape.request_metrics != "none":
            notes[REQUEST_METRICS_NOTE] = self.request_metrics
        if self.reset_after is not None:
            notes[RESET_NOTE] = self.reset_preempted
        if self.log_every:
            notes[INTERVALS_NOTE] = intervals.interval_lines(
                SpecDecodingLogging,
                list(zip(self.stats_steps, self.stats_objects, strict=True)),
                self.scheduled_count,
                self.log_every,
            )
        step_dicts = [s["stats"] for s in self.steps if s["stats"] is not None]
        return {
            "steps": self.steps,
            "totals": stats.totals(
                step_dicts, mean, self.k, [f.name for f in dataclasses.fields(SpecDecodingStats)]
            ),
            "outputs": outputs,
            "finish_reasons": self.finish,
            "notes": notes,
        }


def _stand_in(target: list[int], position: int, drafts: list[int]) -> list[int]:
    """What the verifier samples for a request that ended while this step was in flight (its output
    is discarded); past the end of its target, one stand-in token."""
    try:
        return script.verify(target, position, drafts)
    except script.ScriptError:
        return [script.ZERO_FILL]


def run_order(factory: SchedulerFactory, scenario: dict[str, Any], order: list[str]) -> RunResult:
    """One run of `order`; raises on any failure (the protocol's loop records it)."""
    conditions.refuse_unplayed("scheduler", scenario, PLAYED_CONDITIONS)
    return _Play(factory, scenario, order).run()

"""Three independent views of one real engine's spec-decoding stats, captured per run.

- `StepTap` wraps the engine core's `Scheduler.update_from_output` on the
  instance (vLLM's code is untouched): per step it records the tokens and
  drafts that were scheduled, the requests the scheduler preempted, the tokens
  the model sampled, what the scheduler emitted after stop handling, and the
  step's `SpecDecodingStats`. This is what the oracle reads.
- `CaptureLogger` is a stat logger in the engine's `StatLoggerManager`: it gets
  every step's `SchedulerStats` the way any production logger does.
- `prometheus_spec_counters` reads the Prometheus counters via `get_metrics()`;
  they are cumulative per process, so a run's value is a delta. So does
  `prometheus_token_counters` for the generated-token counter and the finished
  requests' generation-token histogram, as a scraper reads them.
- `RunnerTap` wraps the model runner's `_input_fits_in_drafter` on the instance
  and remembers its answer: when it is False the runner skips the drafter and
  zero-fills the next step's drafts (#34734). The oracle needs to know which
  scheduled drafts are that zero-fill; nothing the engine does changes.
A mismatch between these views is itself a finding (an invariant violation).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.metrics.loggers import AggregateStatLoggerBase

from ..common import stats
from ..protocol import COUNTER_TABLE, TOKEN_COUNTERS, StepRecord, prometheus_fields, step_record

#: Prometheus name (without `vllm:` and `_total`) -> SpecDecodingStats field.
PROMETHEUS_FIELDS = prometheus_fields(COUNTER_TABLE)
#: The exported counters that hold one count per draft position.
_PER_POSITION = frozenset(c.name for c in COUNTER_TABLE if c.per_position)


def external_id(internal: str) -> str:
    """`LLMEngine.add_request` appends `-<8 random chars>` to the caller's id; strip it."""
    head, sep, tail = internal.rpartition("-")
    return head if sep and len(tail) == 8 else internal


class CaptureLogger(AggregateStatLoggerBase):
    """Keeps every step's SpecDecodingStats object (None when the step had none)."""

    def __init__(self, vllm_config: Any = None, engine_indexes: list[int] | None = None) -> None:
        self.steps: list[Any] = []

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is not None:
            self.steps.append(scheduler_stats.spec_decoding_stats)

    def log_engine_initialized(self) -> None:
        pass

    def take(self) -> list[Any]:
        out, self.steps = self.steps, []
        return out


class RunnerTap:
    """Remembers whether the model runner skipped the drafter in the step just run.

    vLLM 0.32's runner asks `_input_fits_in_drafter` once per step (batch-wide:
    the longest sequence plus k against the drafter's max model length); a runner
    without that method cannot be observed, and `available` says so.
    """

    METHOD = "_input_fits_in_drafter"

    def __init__(self, runner: Any) -> None:
        self.available = runner is not None and callable(getattr(runner, self.METHOD, None))
        self._skipped = False
        if self.available:
            original = getattr(runner, self.METHOD)

            def observed(*args: Any, **kwargs: Any) -> Any:
                fits = original(*args, **kwargs)
                self._skipped = not fits
                return fits

            setattr(runner, self.METHOD, observed)

    def take(self) -> bool:
        """Whether the last step skipped drafting; cleared, so a step that never asked reads
        False."""
        skipped, self._skipped = self._skipped, False
        return skipped


class StepTap:
    """Records each `update_from_output` call of the engine core's scheduler."""

    def __init__(self, scheduler: Any, runner: RunnerTap | None = None) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.records: list[StepRecord] = []
        self.stats_objects: list[Any] = []
        #: Failures of the tap itself: the run is then an error, never silently incomplete.
        self.errors: list[str] = []
        #: Requests whose drafts for the next step the runner zero-filled (it skipped the drafter).
        self._skipped_next: set[str] = set()
        self._original = scheduler.update_from_output
        scheduler.update_from_output = self._update_from_output

    def reset(self) -> None:
        """Forget whatever an earlier, failed run left behind."""
        self.records, self.stats_objects, self.errors = [], [], []
        self._skipped_next = set()
        if self.runner is not None:
            self.runner.take()

    def take(self) -> tuple[list[StepRecord], list[Any]]:
        """The steps recorded since the last call; raises if the tap failed on any of them."""
        out, errors = (self.records, self.stats_objects), self.errors
        self.records, self.stats_objects, self.errors = [], [], []
        if errors:
            raise RuntimeError(f"difftest's step tap failed on {len(errors)} step(s): {errors[0]}")
        return out

    def _update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        # Snapshot first: stop handling trims the sampled lists IN PLACE (`del new_token_ids[n:]`).
        try:
            sampled = self._sampled(model_runner_output)
        except Exception as exc:  # noqa: BLE001 - the branch's error, recorded below
            sampled = {}
            self.errors.append(f"reading the sampled tokens: {exc!r}")
        # The runner decided (in this step's sample_tokens) whether the NEXT step's drafts are a
        # zero-fill.
        skipped_after = self.runner.take() if self.runner is not None else False
        result = self._original(scheduler_output, model_runner_output)
        try:
            self._record(scheduler_output, sampled, result, skipped_after)
        except Exception as exc:  # noqa: BLE001 - recording must never change what the engine does
            self.errors.append(f"recording step {len(self.records)}: {exc!r}")
        return result

    @staticmethod
    def _sampled(mro: Any) -> dict[str, list[int]]:
        """What the rejection sampler returned per request: accepted drafts + one bonus/recovered
        token."""
        sampled: dict[str, list[int]] = {}
        index = getattr(mro, "req_id_to_index", None) or {}
        tokens = getattr(mro, "sampled_token_ids", None) or []
        for internal, i in index.items():
            if i < len(tokens):
                sampled[external_id(internal)] = [int(t) for t in tokens[i]]
        return sampled

    def _record(
        self, so: Any, sampled: dict[str, list[int]], result: Any, skipped_after: bool
    ) -> None:
        scheduled = [external_id(r) for r in so.num_scheduled_tokens]
        skipped = [rid for rid in scheduled if rid in self._skipped_next]
        self._skipped_next = set(scheduled) if skipped_after else set()
        drafts = {
            external_id(r): [int(t) for t in d]
            for r, d in (so.scheduled_spec_decode_tokens or {}).items()
            if d
        }
        invalid = {
            external_id(r): int(n)
            for r, n in (getattr(so, "num_invalid_spec_tokens", None) or {}).items()
        }
        tokens = {external_id(r): int(n) for r, n in so.num_scheduled_tokens.items()}
        preempted = sorted(external_id(r) for r in getattr(so, "preempted_req_ids", None) or ())
        emitted: dict[str, list[int]] = {}
        finished: dict[str, str] = {}
        step_stats = None
        for eco in (result or {}).values():
            for o in eco.outputs:
                rid = external_id(o.request_id)
                emitted[rid] = [int(t) for t in o.new_token_ids]
                if o.finish_reason is not None:
                    finished[rid] = str(o.finish_reason)
            if (
                eco.scheduler_stats is not None
                and eco.scheduler_stats.spec_decoding_stats is not None
            ):
                step_stats = eco.scheduler_stats.spec_decoding_stats
        if step_stats is not None:
            self.stats_objects.append(step_stats)
        self.records.append(
            step_record(
                len(self.records),
                scheduled,
                drafts,
                invalid,
                sampled,
                emitted,
                finished,
                stats.stats_dict(step_stats),
                skipped,
                tokens=tokens,
                preempted=preempted,
                # The engine core runs one step at a time (async scheduling is off for ngram and
                # on CPU): `LLMEngine.abort_request` lands between steps, never while one is in
                # flight, so no request is aborted between this step's schedule() and here.
                aborted=(),
            )
        )


def prometheus_spec_counters(llm: Any) -> dict[str, Any]:
    """Current values of the spec-decode Prometheus counters, keyed by SpecDecodingStats field."""
    out: dict[str, Any] = {}
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:").removesuffix("_total")
        field = PROMETHEUS_FIELDS.get(name)
        if field is None:
            continue
        if hasattr(metric, "values"):
            prev = out.get(field) or []
            vals = [int(v) for v in metric.values]
            width = max(len(prev), len(vals))
            out[field] = [
                (prev[i] if i < len(prev) else 0) + (vals[i] if i < len(vals) else 0)
                for i in range(width)
            ]
        else:
            out[field] = out.get(field, 0) + int(metric.value)
    return out


def prometheus_token_counters(llm: Any) -> dict[str, int]:
    """Current values of `vllm:generation_tokens` and of the `vllm:request_generation_tokens`
    histogram's sum and count (the generated tokens of each finished request)."""
    out = {name: 0 for name in TOKEN_COUNTERS}
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:").removesuffix("_total")
        if name == "generation_tokens":
            out["generation_tokens"] += int(metric.value)
        elif name == "request_generation_tokens":
            out["request_generation_tokens_sum"] += int(metric.sum)
            out["request_generation_tokens_count"] += int(metric.count)
    return out


def counter_delta(before: dict[str, Any], after: dict[str, Any], k: int) -> dict[str, Any]:
    """after - before, field by field (a counter first seen after the run started at 0)."""
    out: dict[str, Any] = {}
    for field in PROMETHEUS_FIELDS.values():
        a, b = after.get(field), before.get(field)
        if field in _PER_POSITION:
            a = list(a or [0] * k)
            b = list(b or [0] * len(a))
            out[field] = [x - (b[i] if i < len(b) else 0) for i, x in enumerate(a)]
        else:
            out[field] = int(a or 0) - int(b or 0)
    return out

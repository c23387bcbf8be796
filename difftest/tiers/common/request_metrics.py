"""Per-request spec-decode metrics: what a correct branch returns, and where a branch differs.

vLLM returns each finished request's own acceptance figures when
`ObservabilityConfig.per_request_spec_decode_metrics` is `summary` or
`detailed` (`RequestSpecDecodeMetrics.to_dict`, the response's
`metrics.speculative_decoding`). They are one request's share of the same
verifications `SpecDecodingStats` sums, so the oracle counts them by the same
rows (`accounting.is_row`): a histogram of accepted drafts per row, the real
draft tokens, the rows. Each figure is checked for what it claims:
- `acceptance_histogram`, `num_spec_steps`, `num_accepted_draft_tokens`,
  `num_draft_tokens` and `draft_acceptance_rate` count verifications (the
  verifier's accepted prefix, as the step counters do);
- `mean_acceptance_length` is the request's tokens per verification step, so,
  as for the logged mean (#56101), the oracle counts the tokens the request
  received in its rows, not `accepted + 1`: a stop inside accepted drafts makes
  vLLM 0.32's figure count tokens the user never got;
- `per_step_accepted` / `per_step_drafted` (`detailed`): the rows in order.
Pure Python: no vLLM.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from difftest.core.records import Difference, ProbeRun, Reading
from difftest.probe.protocol import REQUEST_METRICS_NOTE
from difftest.tiers.common.accounting import Verification, is_row

#: The scenario key and the levels vLLM's knob takes (`none`: nothing is returned or checked).
LEVELS = ("none", "summary", "detailed")
#: The prefix of every per-request difference's counter name, and the one finding reports make of
#: them (its rule: `accounting.RULES`).
PREFIX = "request_metrics."
GROUP = "request_metrics"
#: The figures compared, in report order; the per-step ones only at the `detailed` level.
FIGURES = (
    "acceptance_histogram",
    "num_spec_steps",
    "num_accepted_draft_tokens",
    "num_draft_tokens",
    "draft_acceptance_rate",
    "mean_acceptance_length",
)
PER_STEP = ("per_step_accepted", "per_step_drafted")
#: Floats (rates, means) agree within this.
TOLERANCE = 1e-6


def expected(
    verifications: Iterable[Verification], k: int, reading: Reading, level: str
) -> dict[str, dict[str, Any]]:
    """The figures a correct branch returns for each request with at least one verification."""
    by_request: dict[str, list[Verification]] = {}
    for v in verifications:
        by_request.setdefault(v.request, []).append(v)
    return {
        rid: _figures([v for v in rows if is_row(v, reading)], k, level)
        for rid, rows in by_request.items()
    }


def _figures(rows: list[Verification], k: int, level: str) -> dict[str, Any]:
    histogram = [0] * (k + 1)
    accepted_per_row, drafted_per_row = [], []
    for v in rows:
        real = min(v.real_drafts, k)
        accepted = max(0, min(v.accepted, real))
        histogram[accepted] += 1
        accepted_per_row.append(accepted)
        drafted_per_row.append(real)
    steps, accepted_sum, drafted = len(rows), sum(accepted_per_row), sum(drafted_per_row)
    emitted = sum(v.emitted for v in rows)
    figures: dict[str, Any] = {
        "acceptance_histogram": histogram,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted_sum,
        "num_draft_tokens": drafted,
        "draft_acceptance_rate": accepted_sum / drafted if drafted else 0.0,
        # vLLM's value for a request without a verification step is 1.0.
        "mean_acceptance_length": emitted / steps if steps else 1.0,
    }
    if level == "detailed":
        figures["per_step_accepted"] = accepted_per_row
        figures["per_step_drafted"] = drafted_per_row
    return figures


def differences(
    returned: Mapping[str, Mapping[str, Any]] | None,
    want: Mapping[str, Mapping[str, Any]],
    finished: Mapping[str, str],
    level: str,
    k: int,
) -> list[Difference]:
    """Where the metrics a run returned differ from the oracle's, figure by figure.

    `finished` maps the requests that ended by a stop rule to their finish
    reason (an aborted request gets no final output, so vLLM returns it no
    metrics); each must have its metrics, and those it has must agree with
    `want` (a request missing there made no row).
    """
    got = dict(returned or {})
    out: list[Difference] = []
    names = FIGURES + (PER_STEP if level == "detailed" else ())
    for rid in sorted(set(finished) | set(got)):
        mine = got.get(rid)
        theirs = want.get(rid) or _figures([], k, level)
        if mine is None:
            out.append(
                Difference(
                    counter=f"{PREFIX}missing",
                    measured=None,
                    expected=rid,
                    explanation=f"request {rid}: finished ({finished.get(rid, 'how: unknown')}), "
                    f"but its response holds no per-request spec-decode metrics (level {level})",
                )
            )
            continue
        for name in names:
            if not _equal(mine.get(name, _absent(name)), theirs[name]):
                out.append(
                    Difference(
                        counter=PREFIX + name,
                        measured=mine.get(name),
                        expected=theirs[name],
                        explanation=_why(rid, name, theirs),
                    )
                )
    return out


def _absent(name: str) -> Any:
    # vLLM leaves the per-step lists out of the payload when they are empty.
    return [] if name in PER_STEP else None


def _equal(got: Any, want: Any) -> bool:
    if isinstance(want, float):
        return isinstance(got, int | float) and math.isclose(
            float(got), want, rel_tol=0.0, abs_tol=TOLERANCE
        )
    return bool(got == want)


def _why(rid: str, name: str, want: Mapping[str, Any]) -> str:
    if name == "mean_acceptance_length":
        return (
            f"request {rid}: tokens the request received per verification step "
            f"({want['num_spec_steps']} step(s)), not accepted + 1"
        )
    return f"request {rid}: counted by the same rows as the step counters"


def returned(run: ProbeRun) -> dict[str, Any] | None:
    """The metrics the run's requests returned, as the probe filed them (None: not filed)."""
    value = run.notes.get(REQUEST_METRICS_NOTE)
    return value if isinstance(value, dict) else None


def finished_by_a_rule(run: ProbeRun) -> dict[str, str]:
    """The requests that finished other than by an abort (an aborted request gets no metrics),
    with how they finished (a stop string: `stop`, and the string)."""
    strings = run.notes.get("stop_reasons") or {}
    return {
        rid: f"{why} on stop string {strings[rid]!r}" if isinstance(strings.get(rid), str) else why
        for rid, why in run.finish_reasons.items()
        if why != "abort"
    }


def judged(
    run: ProbeRun, verifications: Iterable[Verification], k: int, reading: Reading, level: str
) -> list[Difference]:
    """The run's returned metrics against the oracle's from `verifications` (the tier's own), for
    every request that finished by a stop rule."""
    return differences(
        returned(run),
        expected(verifications, k, reading, level),
        finished_by_a_rule(run),
        level,
        k,
    )

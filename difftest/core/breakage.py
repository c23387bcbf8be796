"""A branch that crashes or hangs where the baseline completes is `broken`, not "could not measure".

The probe records how each failed run failed (`Failure`: kind, last line,
innermost frame, and whether vLLM's own code raised it); the host records how
the probe process ended (`ProcessOutcome`). One branch's failure alone cannot
tell a regression from a setup problem; next to the baseline it can. Whatever
the branch's own code does where the baseline completes the same work reads
`broken` (exit 1), named with what happened, where, and how long the baseline
took:
- a run that raised inside vLLM's code, or never finished (the driver's step
  budget, the run's time limit);
- runs its process never reported because the process died or was killed
  while its session was running (a crash, `os._exit`, the probe time limit);
- every run of a probe that did not end cleanly after reporting them all (it
  never exited after its trailer, exited non-zero, was killed): a measured run
  of a process that misbehaved never reads as a pass.

Everything else stays `error` (exit 3): difftest's own setup (environment,
import, a record the host rejected, output it could not read, a probe that
cannot drive the branch's API, origin `probe`), any failure the baseline
shares, and any fault of the baseline's own probe (there is nothing to judge
it against).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from difftest.core.outcome import ProcessOutcome
from difftest.core.records import ProbeRun, Result, Violation

#: The invariant a crash or a hang violates.
COMPLETES = "completes-as-on-baseline"
#: The invariant a probe that misbehaves after its last run violates.
EXITS = "exits-as-on-baseline"


class Measured(Protocol):
    """One branch's probe of one tier, as the door sees it: its runs and how its process ended."""

    @property
    def runs(self) -> list[ProbeRun]: ...

    @property
    def outcome(self) -> ProcessOutcome | None: ...


def breakage(run: ProbeRun) -> str | None:
    """How the branch's own code broke this run ("crashed in vLLM: ..."), or None if it did not."""
    failure = run.failure
    if run.measured or failure is None:
        return None
    where = f" at {failure.where}" if failure.where else ""
    if failure.kind in ("did-not-finish", "timeout"):
        return f"did not finish: {failure.summary}{where}"
    if failure.origin == "vllm":
        return f"crashed in vLLM: {failure.summary}{where}"
    return None


def judge_against_baseline(
    results: list[Result], measured: Mapping[str, Measured], baseline: str
) -> list[Result]:
    """`results` with every verdict the process outcomes change: a branch's own crash or hang where
    the baseline completes turned `broken`; a measured run of a probe that did not end cleanly
    turned `broken` (the baseline's ended cleanly) or `error` (nothing to judge it against).

    `measured` holds every branch's probe of this tier (by branch name).
    """
    by_key = {name: {(r.scenario, r.label): r for r in m.runs} for name, m in measured.items()}
    base_runs = by_key.get(baseline, {})
    completed = {key: run for key, run in base_runs.items() if run.measured}
    base = measured.get(baseline)
    base_outcome = base.outcome if base is not None else None
    base_clean = base_outcome is not None and base_outcome.clean
    out = []
    for result in results:
        key = (result.scenario, result.label)
        probe = measured.get(result.branch)
        outcome = probe.outcome if probe is not None else None
        own = by_key.get(result.branch, {})
        if result.verdict == "error":
            why = None
            if result.branch != baseline and key in completed:
                why = _own_breakage(own, key, completed) or _cut_short(outcome, key)
            if why is None:
                out.append(result)
                continue
            took = _took(completed[key])
            violation = Violation(
                invariant=COMPLETES,
                label=result.label,
                detail=f"{why} ({baseline} completes this run{took})",
                cause=why,
            )
            out.append(
                result.model_copy(
                    update={"verdict": "broken", "error": None, "violations": [violation]}
                )
            )
            continue
        fault = _fault_after_runs(outcome)
        if not fault:
            out.append(result)
        elif result.branch != baseline and base_clean and key in completed:
            assert base_outcome is not None
            detail = (
                f"its probe {fault} ({baseline}'s probe reports the same runs and exits cleanly, "
                f"in {base_outcome.duration_s:.1f} s)"
            )
            violation = Violation(
                invariant=EXITS, label=result.label, detail=detail, cause=f"its probe {fault}"
            )
            out.append(
                result.model_copy(
                    update={"verdict": "broken", "violations": [*result.violations, violation]}
                )
            )
        else:
            whose = (
                ""
                if result.branch == baseline
                else f"; {baseline}, the baseline, {_baseline_state(base_outcome)}"
            )
            out.append(
                result.model_copy(
                    update={
                        "verdict": "error",
                        "error": f"its probe {fault}: its runs cannot be trusted{whose}",
                        "differences": [],
                        "violations": [],
                    }
                )
            )
    return out


def _baseline_state(outcome: ProcessOutcome | None) -> str:
    if outcome is None:
        return "was not measured"
    return (
        f"{outcome.fault() or 'did not measure this run'} too"
        if not outcome.clean
        else "did not measure this run"
    )


def _fault_after_runs(outcome: ProcessOutcome | None) -> str:
    """What the process did wrong when every run was reported ("" if nothing, or if its fault cut
    runs short: those runs carry it)."""
    if outcome is None or outcome.clean or outcome.unreported or not outcome.started:
        return ""
    return outcome.fault()


def _cut_short(outcome: ProcessOutcome | None, key: tuple[str, str]) -> str | None:
    """Why the process never reported this run, when its own end cut it short (its session had
    started)."""
    if (
        outcome is None
        or not outcome.started
        or outcome.host_error is not None
        or list(key) not in outcome.unreported
    ):
        return None
    fault = outcome.fault()
    return f"its probe {fault} before reporting this run" if fault else None


def _took(run: ProbeRun) -> str:
    return f" in {run.duration_s:.2f} s" if run.duration_s else ""


def _own_breakage(
    branch_runs: dict[tuple[str, str], ProbeRun],
    key: tuple[str, str],
    completed: Iterable[tuple[str, str]],
) -> str | None:
    """The run's own breakage, or that of a reference run of its scenario (reference runs choose
    where the judged runs are cut: when one breaks, the runs after it cannot be played)."""
    done = set(completed)
    run = branch_runs.get(key)
    why = breakage(run) if run is not None else None
    if why is not None:
        return why
    for ref_key, ref in branch_runs.items():
        if ref_key[0] == key[0] and ref.role == "reference" and ref_key in done:
            ref_why = breakage(ref)
            if ref_why is not None:
                return f"its reference run {ref.label} {ref_why}"
    return None

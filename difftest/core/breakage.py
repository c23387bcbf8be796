"""A branch that crashes or hangs where the baseline completes is `broken`, not "could not measure".

The probe records how each failed run failed (`Failure`: kind, last line,
innermost frame, and whether vLLM's own code raised it). One branch's failure
alone cannot tell a regression from a setup problem; next to the baseline it
can: when the baseline completes the very same (scenario, run) and this branch
raised inside vLLM's code, or never finished (the driver's step budget, the
run's time limit), the branch's own code broke the run. That is a verdict about
the branch (`broken`, exit 1), named with what happened and where.

Everything else stays `error` (exit 3): difftest's own setup (environment,
import, a record the host rejected, a probe that cannot drive the branch's API,
origin `probe`), and any failure the baseline shares.
"""

from __future__ import annotations

from collections.abc import Iterable

from difftest.core.records import ProbeRun, Result, Violation

#: The invariant a crash or a hang violates.
COMPLETES = "completes-as-on-baseline"


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
    results: list[Result], runs: dict[str, Iterable[ProbeRun]], baseline: str
) -> list[Result]:
    """`results` with every `error` that is the branch's own crash or hang turned `broken`.

    `runs` holds every branch's probe runs (by branch name); a result is turned
    only when the baseline measured the same (scenario, label).
    """
    by_key = {name: {(r.scenario, r.label): r for r in branch_runs} for name, branch_runs in runs.items()}
    completed = {key for key, run in by_key.get(baseline, {}).items() if run.measured}
    out = []
    for result in results:
        key = (result.scenario, result.label)
        why = None
        if result.verdict == "error" and result.branch != baseline and key in completed:
            why = _own_breakage(by_key.get(result.branch, {}), key, completed)
        if why is None:
            out.append(result)
            continue
        violation = Violation(invariant=COMPLETES, label=result.label, detail=f"{why} ({baseline} completes this run)")
        out.append(result.model_copy(update={"verdict": "broken", "error": None, "violations": [violation]}))
    return out


def _own_breakage(
    branch_runs: dict[tuple[str, str], ProbeRun], key: tuple[str, str], completed: set[tuple[str, str]]
) -> str | None:
    """The run's own breakage, or that of a reference run of its scenario (reference runs choose
    where the judged runs are cut: when one breaks, the runs after it cannot be played)."""
    run = branch_runs.get(key)
    why = breakage(run) if run is not None else None
    if why is not None:
        return why
    for ref_key, ref in branch_runs.items():
        if ref_key[0] == key[0] and ref.role == "reference" and ref_key in completed:
            ref_why = breakage(ref)
            if ref_why is not None:
                return f"its reference run {ref.label} {ref_why}"
    return None

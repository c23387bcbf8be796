"""What the gate's summary says, decided once for every format (Markdown, terminal).

The verdict line follows `core.gate.gate_exit_code`: worse wins; then what
could not be measured (the base first: without it nothing was compared); "not
worse" only when at least one (scenario, run) was measured on both sides.
"""

from __future__ import annotations

from typing import Literal

from difftest.core.gate import WORSE_KINDS, GateFinding, GateOutcome

Standing = Literal["worse", "unmeasured", "not-verified", "not-worse"]


def headline(outcome: GateOutcome, base: str, head: str) -> tuple[Standing, str]:
    """(standing, the verdict in words); names are inserted as given (escape them first)."""
    if outcome.worse:
        return "worse", f"{head} is worse than {base}"
    if outcome.base_unmeasured:
        return "unmeasured", f"could not measure the base ({base})"
    if outcome.unmeasured:
        return "unmeasured", f"could not measure everything on {head}"
    if outcome.compared == 0:
        return "unmeasured", f"nothing was compared between {base} and {head}"
    if outcome.not_verified:
        return "not-verified", f"{head} is not worse than {base}, but not verified"
    return "not-worse", f"{head} is not worse than {base}"


def coverage_line(outcome: GateOutcome) -> str | None:
    """The head's changed-line coverage in one line (None when nothing was traced); a branch's
    file names are in it: escape it for Markdown."""
    if outcome.coverage is None:
        return None
    return f"Changed code ({outcome.coverage.status}): {outcome.coverage.summary}"


def sections(outcome: GateOutcome) -> list[tuple[str, list[GateFinding]]]:
    """(heading, findings) in the order a reader needs them; empty sections included."""
    return [
        ("Why it is worse", [f for f in outcome.findings if f.kind in WORSE_KINDS]),
        ("Could not measure the base", outcome.base_unmeasured),
        ("Could not measure", outcome.unmeasured),
        ("Still differs from the oracle, as on the base", outcome.unchanged),
        ("Better than the base", outcome.improved),
    ]


def nothing_found(outcome: GateOutcome) -> str:
    """The line for an outcome without findings: never a claim about runs that were not compared."""
    if outcome.compared == 0:
        return (
            "No (scenario, run) was measured on both sides, so nothing can be said about the head."
        )
    return "Every (scenario, run) matches the oracle on the head as on the base."

"""`difftest show` prints run labels and branch names as they were recorded.

Labels such as `order:a` and branch names are evidence, not markup: printed with rich's emoji
codes on, `run order:a: could not ...` would show `:a:` as an emoji and a branch `x:smile:` as
`x` and a face. The console here keeps rich's default (emoji codes on), as `difftest show`'s does.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from difftest.core.evidence import Evidence, ProbeFiles, ScenarioEvidence
from difftest.core.records import ProbeRun
from difftest.reports.show import ShowRequest, show_scenario
from tests.factories import (
    SCENARIO,
    STATEMENT,
    TIER,
    make_evidence,
    make_probe_files,
    make_result,
    make_run,
)

#: `order:a` and the message's colon make `:a:`, an emoji code; `x:smile:` is one itself.
LABELS = ["order:a", "order:a,b"]
BRANCHES = ["main", "x:smile:"]


class NoSteps:
    """Recorded files with no steps for any run: `show` says why there is nothing to show."""

    def scenario(self, name: str) -> object:
        return object()

    def runs(self, branch: str, tier: str) -> list[ProbeRun]:
        return []

    def probe(self, branch: str, tier: str, scenario: str) -> ProbeFiles | None:
        return None


def _shown(evidence: Evidence, branch: str, label: str) -> str:
    out = io.StringIO()
    console = Console(file=out, width=400, highlight=False)
    wanted = ShowRequest(scenario=SCENARIO, branch=branch, order=label)
    show_scenario(evidence, Path("evidence.json"), wanted, NoSteps(), console)
    return out.getvalue()


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("label", LABELS)
def test_a_run_that_could_not_be_measured_is_named_as_recorded(branch: str, label: str) -> None:
    error = f"ImportError in {branch} (:a: :smile:)"
    evidence = make_evidence(
        branches={},
        results=[make_result("error", branch=branch, label=label, error=error)],
        runs={branch: [make_run(label)]},
    )
    printed = _shown(evidence, branch, label)
    assert f"{SCENARIO} · {branch} · run {label}: could not be measured" in printed
    assert f"({error})" in printed


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("label", LABELS)
def test_a_run_without_steps_is_named_as_recorded(branch: str, label: str) -> None:
    evidence = make_evidence(
        branches={},
        results=[make_result("pass", branch=branch, label=label)],
        runs={branch: [make_run(label)]},
        # Probed, so `show` reads the (empty) records.
        probes=[make_probe_files(branch=branch)],
    )
    printed = _shown(evidence, branch, label)
    assert f"{SCENARIO} · {branch} · run {label}: no steps to show (no steps recorded)" in printed


def test_a_skipped_scenario_prints_its_reason_as_recorded() -> None:
    reason = "needs branch x:smile: (:a:)"
    evidence = make_evidence(
        scenarios={
            SCENARIO: ScenarioEvidence(
                file=f"{TIER}/{SCENARIO}.yaml",
                sha256="0" * 64,
                seed=7,
                tier=TIER,
                statement=STATEMENT,
                skipped=reason,
            )
        }
    )
    assert _shown(evidence, "main", "order:a") == f"{SCENARIO}: not run on this base ({reason})\n"

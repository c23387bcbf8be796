"""The terminal report at 80 columns: summary last, names never cut, many branches keyed by letter.

Rendered from hand-built evidence with long branch and scenario names, at
the widths a maintainer's terminal and a CI log have: no line may exceed the
width, no name may lose a character to an ellipsis, and the conclusion ends
the output.
"""

from __future__ import annotations

import pytest
from rich.console import Console

from difftest.core.evidence import ScenarioEvidence
from difftest.core.verdicts import unmeasured
from difftest.reports.chart import acceptance_chart
from difftest.reports.fit import letters, wrap_name
from difftest.reports.terminal import render_terminal
from difftest.reports.views import scenario_views
from tests.factories import make_evidence, make_result, make_totals

LONG_SCENARIO = "engine-stop-token-in-accepted-drafts"


def wide_evidence(branches: list[str]):
    results = []
    for i, branch in enumerate(branches):
        for label in ("order:a,b", "order:b,a", "alone:a"):
            verdict = "diverge" if i % 2 else "pass"
            measured = (
                make_totals(num_emitted_tokens=13, mean_acceptance_length=3.25)
                if verdict == "diverge"
                else make_totals()
            )
            results.append(
                make_result(
                    verdict, branch=branch, scenario=LONG_SCENARIO, label=label, measured=measured
                )
            )
            results.append(make_result("pass", branch=branch, scenario="plain", label=label))
    results += unmeasured(branches[-1], "plain", "scheduler", "", ["order:c"], "boom", "strict")
    scenarios = {
        name: ScenarioEvidence(
            file="x.yaml", sha256="0" * 64, seed=0, tier="scheduler", statement="what it probes"
        )
        for name in (LONG_SCENARIO, "plain")
    }
    scenarios["needs-gpu"] = ScenarioEvidence(
        file="g.yaml", sha256="1" * 64, seed=0, tier="engine", skipped="needs CUDA"
    )
    return make_evidence(results=results, scenarios=scenarios, branches={}, runs=None)


def render(evidence, width: int, verbose: bool = False) -> str:
    console = Console(record=True, width=width)
    render_terminal(evidence, console, verbose=verbose)
    return console.export_text()


@pytest.mark.parametrize("count", [3, 6, 12])
@pytest.mark.parametrize("width", [80, 100])
def test_nothing_is_cut_and_nothing_overflows(count: int, width: int) -> None:
    branches = [f"pr-{56100 + i}-style-variant" for i in range(count)]
    text = render(wide_evidence(branches), width, verbose=True)
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    for name in (LONG_SCENARIO, "plain"):
        assert name in text
    for branch in branches:  # whole, in a header, a legend or the conclusion
        assert branch in text


def test_many_branches_are_keyed_by_letter_with_a_legend() -> None:
    branches = [f"pr-{56100 + i}-style-variant" for i in range(6)]
    text = render(wide_evidence(branches), 80)
    assert "columns: A pr-56100-style-variant · B pr-56101-style-variant" in text


def test_three_short_branches_keep_their_names_in_the_grid() -> None:
    text = render(wide_evidence(["main", "pr-56137-style", "pr-56195-style"]), 80)
    grid = text[text.index("verdicts") :]
    assert "columns:" not in grid
    assert "pr-56137-" in grid and "style" in grid  # broken after the hyphen, not cut


def test_only_failing_scenarios_get_a_table_unless_verbose() -> None:
    evidence = wide_evidence(["main", "fix"])
    quiet, verbose = render(evidence, 80), render(evidence, 80, verbose=True)
    assert f"{LONG_SCENARIO}  [scheduler]" in quiet
    assert "plain  [scheduler]" in quiet  # fix could not measure one run of it: it does not pass
    passing = wide_evidence(["main", "fix"]).model_copy(
        update={"results": [r for r in evidence.results if r.verdict != "error"]}
    )
    assert "plain  [scheduler]" not in render(passing, 80)
    assert "1 scenario(s) pass on every branch: tables left out (-v shows them)" in render(
        passing, 80
    )
    assert "plain  [scheduler]" in render(passing, 80, verbose=True)
    assert verbose.count("[scheduler]") >= 2


def test_scenarios_this_base_cannot_run_are_named_not_shown_as_failures() -> None:
    text = render(wide_evidence(["main"]), 80)
    assert "not run on this base: needs-gpu (needs CUDA)" in text
    assert "not run" not in text.replace("not run on this base", "")


def test_the_summary_ends_with_the_grid_and_the_conclusion() -> None:
    text = render(wide_evidence(["main", "fix"]), 80)
    tail = text.rstrip().splitlines()
    assert tail[-1].startswith("→ ")
    assert text.rindex("verdicts") < text.rindex("conclusion")


def test_wrap_name_breaks_after_separators_and_never_cuts() -> None:
    assert wrap_name("pr-56137-style", 10) == "pr-56137-\nstyle"
    assert wrap_name("main", 2) == "main"
    assert wrap_name("a_very/long.name-x", 7) == "a_very/\nlong.\nname-x"
    assert "".join(wrap_name("pr-56137-style-variant", 4).split("\n")) == "pr-56137-style-variant"
    assert letters(28)[:3] == ["A", "B", "C"] and letters(28)[-2:] == ["AA", "AB"]


def test_the_acceptance_chart_has_a_bar_per_branch_and_position_and_the_oracle() -> None:
    (view,) = [v for v in scenario_views(wide_evidence(["main", "fix"])) if v.name == LONG_SCENARIO]
    chart = acceptance_chart(view)
    assert chart is not None and chart.series == ["main", "fix", "oracle"]
    assert len(chart.bars) == 3 * 3  # k=3 positions x (2 branches + oracle)
    first = [b for b in chart.bars if b.series == 0]
    assert [round(b.height / 100, 4) for b in first] == [1.0, 0.75, 0.5]  # 4/4, 3/4, 2/4 accepted
    assert "main, position 2: 75%" in [b.title for b in chart.bars]

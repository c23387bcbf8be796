"""`run`, `gate` and `fuzz` offer `difftest blame` for each branch broken or worse than its
baseline, naming the finding and the options that chose it; never for what blame cannot blame."""

from __future__ import annotations

from difftest.core.fuzz import Finding, FuzzReport, Kind, Observation
from difftest.core.records import Difference
from difftest.reports.blame_offer import blame_offers
from difftest.reports.conclusion import conclude
from difftest.reports.fuzz import blame_commands, render_fuzz_markdown
from tests.factories import BRANCH, LABEL, SCENARIO, make_blame, make_evidence, make_result

DRAFTS = [Difference(counter="num_drafts", measured=5, expected=4)]


def evidence(*results, command=("difftest", "run"), baseline=BRANCH, **extra):
    return make_evidence(results=list(results), command=list(command), baseline=baseline, **extra)


def test_a_broken_branch_is_offered_blame_on_its_most_broken_scenario() -> None:
    found = evidence(
        make_result("pass"),
        make_result("broken", branch="pr", scenario="one"),
        make_result("broken", branch="pr", scenario="two", label="order:a"),
        make_result("broken", branch="pr", scenario="two", label="order:b"),
        command=("difftest", "run", "-c", "my.yaml", "--reading=lenient", "--out", "o"),
    )
    assert blame_offers(found) == [
        "difftest blame pr -k two --tier scheduler -c my.yaml --reading lenient"
    ]
    assert conclude(found).blame == blame_offers(found)


def test_a_branch_that_diverges_as_its_baseline_does_is_not_offered_and_one_further_is() -> None:
    base = make_result("diverge", differences=DRAFTS)
    same = make_result("diverge", branch="same", differences=DRAFTS)
    further = make_result(
        "diverge", branch="further", differences=[DRAFTS[0].model_copy(update={"measured": 7})]
    )
    assert blame_offers(evidence(base, same, further)) == [
        "difftest blame further -k eos --tier scheduler"
    ]


def test_without_the_baselines_results_only_a_broken_branch_is_offered() -> None:
    diverging = make_result("diverge", branch="pr", differences=DRAFTS)
    assert blame_offers(evidence(diverging)) == []
    assert blame_offers(evidence(make_result("broken", branch="pr"))) == [
        f"difftest blame pr -k {SCENARIO} --tier scheduler"
    ]


def test_the_gate_offers_blame_against_its_base() -> None:
    found = evidence(
        make_result("pass", branch="base"),
        make_result("broken", branch="head"),
        command=("difftest", "gate", "--base", "base", "--head", "head"),
        baseline="base",
    )
    assert blame_offers(found) == [
        f"difftest blame head -k {SCENARIO} --tier scheduler --against base"
    ]


def test_nothing_is_offered_for_blames_own_evidence_the_tests_tier_or_an_odd_name() -> None:
    broken = make_result("broken", branch="pr")
    assert blame_offers(evidence(broken, blame=make_blame())) == []
    assert blame_offers(evidence(broken.model_copy(update={"tier": "tests"}))) == []
    assert blame_offers(evidence(broken.model_copy(update={"branch": "pr|<b>"}))) == []
    assert blame_offers(evidence(broken, command=("difftest", "run", "-c", "a b.yaml"))) == []


def fuzz_report(**extra) -> FuzzReport:
    def finding(number: int, branch: str, verdict: str) -> Finding:
        kind = Kind(branch=branch, verdict=verdict, what="num_drafts")  # type: ignore[arg-type]
        return Finding(
            name=f"fuzz-{number}",
            file=f"found/scheduler/fuzz-{number}.yaml",
            evidence=f"found/evidence/fuzz-{number}/evidence.json",
            observations=[Observation(kind=kind, label=LABEL, reason="r")],
            round=1,
            found_after_s=1.0,
        )

    return FuzzReport(
        tier="scheduler",
        seed=0,
        reading="strict",
        branches=["main", "pr"],
        out="out",
        baseline="main",
        findings=[
            finding(1, "main", "diverge"),
            finding(2, "pr", "broken"),
            finding(3, "pr", "error"),
        ],
        **extra,
    )


def test_fuzz_offers_blame_for_each_finding_of_a_branch_other_than_the_baseline() -> None:
    report = fuzz_report()
    (command,) = blame_commands(report)
    assert command == (
        "difftest blame pr --finding out/found/scheduler/fuzz-2.yaml "
        "-c out/found/branches.yaml --reading strict"
    )
    assert f"`{command}`" in render_fuzz_markdown(report)
    assert blame_commands(fuzz_report(against="main"))[0].endswith("--against main")


def test_fuzz_offers_no_blame_for_a_finding_the_base_shares() -> None:
    """#29, case 6: blame answers "no finding to blame" there."""
    report = fuzz_report()
    shared = report.findings[0].model_copy(
        update={
            "observations": [
                Observation(
                    kind=Kind(branch=b, verdict="diverge", what="num_drafts"),
                    label=LABEL,
                    reason="r",
                )  # type: ignore[arg-type]
                for b in ("main", "pr")
            ]
        }
    )
    assert blame_commands(report.model_copy(update={"findings": [shared]})) == []
    own = shared.model_copy(
        update={
            "observations": [
                *shared.observations[:1],
                Observation(
                    kind=Kind(branch="pr", verdict="diverge", what="num_accepted_tokens"),
                    label=LABEL,
                    reason="r",
                ),
            ]
        }  # type: ignore[arg-type]
    )
    assert len(blame_commands(report.model_copy(update={"findings": [own]}))) == 1

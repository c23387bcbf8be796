"""What `difftest blame` decides from verdicts (a finding, whether a set makes it) and how it reads:
the terminal report at 80 columns, blame.md as a PR comment, the evidence's `blame` round trip.

The search itself runs against real vLLM in tests/e2e/test_blame_cli.py; here the inputs are
hand-built, so every line of the output can be checked.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from difftest.core.blame import (
    describe,
    does_not_run,
    finding_of,
    is_a_crash,
    makes,
    signature,
    what,
)
from difftest.core.breakage import COMPLETES
from difftest.core.evidence import read_evidence, write_evidence
from difftest.core.records import Difference
from difftest.reports import registry
from difftest.reports.blame_markdown import BUDGET, render_blame_markdown
from difftest.reports.blame_terminal import render_blame_terminal
from difftest.reports.sources import BlameReport
from tests.factories import (
    BLAMED,
    BRANCH,
    CULPRIT,
    LABEL,
    REST,
    SCENARIO,
    make_blame,
    make_blame_hunk,
    make_evidence,
    make_result,
    make_violation,
)

LOST = make_violation(invariant="stats-lost", counter=None, requests=["a"])


def test_what_makes_a_verdict_names_invariants_with_their_requests_and_counters_with_values():
    broken = make_result("broken", violations=[LOST, LOST, make_violation()])
    assert what(broken) == ["order-independence [num_drafts]", "stats-lost (a)"]
    diverge = make_result(
        "diverge", differences=[Difference(counter="num_drafts", measured=3, expected=4)]
    )
    assert what(diverge) == ["num_drafts 3"]
    assert what(make_result("pass")) == [] and what(make_result("error")) == []


def test_a_finding_is_what_the_branch_shows_and_its_base_does_not():
    lost = make_result("broken", violations=[LOST], branch=BLAMED)
    base_diverges = make_result(
        "diverge", differences=[Difference(counter="num_drafts", measured=5, expected=4)]
    )
    assert finding_of([lost], [base_diverges]) == ("broken", {LABEL: ["stats-lost (a)"]})
    same = make_result(
        "diverge",
        branch=BLAMED,
        differences=[Difference(counter="num_drafts", measured=5, expected=4)],
    )
    assert finding_of([same], [base_diverges]) is None  # the base shows it too
    further = same.model_copy(
        update={"differences": [Difference(counter="num_drafts", measured=7, expected=4)]}
    )
    assert finding_of([further], [base_diverges]) == ("diverge", {LABEL: ["num_drafts 7"]})
    assert finding_of([make_result("error")], []) is None  # could not measure is no finding


def test_a_set_makes_the_finding_only_with_the_same_verdict_on_the_same_runs_for_the_same_reasons():
    finding = make_blame().findings[0]
    lost = make_result("broken", violations=[LOST])
    assert makes(finding, [lost, make_result("pass", label="order:b")])
    crashed = make_result(
        "broken", violations=[make_violation(invariant="completes-as-on-baseline", counter=None)]
    )
    assert not makes(finding, [crashed])  # broken too, but by a crash: another finding
    assert not makes(finding, [lost, lost.model_copy(update={"label": "order:b"})])  # one run more
    assert not makes(finding, [make_result("pass")])
    assert signature([lost], "diverge") == {}


def test_two_crashes_are_two_findings_but_a_moved_line_is_the_same_crash():
    def crash(cause: str):
        violation = make_violation(invariant="completes-as-on-baseline", counter=None, cause=cause)
        return make_result("broken", violations=[violation])

    raised = "crashed in vLLM: IndexError: list index out of range at vllm/metrics.py:49 in observe"
    finding = (
        make_blame().findings[0].model_copy(update={"runs": signature([crash(raised)], "broken")})
    )
    assert finding.runs == {
        LABEL: [
            "completes-as-on-baseline: crashed in vLLM: IndexError: list index out of range at "
            "vllm/metrics.py in observe"
        ]
    }
    assert makes(finding, [crash(raised.replace(":49 in", ":52 in"))])  # a hunk above moved it
    died = "its probe exited without its trailer before reporting this run"
    assert not makes(finding, [crash(died)])  # the probe died instead: another finding
    assert not makes(finding, [crash(raised.replace("IndexError", "TypeError"))])
    assert not makes(finding, [crash(raised.replace("in observe", "in queue"))])


def test_describe_says_the_worst_verdict_its_count_and_first_reason():
    assert describe([make_result("pass"), make_result("pass")]) == "passes all 2 runs"
    text = describe([make_result("pass"), make_result("broken", violations=[LOST])])
    assert text.startswith("broken in 1/2 runs: stats-lost: ")
    assert describe([]) == "no result"


def report(**blame: object) -> BlameReport:
    evidence = make_evidence(
        results=[make_result("broken", branch=BLAMED, violations=[LOST])],
        blame=make_blame(**blame),
    )
    return BlameReport(evidence=evidence, out="out-blame", scenarios={}, recorded={})


def terminal(source: BlameReport, width: int = 80) -> str:
    sink = io.StringIO()
    render_blame_terminal(source, Console(file=sink, width=width, color_system=None))
    return sink.getvalue()


def test_the_terminal_report_reads_at_80_columns():
    text = terminal(report())
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert lines[0] == f"difftest blame {BLAMED} against {BRANCH} (strict reading)"
    flat = " ".join(text.split())  # long lines wrap under their indent
    assert "made by 2 hunks (try 2), each needed:" in flat
    assert "#2 vllm/v1/core/sched/scheduler.py 200-206 (+1 -1): without it: broken in 1/1" in flat
    assert "#3 vllm/v1/core/sched/scheduler.py 300-306 (+1 -1): without it: passes all 1" in flat
    assert "#1 tests/test_x.py 100-106 (+1 -1): outside vllm/" in flat
    assert "#4 vllm/v1/core/sched/scheduler.py 400-406 (+1 -1): the finding persists" in flat
    assert "the rest of the change without them: #4 (try 5): passes all 1 runs" in flat
    assert "with only these hunks: no steps recorded" in flat  # no runs were given
    assert f"reproduce: difftest run -c out-blame/blame.yaml --tier scheduler -k {SCENARIO}" in flat
    assert "+new_2" in text and "+new_3" in text and "+new_4" not in text  # the culprits' hunks


def test_hunks_the_rest_needs_to_run_read_as_bound_and_the_unit_that_makes_it_is_named():
    """#29 case 3: without #2 the rest crashes (try 3), so #2 is bound to the set; #3 makes it."""
    blame = make_blame()
    finding = blame.findings[0].model_copy(update={"bound": [2]})
    source = report(findings=[finding])
    text = terminal(source)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    flat = " ".join(text.split())
    assert "made by 2 hunks (try 2): #3 makes it, #2 is bound to it:" in flat
    makes_it = flat.index("makes it: without it the rest runs and the finding goes:")
    bound = flat.index("bound: without any one of them the rest does not run:")
    assert makes_it < flat.index("#3 vllm/") < bound < flat.index("#2 vllm/", bound)
    markdown = render_blame_markdown(source)
    assert "Made by **2 hunks** (#2-#3, try 2): #3 makes it, #2 is bound to it:" in markdown
    assert "Bound (without any one of them the rest does not run): #2." in markdown
    everything = blame.findings[0].model_copy(update={"bound": [2, 3]})
    flat = " ".join(terminal(report(findings=[everything])).split())
    assert "made by 2 hunks (try 2), bound together:" in flat


def test_a_set_that_crashes_or_cannot_run_does_not_run_unless_the_finding_is_a_crash():
    crashed = make_result("broken", violations=[make_violation(invariant=COMPLETES, counter=None)])
    assert does_not_run("gone", [crashed]) and does_not_run("does-not-import", [])
    assert not does_not_run("gone", [make_result("broken", violations=[LOST])])
    assert not does_not_run("gone", [make_result("pass")])
    finding = make_blame().findings[0]
    assert not is_a_crash(finding)
    crash = finding.model_copy(update={"runs": {LABEL: [f"{COMPLETES}: crashed in vLLM: x"]}})
    assert is_a_crash(crash)


def test_a_finding_the_search_could_not_blame_says_why():
    blame = make_blame()
    finding = blame.findings[0].model_copy(
        update={"minimal": [], "problem": "the change's hunks do not make it", "culprit": None}
    )
    text = terminal(report(findings=[finding]))
    assert "no set of hunks found: the change's hunks do not make it" in " ".join(text.split())
    assert "made by" not in text


def test_blame_md_fits_a_pr_comment_and_escapes_what_comes_from_the_diff():
    huge = "@@ -1,1 +1,2000 @@\n" + "".join(f"+line {i} `x` | <b>\n" for i in range(2000))
    hunks = [
        make_blame_hunk(1, file="tests/test_x.py", carried=False),
        make_blame_hunk(2, file="vllm/a|b.py", text=huge),
        *(make_blame_hunk(n, text=huge) for n in (3, 4)),
    ]
    text = render_blame_markdown(report(hunks=hunks))
    assert len(text) < 65_536 and len(text) < BUDGET + 10_000
    assert "| #2 | vllm/a\\|b.py |" in text
    assert "... 1941 more lines (evidence.json holds them)" in text
    assert "```diff" in text and "<details><summary>The hunks that make it</summary>" in text
    assert text.count("<details>") == text.count("</details>")
    assert "| #4 | vllm/v1/core/sched/scheduler.py | 400-406 (+1 -1) | the finding persists" in text
    assert (
        f"Reproduce: `difftest run -c out-blame/blame.yaml --tier scheduler -k {SCENARIO}`" in text
    )


def test_blame_writes_blame_md_and_evidence_and_offers_text_md_and_json():
    files = [o.file for o, _text in registry.rendered_files(report())]
    assert "blame.md" in files and files[-1] == "evidence.json"
    assert registry.format_choices("blame") == ("text", "md", "json")
    document = report().json_fields()
    assert document["blame"]["findings"][0]["minimal"] == [2, 3]


def test_the_evidence_keeps_the_search(tmp_path: Path):
    evidence = make_evidence(blame=make_blame())
    path = write_evidence(evidence, tmp_path / "evidence.json")
    again = read_evidence(path)
    assert again == evidence and again.blame is not None
    assert again.blame.findings[0].needed == {2: 3, 3: 4}
    assert again.blame.tried(2).branch == CULPRIT and again.blame.tried(5).branch == REST
    assert json.loads(path.read_text())["schema_version"] == "13"


def test_the_headline_names_what_makes_the_branch_worse_not_what_the_base_shares() -> None:
    """#29, case 7: both count num_drafts 6 against the oracle's 4; only the branch's emitted
    tokens differ, so that is the reason blame gives."""
    from difftest.core.blame import own_reason
    from difftest.core.records import Difference
    from tests.factories import make_result

    shared = Difference(counter="num_drafts", measured=6, expected=4)
    base = make_result("diverge", branch="main", differences=[shared])
    head = make_result(
        "diverge",
        branch="pr",
        differences=[shared, Difference(counter="num_emitted_tokens", measured=9, expected=7)],
    )
    assert own_reason(head, [base]) == "num_emitted_tokens: measured 9, oracle 7"
    assert own_reason(head, []) == "num_drafts: measured 6, oracle 4"  # no base run: the first

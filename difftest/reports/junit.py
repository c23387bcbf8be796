"""The JUnit XML report, for CI systems that show test results natively.

One testcase per (branch, scenario, run): classname = branch, name =
`scenario[run label]`, time = how long the probe took to play the run. diverge/broken become
`<failure>` (message = the first violation or difference), error becomes `<error>`. The tree is
built with ElementTree so quoting is right; characters XML 1.0 cannot hold at all (NUL,
ANSI escape codes in a captured traceback, ...) are replaced first, otherwise
the file would not parse.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from difftest.core.evidence import BranchCoverage, Evidence
from difftest.core.records import Result
from difftest.core.values import format_value
from difftest.core.verdicts import first_reason
from difftest.reports.conclusion import changed_coverage
from difftest.reports.format import xml_text
from difftest.reports.views import branch_names


def render_junit(evidence: Evidence) -> str:
    root = ET.Element("testsuites", name="difftest")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for branch in branch_names(evidence):
        results = [r for r in evidence.results if r.branch == branch]
        suite = ET.SubElement(root, "testsuite", name=xml_text(branch))
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="reading", value=xml_text(evidence.reading))
        if evidence.protection is not None:
            confined = "confined" if evidence.protection.confined else "unconfined"
            ET.SubElement(props, "property", name="probes", value=confined)
        info = evidence.branches.get(branch)
        if info:
            ET.SubElement(props, "property", name="ref", value=xml_text(info.ref))
            ET.SubElement(props, "property", name="sha", value=xml_text(info.sha or ""))
        coverage = changed_coverage(evidence, branch)
        if coverage is not None and coverage.status != "unchanged":
            # A CI server shows the suite's properties: the one line every report prints.
            said = f"{coverage.status}: {coverage.summary}"
            ET.SubElement(props, "property", name="changed-code", value=xml_text(said))
        counts = {
            "tests": len(results),
            "failures": sum(r.verdict in ("diverge", "broken") for r in results),
            "errors": sum(r.verdict == "error" for r in results),
        }
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("skipped", "0")
        suite.set("time", _seconds(sum(r.duration_s for r in results)))
        for result in results:
            _testcase(suite, result)
        if coverage is not None and coverage.status != "unchanged":
            _coverage_case(suite, coverage)
            counts["tests"] += 1
            totals["tests"] += 1
            suite.set("tests", str(counts["tests"]))
            suite.set("skipped", "0" if coverage.status == "verified" else "1")
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _testcase(suite: ET.Element, result: Result) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        classname=xml_text(result.branch),
        name=xml_text(f"{result.scenario}[{result.label}]"),
        time=_seconds(result.duration_s),
    )
    if result.verdict == "pass":
        return
    tag = "error" if result.verdict == "error" else "failure"
    outcome = ET.SubElement(case, tag, message=xml_text(first_reason(result)), type=result.verdict)
    outcome.text = xml_text(_body(result))


def _coverage_case(suite: ET.Element, coverage: BranchCoverage) -> None:
    """One test case per branch for its changed code: passed when verified, skipped (with the
    line every report prints) when not verified or unknown, so a dashboard that lists test cases
    shows it, without failing a build the gate itself lets through."""
    case = ET.SubElement(suite, "testcase", name="changed code", classname="coverage", time="0")
    if coverage.status != "verified":
        said = xml_text(f"{coverage.status}: {coverage.summary}")
        ET.SubElement(case, "skipped", message=said).text = said


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _body(result: Result) -> str:
    lines = [f"{result.verdict} (reading: {result.reading})"]
    if result.statement:
        lines.append(f"scenario: {result.statement}")
    if result.error:
        lines += ["", result.error]
    for v in result.violations:
        counter = (
            f" [{v.counter}: measured {format_value(v.measured)}, "
            f"expected {format_value(v.expected)}]"
            if v.counter
            else ""
        )
        lines.append(f"violation {v.invariant}: {v.detail}{counter}")
    for d in result.differences:
        lines.append(
            f"{d.counter}: measured {format_value(d.measured)}, oracle {format_value(d.expected)} "
            f"- {d.explanation}"
        )
    return "\n".join(lines)

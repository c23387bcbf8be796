"""Whether probes ran confined is in the evidence, in every report and in the result cache's key
(#47 case 14): an unconfined run never reads like a confined one, nor is reused by one."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from difftest.core.evidence import ProtectionEvidence
from difftest.reports.html import render_html
from difftest.reports.json_report import render_json
from difftest.reports.junit import render_junit
from difftest.reports.markdown import render_markdown
from difftest.reports.terminal import render_terminal
from difftest.run.cache.results import result_key
from difftest.run.probes import sandbox
from tests.factories import make_evidence

UNCONFINED = ProtectionEvidence(confined=False, why_not="DIFFTEST_SANDBOX=off")


def _terminal(evidence) -> str:
    buffer = io.StringIO()
    render_terminal(evidence, Console(file=buffer, width=80))
    return buffer.getvalue()


def test_an_unconfined_run_says_so_in_every_report():
    evidence = make_evidence(protection=UNCONFINED)
    said = "UNCONFINED (DIFFTEST_SANDBOX=off)"
    assert said in " ".join(_terminal(evidence).split())
    assert said.replace("_", "\\_") in render_markdown(evidence)  # Markdown escapes `_`
    assert said in render_html(evidence)
    suite = ET.fromstring(render_junit(evidence)).find("testsuite")
    assert suite is not None
    assert {p.get("name"): p.get("value") for p in suite.iter("property")}["probes"] == (
        "unconfined"
    )
    assert json.loads(render_json(evidence, 0))["probes_confined"] is False


def test_a_confined_run_says_so_where_a_reader_looks_and_stays_quiet_in_the_terminal():
    evidence = make_evidence(protection=ProtectionEvidence(confined=True))
    assert "confined" not in _terminal(evidence).lower()
    assert "Probes ran confined" in render_markdown(evidence)
    assert "Probes ran confined" in render_html(evidence)
    assert json.loads(render_json(evidence, 0))["probes_confined"] is True


def test_evidence_written_before_it_was_recorded_says_nothing_either_way():
    evidence = make_evidence()
    assert evidence.protection is None
    assert "onfined" not in render_markdown(evidence)


def test_runs_measured_unconfined_are_kept_apart_in_the_result_cache(monkeypatch):
    """The same job, environment and code: the key differs only by the confinement."""

    def key() -> str:
        return result_key("scheduler", {"entry": "scheduler"}, {}, {}, {}, 60.0)

    confined = key()
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "off")
    assert not sandbox.protection().active
    if confined == key():
        pytest.fail("an unconfined run would be reused by a confined one")


def test_a_home_where_probes_ran_unconfined_is_marked_and_later_confined_runs_say_so(
    tmp_path, monkeypatch
):
    """#47's "left open": a run made unconfined could leave behind, outside the folders checked by
    content, what a later confined run reads, and nothing said so. The first unconfined probe
    marks the home (`run.probes.taint`, through `sandbox.wrap`, where every probe starts), and
    the evidence and every report of a confined run there say to start from a fresh home."""
    from difftest.run.probes import taint

    home = tmp_path / "home"
    monkeypatch.setenv("DIFFTEST_HOME", str(home))
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "off")
    assert taint.unconfined_since() == ""
    assert sandbox.wrap(["python", "-c", "pass"], [tmp_path]) == ["python", "-c", "pass"]
    since = taint.unconfined_since()
    assert since and json.loads(taint.mark_path().read_text())["why"] == "DIFFTEST_SANDBOX=off"
    assert sandbox.protection_evidence().home_unconfined_since == ""  # unconfined says it already
    monkeypatch.delenv(sandbox.SANDBOX_ENV)
    if not sandbox.protection().active:
        pytest.skip(f"this machine cannot confine probes: {sandbox.protection().why_not}")
    guard = sandbox.protection_evidence()
    assert guard.confined and guard.home_unconfined_since == since
    evidence = make_evidence(protection=guard)
    said = "this DIFFTEST_HOME ran probes UNCONFINED before"
    assert said in " ".join(_terminal(evidence).split())
    assert said.replace("_", "\\_") in render_markdown(evidence) and said in render_html(evidence)
    assert json.loads(render_json(evidence, 0))["home_unconfined_since"] == since
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "fresh"))
    assert sandbox.protection_evidence().home_unconfined_since == ""

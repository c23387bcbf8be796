"""Hostile branches on the engine tier's request paths (#49): the code a request's end runs through
after the scheduler (the detokenizer's stop strings, the Prometheus logger's generated-token
counter, the per-request spec-decode metrics) crashes on one branch each (slow: the real engine).

One `difftest run --tier engine` of two scenarios that drive those paths (a stop string inside
accepted drafts, per-request metrics), main beside the three faults, through the one door: every
run a fault's path is reached in reads "broken" (main completes it), naming the planted error and
where; a run it is not reached in does not; main's verdicts are its own, and every report is
written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.cli_helpers import capture_stderr, run_cli
from tests.factories import ROOT, shipped_branch, write_config
from tests.patching import insert_after, make_patch

pytestmark = pytest.mark.slow

DETOKENIZER = "vllm/v1/engine/detokenizer.py"
LOGGERS = "vllm/v1/metrics/loggers.py"
STATS = "vllm/v1/metrics/stats.py"
SCENARIOS = ("engine-stop-string-in-accepted-drafts", "engine-per-request-metrics")

#: The faults, by branch name, and what each does.
FAULTS = {
    "stop-string-crash": "the detokenizer crashes where a stop string matched",
    "prometheus-crash": "the Prometheus logger crashes counting generated tokens",
    "request-metrics-crash": "the per-request metrics crash building their payload",
}


def _crash(indent: str, says: str) -> str:
    return f"{indent}raise RuntimeError({says!r})\n"


def _patches(tmp: Path, repo) -> dict[str, Path]:
    from difftest.build.refs import read_blob

    out = {}
    # The detokenizer: right where a stop string matched.
    out["stop-string-crash"] = insert_after(
        tmp / "stop-string-crash.patch",
        repo,
        DETOKENIZER,
        "            if stop is not None:\n",
        _crash(" " * 16, "planted: the detokenizer crashes on a matched stop string"),
    )
    # The Prometheus logger: before the generated-token counter is incremented (the line that
    # starts the call is kept whole: the crash goes on the line before it).
    old = read_blob(repo, "v0.32.0", LOGGERS).decode()
    call = "        self.counter_generation_tokens[engine_idx].inc(\n"
    assert old.count(call) == 1
    new = old.replace(
        call,
        _crash(" " * 8, "planted: the Prometheus logger crashes counting generated tokens") + call,
    )
    out["prometheus-crash"] = make_patch(tmp / "prometheus-crash.patch", LOGGERS, old, new)
    # The per-request metrics' payload, built for every finished request's response.
    old = read_blob(repo, "v0.32.0", STATS).decode()
    head = "    def to_dict(self) -> dict[str, Any]:\n"
    assert old.count(head) == 1
    new = old.replace(
        head,
        head + _crash(" " * 8, "planted: the per-request metrics crash building their payload"),
    )
    out["request-metrics-crash"] = make_patch(tmp / "request-metrics-crash.patch", STATS, old, new)
    return out


@pytest.fixture(scope="module")
def engine_fault_run(tmp_path_factory, fixture_repo) -> tuple[int, Path, dict, str]:
    tmp = tmp_path_factory.mktemp("engine-request-faults")
    patches = _patches(tmp, fixture_repo)
    branches = [shipped_branch("main")] + [
        {"name": name, "ref": "main", "patches": [str(patch)]} for name, patch in patches.items()
    ]
    config = write_config(tmp, branches, timeouts={"probe_s": 600, "run_s": 60, "suite_s": 600})
    out = tmp / "out"
    with capture_stderr() as err:
        code = run_cli(
            "run", "-c", config, "--tier", "engine", "-k", " or ".join(SCENARIOS), "--out", out
        )
    evidence = json.loads((out / "evidence.json").read_text())
    return code, out, evidence, err.getvalue()


def _verdicts(evidence: dict, branch: str, scenario: str) -> dict[str, str]:
    return {
        r["label"]: r["verdict"]
        for r in evidence["results"]
        if r["branch"] == branch and r["scenario"] == scenario
    }


def _reasons(evidence: dict, branch: str) -> str:
    found = []
    for r in evidence["results"]:
        if r["branch"] == branch:
            found.append(r.get("error") or "")
            found += [v["detail"] for v in r.get("violations") or []]
    return "\n".join(found)


def test_each_crash_on_a_request_path_reads_broken_never_pass(engine_fault_run) -> None:
    code, out, evidence, log = engine_fault_run
    assert code == 1, log  # broken runs: the worst verdict's exit code
    for name in ("prometheus-crash", "request-metrics-crash"):
        # Every finished request goes through both: every run of both scenarios is broken.
        for scenario in SCENARIOS:
            verdicts = _verdicts(evidence, name, scenario)
            assert verdicts and set(verdicts.values()) == {"broken"}, (name, scenario, verdicts)
    crashed = _reasons(evidence, "prometheus-crash")
    assert "planted: the Prometheus logger crashes counting generated tokens" in crashed
    assert "planted: the per-request metrics crash" in _reasons(evidence, "request-metrics-crash")
    # The stop string path is reached by the runs holding a request a stop string cuts: those are
    # broken; a run of no such request (a reference run is uncut) is not.
    for scenario in SCENARIOS:
        cut_by_string = _stop_string_requests(scenario)
        for label, verdict in _verdicts(evidence, "stop-string-crash", scenario).items():
            role, _, ids = label.partition(":")
            reached = role != "reference" and bool(cut_by_string & set(ids.split(",")))
            assert (verdict == "broken") == reached, (scenario, label, verdict)
    assert "planted: the detokenizer crashes on a matched stop string" in _reasons(
        evidence, "stop-string-crash"
    )


def _stop_string_requests(scenario: str) -> set[str]:
    raw = yaml.safe_load((ROOT / "scenarios" / "engine" / f"{scenario}.yaml").read_text())
    return {r["id"] for r in raw["requests"] if r.get("truncate") == "stop_string"}


def test_main_keeps_its_results_and_every_report_is_written(engine_fault_run) -> None:
    _, out, evidence, _ = engine_fault_run
    for scenario in SCENARIOS:
        assert set(_verdicts(evidence, "main", scenario).values()) <= {"pass", "diverge"}
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        assert (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    assert all(name in report for name in FAULTS)

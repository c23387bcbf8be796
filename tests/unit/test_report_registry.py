"""The output registry (`reports.registry`): adding an output is one object in `OUTPUTS`.

A toy output (a file in `--out` and a `--format` choice of `run`) is added to
the registry, and the real code paths pick it up: the command line's parser
accepts `run --format toy`, `difftest run` prints it and writes its file
beside the others (the comparison is hand-built: no vLLM), `prepare_out`
clears it, and a report set written to a folder holds it. The shipped table
is checked for what the code reading it relies on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.cli import build_parser, main
from difftest.core.gate import compare_for_gate
from difftest.reports import REPORT_FILES, prepare_out, registry, write_report
from difftest.reports.registry import OUTPUTS, Output
from difftest.reports.sources import GateReport, RunReport
from difftest.run.pipeline import Comparison
from tests.factories import BRANCH, make_evidence, make_result, write_config

TOY_FILE = "toy.txt"


def _toy_text(report: RunReport) -> str:
    return f"toy: {len(report.evidence.results)} result(s), exit {report.exit_code}\n"


def _toy_show(report: RunReport) -> None:
    print(_toy_text(report), end="")


#: The toy output: from the run's report into `toy.txt`, and on stdout for `run --format toy`.
TOY = Output(
    "toy",
    RunReport,
    file=TOY_FILE,
    render=_toy_text,
    format="toy",
    commands=("run",),
    show=_toy_show,
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Output[RunReport]:
    monkeypatch.setattr(registry, "OUTPUTS", (*OUTPUTS, TOY))
    return TOY


def test_a_registered_format_is_a_choice_of_its_commands_only(toy: Output[RunReport]) -> None:
    assert build_parser().parse_args(["run", "--format", "toy"]).format == "toy"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["gate", "--base", "a", "--head", "b", "--format", "toy"])


def test_an_unregistered_format_is_refused_by_the_parser() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--format", "toy"])


def test_run_prints_the_registered_format_and_writes_its_file(
    toy: Output[RunReport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    config = write_config(tmp_path, [{"name": BRANCH, "ref": "main"}])
    evidence = make_evidence(results=[make_result(), make_result(label="alone:a")])

    def compare(*_args: object, **_kwargs: object) -> Comparison:  # stands in for the probes
        # No workspace: nothing is built or probed, and no report reads it.
        return Comparison(workspace=None, evidence=evidence, outcomes={})  # type: ignore[arg-type]

    monkeypatch.setattr("difftest.cli.run.compare", compare)
    out = tmp_path / "out"
    assert main(["run", "-c", str(config), "--out", str(out), "--format", "toy"]) == 0
    assert capsys.readouterr().out == "toy: 2 result(s), exit 0\n"
    assert (out / TOY_FILE).read_text() == "toy: 2 result(s), exit 0\n"
    assert {"report.md", "report.html", "junit.xml", "evidence.json"} <= {
        p.name for p in out.iterdir()
    }
    prepare_out(out)  # the next command clears it with the other reports
    assert not (out / TOY_FILE).exists() and not (out / "evidence.json").exists()


def test_a_report_set_holds_the_registered_file_and_keeps_the_evidence_last(
    toy: Output[RunReport], tmp_path: Path
) -> None:
    written = write_report(RunReport(evidence=make_evidence()), tmp_path / "out")
    assert written["toy"] == tmp_path / "out" / TOY_FILE
    assert written["toy"].read_text() == "toy: 1 result(s), exit 0\n"
    assert list(written)[-1] == "evidence"  # moved into place after the toy, as after every file


def test_the_shipped_outputs_are_one_entry_each() -> None:
    names = [o.name for o in OUTPUTS]
    files = [o.file for o in OUTPUTS if o.file]
    choices = [(c, o.format) for o in OUTPUTS for c in o.commands]
    assert len(set(names)) == len(names) and len(set(files)) == len(files)
    assert len(set(choices)) == len(choices)
    assert [o.name for o in OUTPUTS if o.last] == ["evidence"]
    assert set(REPORT_FILES) == {
        "report.md",
        "report.html",
        "junit.xml",
        "gate.md",
        "blame.md",
        "evidence.json",
    }
    assert registry.format_choices("run") == ("text", "json")
    assert registry.format_choices("gate") == ("text", "md", "json")
    assert registry.format_choices("verify") == ("text", "json")
    assert registry.format_choices("fuzz") == ("text",)
    assert registry.format_choices("blame") == ("text", "md", "json")


def test_the_gate_writes_its_summary_between_the_reports_and_the_evidence(tmp_path: Path) -> None:
    outcome = compare_for_gate([make_result()], [make_result(branch="head")])
    report = GateReport(evidence=make_evidence(), outcome=outcome, base=BRANCH, head="head")
    written = write_report(report, tmp_path)
    assert [p.name for p in written.values()] == [
        "report.md",
        "report.html",
        "junit.xml",
        "gate.md",
        "evidence.json",
    ]
    assert written["gate"].read_text() == registry.render("gate", report)


def test_an_output_without_its_rendering_is_refused() -> None:
    with pytest.raises(ValueError):
        Output("half", RunReport, file="half.txt")
    with pytest.raises(ValueError):
        Output("half", RunReport, format="half", show=_toy_show)  # no command offers it

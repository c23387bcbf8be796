"""The commands' handling of `--out`: locked for the whole command, reports written as a set or not
at all.

Nothing here builds vLLM: a refused command stops before anything runs, and the
commands that get further have their measurement (`compare`) replaced by one
that returns hand-built evidence, so only the out-folder handling is real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.core.evidence import write_evidence
from difftest.reports import (
    HOLDER_FILE,
    LOCK_FILE,
    REPORT_FILES,
    WROTE_FILE,
    locked_out,
    write_report_set,
)
from difftest.run.pipeline import Comparison
from tests.e2e.cli_helpers import CONTROL, run_cli
from tests.factories import ROOT, make_evidence
from tests.unit.test_out_folder import fill, held_elsewhere, tiny_fs  # noqa: F401  (tiny_fs: a fixture)

CONFIG = ROOT / "branches.yaml"


def writing_commands(tmp_path: Path) -> dict[str, list[object]]:
    """Every command that writes into --out, as argv without --out."""
    recorded = write_evidence(make_evidence(), tmp_path / "recorded" / "evidence.json")
    return {
        "run": ["run", "-c", CONFIG],
        "gate": ["gate", "-c", CONFIG, "--base", "main", "--head", "pr-56137-style"],
        "verify": ["verify", "-c", CONFIG, recorded],
        "merge": ["merge", "-c", CONFIG, recorded],
        "fuzz": ["fuzz", "-c", CONFIG],
    }


@pytest.mark.parametrize("command", ["run", "gate", "verify", "merge", "fuzz"])
def test_a_command_on_an_out_in_use_exits_2_at_once_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    out = tmp_path / "out"
    argv = writing_commands(tmp_path)[command]
    with held_elsewhere(out) as holder:
        (out / "report.md").write_text("the holder's report")
        assert run_cli(*argv, "--out", out) == 2
        err = capsys.readouterr().err
        assert (
            f"--out {str(out)!r} is in use by another difftest command: PID {holder.pid} on " in err
        )
        assert "fix: wait for it to finish, or pass another --out" in err
        assert (
            out / "report.md"
        ).read_text() == "the holder's report"  # nothing of the holder's was cleared


def test_show_reads_an_out_in_use_without_taking_its_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with held_elsewhere(out):
        run_cli("show", "-c", CONFIG, CONTROL, "--out", out)
    assert "in use" not in capsys.readouterr().err


def fake_compare(*_args: object, **_kwargs: object) -> Comparison:
    """What `compare` returns, without probing anything: one passing result of hand-built
    evidence."""
    # No workspace: the commands under test only write reports from the evidence.
    return Comparison(workspace=None, evidence=make_evidence(), outcomes={}, selected=[])  # type: ignore[arg-type]


def run_argv(out: Path) -> list[object]:
    return ["run", "-c", CONFIG, "--tier", "scheduler", "-k", CONTROL, "--out", out]


def test_run_writes_its_reports_and_frees_the_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("difftest.cli.run.compare", fake_compare)
    out = tmp_path / "out"
    assert run_cli(*run_argv(out)) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [LOCK_FILE, WROTE_FILE, "evidence.json", "junit.xml", "report.html", "report.md"]
    )
    with locked_out(out):
        pass


@pytest.mark.parametrize("raised", [KeyboardInterrupt, RuntimeError])
def test_a_run_that_crashes_or_is_interrupted_leaves_no_report_and_frees_the_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: type[BaseException]
) -> None:
    def crashing(*_args: object, **_kwargs: object) -> Comparison:
        raise raised("in the middle of probing")

    monkeypatch.setattr("difftest.cli.run.compare", crashing)
    out = tmp_path / "out"
    write_report_set(out, {"report.md": "## an older report\n"})
    if raised is KeyboardInterrupt:
        assert run_cli(*run_argv(out)) == 130
    else:
        with pytest.raises(RuntimeError):
            run_cli(*run_argv(out))
    assert not [p.name for p in out.iterdir() if p.name in REPORT_FILES]
    assert not (out / HOLDER_FILE).exists()
    with locked_out(out):
        pass


def test_a_run_onto_a_full_disk_exits_2_naming_the_folder_and_writes_no_report(
    tiny_fs: Path,  # noqa: F811 - the fixture imported above, asked for by name
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tiny_fs / "out"
    out.mkdir()

    def measured_then_full(*_args: object, **_kwargs: object) -> Comparison:
        fill(tiny_fs)  # the disk fills up while probing
        return fake_compare()

    monkeypatch.setattr("difftest.cli.run.compare", measured_then_full)
    assert run_cli(*run_argv(out)) == 2
    err = capsys.readouterr().err
    assert (
        f"the reports could not be written into --out {str(out)!r}: the disk is full (ENOSPC" in err
    )
    assert "fix: free space on that file system" in err
    assert sorted(p.name for p in out.iterdir()) == [WROTE_FILE, LOCK_FILE]
    (tiny_fs / "filler").unlink()
    with locked_out(out):
        pass


def test_a_full_disk_before_the_run_exits_2_before_anything_runs(
    tiny_fs: Path,  # noqa: F811 - the fixture imported above, asked for by name
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(
        "difftest.cli.run.compare", lambda *_a, **_k: pytest.fail("measured onto a full disk")
    )
    out = tiny_fs / "out"
    out.mkdir()
    fill(tiny_fs)
    assert run_cli(*run_argv(out)) == 2
    assert (
        f"--out {str(out)!r} cannot be used for reports: the disk is full (ENOSPC"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "usage",
    [
        ["-k", "("],
        ["-k", "no-such-scenario"],
        ["no-such-branch", "x;y", *[f"r{i}" for i in range(120)]],
    ],
    ids=["bad-k", "k-matches-nothing", "too-many-branches"],
)
def test_a_usage_error_touches_nothing_in_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], usage: list[str]
) -> None:
    """#40, case 3: checked before --out is cleared, and only what difftest wrote is ever
    cleared; a person's files named like difftest's stay."""
    out = tmp_path / "out"
    (out / "probe").mkdir(parents=True)
    mine = ["report.md", "junit.xml", "evidence.json", "probe/x-job.json"]
    for name in mine:
        (out / name).write_text("a person's")
    assert run_cli("run", "-c", CONFIG, "--tier", "scheduler", *usage, "--out", out) == 2
    assert all((out / name).read_text() == "a person's" for name in mine)
    assert "Traceback" not in capsys.readouterr().err

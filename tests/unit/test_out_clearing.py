"""Clearing `--out` against a hostile branch (#47): what the next command removes stays inside
`--out`, and only files difftest itself wrote there are removed.

Branch code runs with the user's rights and its probe records go into `--out`,
so it can plant symlinks there and edit the manifest of what difftest wrote
(`WROTE_FILE`) or an earlier `fuzz.json`. Each test plants that with real files,
real symlinks and a real FIFO, then runs the real clearing (`prepare_out`, or the
fuzz and blame commands through the CLI with only their measuring replaced).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from difftest.core.errors import DifftestError
from difftest.core.fuzz import Finding, FuzzReport
from difftest.reports import WROTE_FILE, locked_out, prepare_out, record_written, write_report_set
from tests.e2e.cli_helpers import run_cli
from tests.factories import ROOT

CONFIG = ROOT / "branches.yaml"
#: A person's files named as the runner names its probe files.
VICTIMS = ("a-job.json", "b-runs.jsonl", "c-probe.log")


def persons_folder(tmp_path: Path) -> Path:
    """A folder of the user's outside `--out`, holding files named like probe files."""
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in VICTIMS:
        (mine / name).write_text("a person's")
    return mine


def intact(folder: Path, names: tuple[str, ...] = VICTIMS) -> bool:
    return all((folder / name).read_text() == "a person's" for name in names)


def add_to_manifest(out: Path, entries: list[str]) -> None:
    """What branch code can do: add entries to the manifest of what difftest wrote."""
    manifest = json.loads((out / WROTE_FILE).read_text())
    manifest["files"] += entries
    (out / WROTE_FILE).write_text(json.dumps(manifest))


def test_clearing_never_follows_a_symlink_below_out_to_a_persons_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#10: `--out/probe/x` -> a folder of the user's, and the manifest lists files through it."""
    mine = persons_folder(tmp_path)
    out = tmp_path / "out"
    with locked_out(out):
        prepare_out(out)
        (out / "probe").mkdir()
        (out / "probe" / "main-scheduler-job.json").write_text("{}")  # difftest's own
        (out / "probe" / "x").symlink_to(mine)
    add_to_manifest(out, [f"probe/x/{name}" for name in VICTIMS])
    with locked_out(out):
        prepare_out(out)
    assert intact(mine)
    assert not (out / "probe" / "main-scheduler-job.json").exists()  # what difftest wrote goes
    err = capsys.readouterr().err
    assert "left 3 entries of .difftest-wrote.json in place ('probe/x/a-job.json'" in err
    assert "nothing outside --out is removed" in err and len(err.strip().splitlines()) == 1


def test_a_probe_folder_replaced_by_a_symlink_lists_and_removes_nothing_through_it(
    tmp_path: Path,
) -> None:
    """#10: `--out/probe` -> a folder of the user's while a command runs: its files, modified just
    now, are never recorded as difftest's (`record_written`), so the next command keeps them."""
    mine = persons_folder(tmp_path)
    out = tmp_path / "out"
    with locked_out(out):
        prepare_out(out)
        (out / "probe").symlink_to(mine)
        for name in VICTIMS:
            (mine / name).write_text("a person's")  # modified since the command started
        record_written(out, [])
    assert not json.loads((out / WROTE_FILE).read_text())["files"]
    with locked_out(out):
        prepare_out(out)
    assert intact(mine)


def test_a_tampered_manifest_removes_nothing_outside_out_nor_a_file_difftest_does_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """#10: absolute entries, '..', a folder, a symlink listed itself: each ignored and counted."""
    mine = persons_folder(tmp_path)
    out = tmp_path / "out"
    with locked_out(out):
        prepare_out(out)
        (out / "notes.txt").write_text("a person's")
        (out / "report.md").symlink_to(mine / "a-job.json")
        (out / "probe" / "y-job.json").mkdir(parents=True)
    hostile = [
        str(mine / "a-job.json"),
        "probe/../../mine/b-runs.jsonl",
        "probe/./../../mine/c-probe.log",
        "notes.txt",
        "report.md",
        "probe/y-job.json",
    ]
    add_to_manifest(out, hostile)
    with locked_out(out):
        prepare_out(out)
    assert intact(mine) and (out / "notes.txt").read_text() == "a person's"
    assert (out / "report.md").is_symlink() and (out / "probe" / "y-job.json").is_dir()
    assert f"left {len(hostile)} entries of {WROTE_FILE} in place" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_manifest_replaced_by_a_fifo_or_a_symlink_is_not_read(tmp_path: Path) -> None:
    """#10: reading a FIFO would block the command for ever; a symlinked manifest could list what
    another folder's manifest lists. Either lists nothing: nothing is removed."""
    mine = persons_folder(tmp_path)
    listing = tmp_path / "listing.json"
    listing.write_text(json.dumps({"files": ["probe/a-job.json"], "started": 0}))
    for plant in ("fifo", "symlink"):
        out = tmp_path / plant
        (out / "probe").mkdir(parents=True)
        (out / "probe" / "a-job.json").write_text("a person's")
        if plant == "fifo":
            os.mkfifo(out / WROTE_FILE)
        else:
            (out / WROTE_FILE).symlink_to(listing)
        with locked_out(out):
            prepare_out(out)
        assert (out / "probe" / "a-job.json").read_text() == "a person's"
    assert intact(mine)


def test_every_file_blame_and_fuzz_write_is_recorded_and_cleared_by_the_next_command(
    tmp_path: Path,
) -> None:
    """#15, #16: what the manifest lists of blame's and fuzz's own files is removed (and the folders
    that leaves empty); names are as `run.blame.record` and `run.fuzz.campaign` write them."""
    out = tmp_path / "out"
    finding = "fuzz-01-main-diverge-num_drafts"
    theirs = [
        "blame.yaml",
        "blame-0123456789ab-1.patch",
        "fuzz.json",
        "fuzz.md",
        "found/branches.yaml",
        f"found/scheduler/{finding}.yaml",
        f"found/evidence/{finding}/evidence.json",
        f"found/evidence/{finding}/probe/main-scheduler-job.json",
        f"found/evidence/{finding}/probe/main-scheduler-runs.jsonl",
        "probe/main-scheduler-server.log",
        "probe/scheduler-forkserver.log",
    ]
    with locked_out(out):
        prepare_out(out)
        for name in theirs:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text("difftest's")
        record_written(out, theirs)
    with locked_out(out):
        prepare_out(out)
    assert not [name for name in theirs if (out / name).exists()]
    assert not (out / "found").exists() and not (out / "probe").exists()


# -- fuzz (#15) -----------------------------------------------------------------------


def unbuilt_workspace(_config: object, names: list[str], **_kwargs: object) -> SimpleNamespace:
    """What `prepare` returns for branches none of whose environments could be built: fuzz then
    probes nothing, so the command runs to its end in a second, its --out handling real."""
    return SimpleNamespace(
        branches=[SimpleNamespace(name=n, env=None, error="not built in this test") for n in names]
    )


def crafted_fuzz_json(out: Path, victim_file: Path, victim_dir: Path) -> None:
    """An earlier fuzz.json, as branch code can write it: its findings name paths outside --out."""
    report = FuzzReport(tier="scheduler", seed=0, reading="strict", branches=["main"])
    report.findings.append(
        Finding(
            name=victim_dir.name,
            file=os.path.relpath(victim_file, out),
            evidence=os.path.relpath(victim_dir / "evidence.json", out),
            observations=[],
            round=1,
            found_after_s=0.0,
        )
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz.json").write_text(report.model_dump_json())


def test_fuzz_removes_nothing_an_earlier_fuzz_json_names_outside_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#15: a crafted fuzz.json once made fuzz delete a file and a folder outside --out."""
    monkeypatch.setattr("difftest.run.fuzz.campaign.prepare", unbuilt_workspace)
    victim_file = tmp_path / "notes.txt"
    victim_file.write_text("a person's")
    victim_dir = persons_folder(tmp_path)
    out = tmp_path / "out"
    crafted_fuzz_json(out, victim_file, victim_dir)
    run_cli("fuzz", "-c", str(CONFIG), "--examples", "1", "--out", str(out))
    assert victim_file.read_text() == "a person's" and intact(victim_dir)
    # What this fuzz wrote is recorded, so the next command clears exactly that.
    assert {"fuzz.json", "fuzz.md"} <= set(json.loads((out / WROTE_FILE).read_text())["files"])
    with locked_out(out):
        prepare_out(out)
    assert not (out / "fuzz.json").exists() and not (out / "fuzz.md").exists()


# -- blame (#16) ----------------------------------------------------------------------


def stop_after_clearing(*_args: object, **_kwargs: object) -> None:
    """blame's search, replaced: the command has cleared --out when it gets here."""
    raise DifftestError("stopped by the test after --out was cleared")


@pytest.mark.parametrize("mine", ["blame.yaml", "blame-0123456789ab-1.patch"])
def test_blame_removes_only_the_blame_files_difftest_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mine: str
) -> None:
    """#16: blame once removed blame.yaml and blame-*.patch in --out by glob, a person's too."""
    monkeypatch.setattr("difftest.run.blame.search.blame", stop_after_clearing)
    out = tmp_path / "out"
    written = sorted({"blame.yaml", "blame-0123456789ab-1.patch", "blame-0123456789ab-2.patch"})
    write_report_set(out, {name: "difftest's" for name in written if name != mine})
    (out / mine).write_text("a person's")
    assert run_cli("blame", "-c", str(CONFIG), "pr-56195-style", "--out", str(out)) == 2
    assert (out / mine).read_text() == "a person's"
    assert not [name for name in written if name != mine and (out / name).exists()]

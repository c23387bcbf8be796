"""`--out` as a folder: the lock a writing command holds on it, and the reports written
into it as one set.

The lock is checked across real processes (a second interpreter holds it); the
disk-full path on a real full file system (a 64 KiB tmpfs, mounted when this
runs as root, skipped otherwise).
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from difftest.core.errors import ConfigError, DifftestError
from difftest.core.evidence import read_evidence
from difftest.reports import (
    HOLDER_FILE,
    LOCK_FILE,
    REPORT_FILES,
    STAGING_PREFIX,
    WROTE_FILE,
    locked_out,
    prepare_out,
    write_report_set,
    write_reports,
)
from tests.factories import make_evidence

#: Holds the lock of argv[1] until its stdin closes; says "held" once it does.
HOLDER = """
import sys
from difftest.reports import locked_out
with locked_out(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


@contextmanager
def held_elsewhere(out: Path) -> Iterator[subprocess.Popen[str]]:
    """`out` locked by another process (as a second difftest command would be)
    for the `with` block."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        if proc.poll() is None:
            proc.stdin.close()
        proc.wait()


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB file system (tmpfs), to fill: the disk-full path without faking an errno."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
            check=False,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        pytest.skip("no mount command on this machine")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path, leave: int = 0) -> None:
    """Fill `folder`'s file system to the last byte, then free `leave` bytes of it again."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))


def report_names(out: Path) -> list[str]:
    """What of a report set (or its staging) is in `out`."""
    return sorted(
        p.name for p in out.iterdir() if p.name in REPORT_FILES or p.name.startswith(STAGING_PREFIX)
    )


# -- the lock -------------------------------------------------------------------------


def test_a_second_command_is_refused_at_once_naming_the_holder_and_the_fix(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with locked_out(out):
        holder = json.loads((out / HOLDER_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["command"] == shlex.join(sys.argv)
        with pytest.raises(DifftestError) as refused, locked_out(out):
            pytest.fail("the lock was taken twice")
    assert refused.value.exit_code == 2
    assert (
        f"--out {str(out)!r} is in use by another difftest command: PID {os.getpid()}"
        in refused.value.problem
    )
    assert shlex.join(sys.argv) in refused.value.problem
    assert refused.value.hint == "wait for it to finish, or pass another --out"


def test_a_lock_held_by_another_process_is_refused_with_its_pid_and_command(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with held_elsewhere(out) as proc, pytest.raises(DifftestError) as refused, locked_out(out):
        pass
    assert f"PID {proc.pid} on " in refused.value.problem
    assert refused.value.problem.endswith(
        f": -c {shlex.quote(str(out))}"
    )  # its command line (python -c HOLDER OUT)
    with locked_out(out):  # the holder ended: free again
        assert json.loads((out / HOLDER_FILE).read_text())["pid"] == os.getpid()


def test_a_killed_holder_never_leaves_the_lock_stuck(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with held_elsewhere(out) as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert (
            json.loads((out / HOLDER_FILE).read_text())["pid"] == proc.pid
        )  # it could not clean up
        with locked_out(out):
            assert json.loads((out / HOLDER_FILE).read_text())["pid"] == os.getpid()


@pytest.mark.parametrize("raised", [RuntimeError, KeyboardInterrupt, DifftestError])
def test_the_lock_is_released_on_every_way_out(tmp_path: Path, raised: type[BaseException]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(raised), locked_out(out):
        raise raised("boom")
    assert not (out / HOLDER_FILE).exists()
    with locked_out(out):
        pass


def test_a_folder_the_lock_made_and_nothing_used_is_removed_again(tmp_path: Path) -> None:
    made, kept = tmp_path / "made", tmp_path / "kept"
    kept.mkdir()
    for out in (made, kept):
        with pytest.raises(DifftestError), locked_out(out):
            raise DifftestError("a usage error")
    assert not made.exists()
    assert kept.is_dir()
    with locked_out(made):
        (made / "report.md").write_text("kept: something was written")
    assert (made / "report.md").is_file()


@pytest.mark.parametrize("where", ["a-file", "a-file/below"])
def test_an_out_that_is_not_a_folder_is_unusable_not_locked(tmp_path: Path, where: str) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    out = tmp_path / where
    with (
        pytest.raises(DifftestError, match=f"--out {str(out)!r} cannot be used for reports") as exc,
        locked_out(out),
    ):
        pass
    assert exc.value.exit_code == 2 and exc.value.hint


def test_prepare_out_under_the_lock_keeps_it_and_clears_a_killed_commands_staging(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    write_report_set(out, {"report.md": "an older report"})
    (out / f"{STAGING_PREFIX}abc").mkdir(parents=True)
    (out / f"{STAGING_PREFIX}abc" / "report.md").write_text("half a set")
    with locked_out(out):
        prepare_out(out)
        assert sorted(p.name for p in out.iterdir()) == [WROTE_FILE, LOCK_FILE, HOLDER_FILE]


@pytest.mark.parametrize(
    "mine", ["report.md", "junit.xml", "evidence.json", "probe/x-job.json", "notes.txt"]
)
def test_prepare_out_removes_only_what_difftest_wrote_there(tmp_path: Path, mine: str) -> None:
    """#40, case 3: a person's file named like a report survives; difftest's own are cleared."""
    out = tmp_path / "out"
    (out / "probe").mkdir(parents=True)
    (out / "probe" / "main-scheduler-runs.jsonl").write_text("{}")
    written = sorted({"report.html", "evidence.json"} - {mine})
    write_report_set(out, {name: "difftest's" for name in written})
    (out / mine).write_text("a person's")
    with locked_out(out):
        prepare_out(out)
    assert (out / mine).read_text() == "a person's"
    assert not any((out / name).exists() for name in written)
    assert not (out / "probe" / "main-scheduler-runs.jsonl").exists()


@pytest.mark.parametrize("where", ["/", "/etc", "/usr", "~"])
def test_a_system_folder_is_refused_as_out_and_nothing_there_is_touched(where: str) -> None:
    with (
        pytest.raises(ConfigError, match="is a system folder") as exc,
        locked_out(Path(where).expanduser()),
    ):
        pass
    assert exc.value.exit_code == 2


# -- the reports as one set -----------------------------------------------------------


def test_write_reports_writes_the_extra_files_in_the_same_set(tmp_path: Path) -> None:
    evidence = make_evidence()
    paths = write_reports(evidence, tmp_path / "out", extra={"gate.md": "## gate\n"})
    assert set(paths) == {"markdown", "html", "junit", "gate.md", "evidence"}
    assert list(paths)[-1] == "evidence"
    assert (tmp_path / "out" / "gate.md").read_text() == "## gate\n"
    assert read_evidence(paths["evidence"]) == evidence
    assert report_names(tmp_path / "out") == sorted(
        ["evidence.json", "gate.md", "junit.xml", "report.html", "report.md"]
    )


@pytest.mark.parametrize("raised", [OSError(errno.EIO, "Input/output error"), KeyboardInterrupt()])
def test_a_failure_between_renames_leaves_no_report_of_either_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException
) -> None:
    out = tmp_path / "out"
    write_reports(make_evidence(), out)  # an older set, complete
    real_replace, calls = os.replace, []

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if (
            Path(dst).parent == out
        ):  # a staged file moved into place (not a write into the staging folder)
            calls.append(dst)
            if len(calls) == 3:
                raise raised
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(DifftestError if isinstance(raised, OSError) else KeyboardInterrupt) as exc:
        write_report_set(
            out,
            {"report.md": "new", "report.html": "new", "junit.xml": "new", "evidence.json": "{}"},
        )
    monkeypatch.undo()
    assert len(calls) == 3
    # The older set lost its evidence first, the new files moved so far were removed:
    # no set looks complete.
    assert "evidence.json" not in report_names(out) and not (out / "report.md").exists()
    assert not any(p.name.startswith(STAGING_PREFIX) for p in out.iterdir())
    if isinstance(raised, OSError):
        assert f"--out {str(out)!r}" in str(exc.value) and "EIO: Input/output error" in str(
            exc.value
        )


@pytest.mark.parametrize("free", [0, 8192], ids=["full", "room-for-some"])
def test_a_full_disk_leaves_no_partial_set_and_says_so(tiny_fs: Path, free: int) -> None:
    out = tiny_fs / "out"
    out.mkdir()  # kept when left empty: a folder the lock made would be removed again
    with locked_out(out):
        prepare_out(out)
        fill(tiny_fs, leave=free)
        with pytest.raises(DifftestError) as exc:
            write_reports(make_evidence(), out, extra={"gate.md": "## gate\n"})
    assert exc.value.exit_code == 2
    assert f"--out {str(out)!r}" in exc.value.problem
    assert "the disk is full (ENOSPC: No space left on device)" in exc.value.problem
    assert "free space" in exc.value.hint
    assert report_names(out) == []
    assert sorted(p.name for p in out.iterdir()) == [
        WROTE_FILE,
        LOCK_FILE,
    ]  # the holder removed, nothing half-written


def test_a_full_disk_before_anything_runs_is_refused_naming_the_folder(tiny_fs: Path) -> None:
    out = tiny_fs / "out"
    out.mkdir()
    fill(tiny_fs)
    with (
        pytest.raises(
            DifftestError, match=r"--out .* cannot be used for reports: the disk is full \(ENOSPC"
        ),
        locked_out(out),
    ):
        pass
    (tiny_fs / "filler").unlink()
    with locked_out(out):  # the refusal left no lock behind
        pass


def test_a_disk_full_error_escaping_the_command_names_the_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    target = out / "fuzz.json"
    with pytest.raises(DifftestError) as exc, locked_out(out):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))
    assert (
        exc.value.problem
        == f"cannot write {str(target)!r}: the disk is full (ENOSPC: No space left on device)"
    )
    with pytest.raises(OSError, match="Permission denied"), locked_out(out):
        raise PermissionError(
            errno.EACCES, "Permission denied"
        )  # other OSErrors are not disk-full: unchanged


def test_an_out_folder_from_an_older_difftest_is_still_cleared(tmp_path: Path) -> None:
    """No manifest, but difftest's own evidence: its reports and probe files are difftest's."""
    from difftest.core.evidence import write_evidence

    out = tmp_path / "out"
    write_evidence(make_evidence(), out / "evidence.json")
    (out / "report.md").write_text("an older report")
    (out / "probe").mkdir()
    (out / "probe" / "main-scheduler-job.json").write_text("{}")
    with locked_out(out):
        prepare_out(out)
    assert not (out / "report.md").exists() and not (out / "evidence.json").exists()
    assert not (out / "probe" / "main-scheduler-job.json").exists()


def test_the_probe_files_of_a_command_that_crashed_are_cleared_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), locked_out(out):
        prepare_out(out)
        (out / "probe").mkdir()
        (out / "probe" / "pr-engine-job.json").write_text("{}")
        raise RuntimeError("in the middle of probing")
    with locked_out(out):
        prepare_out(out)
    assert not (out / "probe" / "pr-engine-job.json").exists()

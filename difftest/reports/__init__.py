"""Reports rendered from an `Evidence`: terminal, Markdown, HTML, JUnit and the evidence file.

What there is to render, and into which file, is `registry.OUTPUTS`; its
modules import their renderers only when they render, which keeps this
package importable without rich or jinja2 loaded. This module owns `--out` as
a folder: the lock a writing command holds on it (`locked_out`), clearing it
(`prepare_out`) and writing the reports into it as one set (`write_report`,
`write_report_set`).
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from difftest.core.errors import ConfigError, DifftestError
from difftest.core.evidence import Evidence, atomic_write_text
from difftest.reports import registry
from difftest.reports.sources import RunReport

if TYPE_CHECKING:
    from difftest.core.records import ProbeRun
    from difftest.reports.trace import Trace
    from difftest.tiers.common.scenario import ScenarioBase

#: What a measuring command writes into `--out` (`registry.report_files`); removed when the next
#: command starts.
REPORT_FILES = registry.report_files()
#: What the runner writes into `--out/probe/` per branch and tier.
PROBE_FILES = ("*-job.json", "*-runs.jsonl", "*-probe.log")
#: The lock a command that writes into `--out` holds for as long as it runs (kept in place: see
#: `locked_out`).
LOCK_FILE = ".difftest.lock"
#: Beside the lock: who holds it (PID, command line, host, start), for the message of a command
#: refused.
HOLDER_FILE = ".difftest.lock.json"
#: Reports being written (`write_report_set`); one left by a killed command is removed by
#: `prepare_out`.
STAGING_PREFIX = ".difftest-staging-"
#: What difftest itself wrote into `--out` (paths relative to it) and when the command now writing
#: there started: `prepare_out` removes only what is listed, never a file a person put there.
WROTE_FILE = ".difftest-wrote.json"
#: Folders never used as `--out`: clearing what difftest wrote there is harmless, but a command
#: writing reports into them is a typo.
SYSTEM_ROOTS = frozenset(
    Path(p)
    for p in (
        "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc",
        "/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var",
    )
)  # fmt: skip
#: Errors that mean the file system has no room left, whatever was being written.
DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def _why(exc: OSError) -> str:
    """An OSError in words, its errno name included: 'the disk is full (ENOSPC: No space left on
    device)'."""
    name = errno.errorcode.get(exc.errno or 0, "")
    detail = f"{name}: {exc.strerror}" if name and exc.strerror else str(exc.strerror or exc)
    if exc.errno == errno.ENOSPC:
        return f"the disk is full ({detail})"
    if exc.errno == errno.EDQUOT:
        return f"the disk quota is used up ({detail})"
    return detail


def _disk_full_fix(exc: OSError) -> str | None:
    return (
        "free space on that file system, or pass --out a folder on another one"
        if exc.errno in DISK_FULL
        else None
    )


def _unusable(out: Path, exc: OSError) -> ConfigError:
    """The error of an `--out` that cannot be made, locked, cleared or written before anything
    runs."""
    why = "it is a file, not a folder" if out.exists() and not out.is_dir() else _why(exc)
    return ConfigError(
        f"--out {str(out)!r} cannot be used for reports: {why}",
        _disk_full_fix(exc) or "pass --out a folder you can write to (it is created if missing)",
    )


@contextmanager
def locked_out(out_dir: str | Path) -> Iterator[Path]:
    """Hold `out_dir`'s lock for the whole command; refuse at once (exit 2) when another command
    holds it.

    Two commands writing into one folder clear and overwrite each other's probe
    records and reports, so the evidence of one would name records of the other.
    A second command is refused rather than made to wait: in CI a wait looks like
    a hung job and ends in a timeout far from its cause, while a refusal names the
    holder (from the sidecar `HOLDER_FILE`) and the fix at once. Take it before
    `prepare_out`, which clears what the holder may still be writing.

    The lock is an OS lock (flock), so a killed holder never leaves it stuck, and
    it is released on every way out (exceptions, Ctrl-C). The holder file is
    removed before the lock is released, so a release never removes the next
    holder's. A folder this call created and the command left empty is removed
    again, so a usage error leaves no trace. A disk-full OSError escaping the
    command becomes a DifftestError naming the file, not a traceback.
    """
    out = Path(out_dir)
    try:
        home: Path | None = Path.home().resolve()
    except RuntimeError:  # no HOME and no user entry (a container's numeric user)
        home = None
    if out.resolve() in SYSTEM_ROOTS or out.resolve() == home:
        raise ConfigError(
            f"--out {str(out)!r} is a system folder (or your home): difftest writes its reports "
            "and probe records into --out",
            "pass --out a folder of its own (e.g. `--out out`, the default)",
        )
    created = not out.exists()
    lock = _acquire(out)
    holder = out / HOLDER_FILE
    try:
        try:
            atomic_write_text(holder, json.dumps(_holder_record(), indent=1) + "\n")
        except OSError as exc:
            raise _unusable(out, exc) from None
        try:
            yield out
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            where = repr(exc.filename) if exc.filename else f"into --out {str(out)!r}"
            raise DifftestError(
                f"cannot write {where}: {_why(exc)}", _disk_full_fix(exc) or ""
            ) from None
    finally:
        holder.unlink(missing_ok=True)
        if (out / WROTE_FILE).exists():
            # The probe files of a command that crashed or was interrupted are difftest's too.
            try:
                record_written(out, [])
            except OSError:
                pass
        _release(out, lock, created)


def _acquire(out: Path) -> FileLock:
    """`out`'s lock, taken without waiting; the folder is made first."""
    missing = FileNotFoundError(errno.ENOENT, "the folder keeps disappearing")
    for _attempt in range(3):
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _unusable(out, exc) from None
        lock = FileLock(str(out / LOCK_FILE))
        try:
            lock.acquire(timeout=0)
            return lock
        except Timeout:
            raise DifftestError(
                f"--out {str(out)!r} is in use by another difftest command: {_holder(out)}",
                "wait for it to finish, or pass another --out",
            ) from None
        except FileNotFoundError as exc:
            missing = (
                exc  # a command that had made the folder removed it again (`_release`) just now
            )
        except OSError as exc:
            raise _unusable(out, exc) from None
    raise _unusable(out, missing)


def _release(out: Path, lock: FileLock, created: bool) -> None:
    """Release `lock`; remove `out` when this command made it and left nothing in it but the lock.

    The lock file is unlinked while still held: filelock then sees an unlinked
    inode in any peer that opened it and opens the path anew, so no two commands
    ever hold locks on two files of one name.
    """
    try:
        empty = created and [p.name for p in out.iterdir()] == [LOCK_FILE]
        if empty:
            (out / LOCK_FILE).unlink(missing_ok=True)
    except OSError:
        empty = False
    lock.release()
    if empty:
        try:
            out.rmdir()
        except OSError:
            pass  # another command has begun to write into it


def _holder_record() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "command": shlex.join(sys.argv),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _holder(out: Path) -> str:
    """Who holds `out`'s lock, in words, from its holder file (which it may not have written
    yet)."""
    try:
        record = json.loads((out / HOLDER_FILE).read_text(encoding="utf-8"))
        return (
            f"PID {record['pid']} on {record['host']}, started {record['started']}: "
            f"{record['command']}"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return f"it has not recorded itself in {str(out / HOLDER_FILE)!r} (yet)"


def prepare_out(out_dir: str | Path) -> Path:
    """Make `out_dir` usable and clear what an earlier command wrote there, before anything runs.

    Reports are only ever written as a whole set at the end of a command
    (`write_report_set`); clearing the old ones first means that a command that
    crashes or is interrupted leaves no report at all, never an older one that
    looks current. Call it holding `locked_out`. Raises ConfigError (exit 2)
    naming the folder when it cannot be written.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        listed = _wrote(out)["files"] or _written_before_manifests(out)
        for rel in listed:
            if _ours(rel):
                (out / rel).unlink(missing_ok=True)
        for staging in out.glob(f"{STAGING_PREFIX}*"):
            shutil.rmtree(staging, ignore_errors=True)
        atomic_write_text(out / ".difftest-write-test", "").unlink()
        _record_wrote(out, [], started=time.time())
    except OSError as exc:
        raise _unusable(out, exc) from None
    return out


def _ours(rel: str) -> bool:
    """A listed path difftest may remove: a report or a probe file, nothing above `--out`."""
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts:
        return False
    if len(path.parts) == 1:
        return rel in registry.report_files()
    return path.parts[0] == "probe" and any(path.match(pattern) for pattern in PROBE_FILES)


def _written_before_manifests(out: Path) -> list[str]:
    """What a difftest from before `WROTE_FILE` wrote into `out`: its reports and probe files, where
    `out` holds no list but difftest's own evidence (else nothing: a person's folder is kept)."""
    if (out / WROTE_FILE).exists():
        return []
    try:
        Evidence.model_validate_json((out / "evidence.json").read_text())
    except (OSError, ValueError):
        return []
    probe = out / "probe"
    found = [name for name in registry.report_files() if (out / name).is_file()]
    found += [
        str(path.relative_to(out))
        for pattern in PROBE_FILES
        for path in (probe.rglob(pattern) if probe.is_dir() else [])
    ]
    return found


def _wrote(out: Path) -> dict[str, Any]:
    """`WROTE_FILE`'s content ({"files": [...], "started": seconds}); empty when absent or not
    difftest's (a file that does not parse lists nothing, so nothing is removed)."""
    try:
        data = json.loads((out / WROTE_FILE).read_text())
        files = [str(f) for f in data.get("files", []) if isinstance(f, str)]
        return {"files": files, "started": float(data.get("started") or 0)}
    except (OSError, ValueError, TypeError, AttributeError):
        return {"files": [], "started": 0.0}


def _record_wrote(out: Path, files: list[str], started: float | None = None) -> None:
    """Add `files` to what difftest wrote into `out` (and, from `prepare_out`, the start)."""
    known = _wrote(out)
    data = {
        "files": sorted(set(known["files"] if started is None else []) | set(files)),
        "started": known["started"] if started is None else started,
    }
    atomic_write_text(out / WROTE_FILE, json.dumps(data, indent=1) + "\n")


def record_written(out: Path, names: list[str]) -> None:
    """Record the report set just written, and the probe files this command wrote (in `probe/`,
    modified since it started: a person's file there, older, is never listed)."""
    started = _wrote(out)["started"]
    probe = out / "probe"
    probe_files = [
        str(path.relative_to(out))
        for pattern in PROBE_FILES
        for path in (probe.rglob(pattern) if probe.is_dir() else [])
        if path.is_file() and path.stat().st_mtime >= started - 1
    ]
    _record_wrote(out, [*names, *probe_files])


def write_report_set(out_dir: str | Path, files: Mapping[str, str]) -> dict[str, Path]:
    """Write `files` (name -> text) into `out_dir` as one set: all of them, or none.

    Each is written (and synced) into a staging folder inside `out_dir`, on the
    same file system, so the space is taken before anything moves; then each is
    renamed into place, the last one given last (the evidence, which the others
    are read against). The earlier file of that last name is removed before the
    first rename, so no mix of two sets ever looks complete. When anything fails
    (a full disk, an interrupt) every file already moved is removed again and
    the staging folder with it; an OSError becomes a DifftestError naming the
    folder and why (exit 2).
    """
    out = Path(out_dir)
    moved: list[Path] = []
    staging: Path | None = None
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
        for name, text in files.items():
            atomic_write_text(staging / name, text)
        if files:
            (out / list(files)[-1]).unlink(missing_ok=True)
        for name in files:
            os.replace(staging / name, out / name)
            moved.append(out / name)
        _sync_folder(out)
        record_written(out, list(files))
    except BaseException as exc:
        for path in moved:
            path.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
        raise DifftestError(
            f"the reports could not be written into --out {str(out)!r}: {_why(exc)}; none was "
            "written",
            _disk_full_fix(exc) or "check that you can write to that folder, then run again",
        ) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return {name: out / name for name in files}


def _sync_folder(folder: Path) -> None:
    """Make the renames durable: a crash right after the command ends keeps the set."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the renames are done either way
    finally:
        os.close(fd)


def write_report(
    report: RunReport, out_dir: str | Path, extra: Mapping[str, str] | None = None
) -> dict[str, Path]:
    """Every file output of `report` (`registry.OUTPUTS`: report.md, report.html, junit.xml, the
    gate's gate.md, evidence.json) with the `extra` files (name -> text), written into `out_dir` as
    one set (`write_report_set`), the evidence last; keyed by output name (an extra file by its
    own). Everything is rendered before anything is written."""
    rendered = registry.rendered_files(report)
    texts = {o.file: text for o, text in rendered if o.file and not o.last}
    texts.update(extra or {})
    texts.update({o.file: text for o, text in rendered if o.file and o.last})
    names = {o.file: o.name for o, _ in rendered}
    written = write_report_set(out_dir, texts)
    return {names.get(name, name): path for name, path in written.items()}


def write_files(source: object, out_dir: str | Path) -> dict[str, Path]:
    """Every file output of `source` written into `out_dir`, each on its own (`atomic_write_text`):
    a summary written beside files its command writes itself (fuzz.md, beside fuzz.json and found/).
    Keyed by output name; everything is rendered before anything is written."""
    out = Path(out_dir)
    rendered = registry.rendered_files(source)
    return {o.name: atomic_write_text(out / o.file, text) for o, text in rendered if o.file}


def write_reports(
    evidence: Evidence,
    out_dir: str | Path,
    traces: dict[tuple[str, str, str], Trace] | None = None,
    extra: Mapping[str, str] | None = None,
    scenarios: Mapping[str, ScenarioBase] | None = None,
    recorded: Mapping[tuple[str, str, str], ProbeRun] | None = None,
) -> dict[str, Path]:
    """`write_report` of `evidence` alone: the HTML report carries the step traces given, keyed
    by (branch, scenario, run label); `scenarios` (by name) and `recorded` (runs with steps, by
    the same key) let the conclusion name the oracle's reading as a row count's reason."""
    report = RunReport(evidence=evidence, scenarios=scenarios, recorded=recorded, traces=traces)
    return write_report(report, out_dir, extra)

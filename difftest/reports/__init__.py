"""Reports rendered from an `Evidence`: terminal, Markdown, HTML, JUnit and the evidence file.

What there is to render, and into which file, is `registry.OUTPUTS`; its
modules import their renderers only when they render, which keeps this
package importable without rich or jinja2 loaded. This module owns `--out` as
a folder: the lock a writing command holds on it (`locked_out`), clearing it
(`prepare_out`) and writing the reports into it as one set (`write_report`,
`write_report_set`).

Branch code runs with the user's rights and may write into `--out` (its probe
records go there), so everything this module reads back from `--out` is
untrusted: the manifest of what difftest wrote (`WROTE_FILE`) may list any path
and any folder below `--out` may be a symlink. Clearing therefore walks each
listed path from `--out`'s own descriptor without following a symlink
(O_NOFOLLOW, dir_fd), removes only regular files with names difftest writes,
and says in one line what it ignored; nothing outside `--out` is ever removed.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from difftest.core.errors import ConfigError, DifftestError
from difftest.core.evidence import Evidence, atomic_write_text
from difftest.core.locks import own_lock
from difftest.reports import registry
from difftest.reports.sources import RunReport

if TYPE_CHECKING:
    from difftest.core.records import ProbeRun
    from difftest.reports.trace import Trace
    from difftest.tiers.common.scenario import ScenarioBase

#: What a measuring command writes into `--out` (`registry.report_files`); removed when the next
#: command starts.
REPORT_FILES = registry.report_files()
#: What the runner writes into `--out/probe/` per branch and tier (a warm probe's and the fork
#: server's logs too).
PROBE_FILES = ("*-job.json", "*-runs.jsonl", "*-probe.log", "*-server.log", "*-forkserver.log")
#: What commands write into `--out` besides the registry's outputs, as paths relative to it, each
#: part a pattern (`**`: any folders): the probe files; blame's config and the patch series it
#: names (`run.blame.record`); fuzz's summary and findings, each with its evidence and probe files
#: (`run.fuzz.campaign`). A path the manifest lists is removed only when it matches one of these
#: (or is an output's file): a tampered manifest cannot name a person's notes.txt.
OWN_FILES = (
    *(f"probe/**/{pattern}" for pattern in PROBE_FILES),
    "blame.yaml",
    "blame-*.patch",
    "fuzz.json",
    "found/branches.yaml",
    "found/*/*.yaml",
    "coverage.json",
    "coverage/*.html",
    "found/evidence/*/evidence.json",
    *(f"found/evidence/*/probe/{pattern}" for pattern in PROBE_FILES),
)
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
#: Opening a folder below `--out` on the way to a listed file: never through a symlink.
_SUBFOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The most of the manifest (or holder file) read: a tampered one cannot fill memory.
MANIFEST_LIMIT = 16 << 20
#: Entries the line about an ignored manifest shows (the count says how many there were).
_SHOWN = 3

Log = Callable[[str], None]


def _say(message: str) -> None:
    """Where `prepare_out` reports when no log is given: stderr, as the CLI's own log."""
    print(f"difftest: {message}", file=sys.stderr, flush=True)


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
        lock = own_lock(out / LOCK_FILE)  # a symlink put there is replaced, never followed
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
        record = json.loads(_read_untrusted(out / HOLDER_FILE, MANIFEST_LIMIT))
        return (
            f"PID {record['pid']} on {record['host']}, started {record['started']}: "
            f"{record['command']}"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return f"it has not recorded itself in {str(out / HOLDER_FILE)!r} (yet)"


def prepare_out(out_dir: str | Path, log: Log | None = None) -> Path:
    """Make `out_dir` usable and clear what an earlier command wrote there, before anything runs.

    Reports are only ever written as a whole set at the end of a command
    (`write_report_set`); clearing the old ones first means that a command that
    crashes or is interrupted leaves no report at all, never an older one that
    looks current. Only what the manifest lists is removed, and of that only
    regular files difftest names (`_ours`) reached without passing a symlink: the
    manifest and the folders below `--out` are writable by branch code. What was
    listed but ignored is said in one line to `log` (default: stderr). Call it
    holding `locked_out`. Raises ConfigError (exit 2) naming the folder when it
    cannot be written.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        listed = _wrote(out)["files"] or _written_before_manifests(out)
        ignored = _clear_listed(out, listed)
        for staging in out.glob(f"{STAGING_PREFIX}*"):
            shutil.rmtree(staging, ignore_errors=True)  # never through a symlink (safe rmtree)
        atomic_write_text(out / ".difftest-write-test", "").unlink()
        _record_wrote(out, [], started=time.time())
    except OSError as exc:
        raise _unusable(out, exc) from None
    if ignored:
        (log or _say)(_ignored_line(out, ignored))
    return out


def _ignored_line(out: Path, ignored: list[str]) -> str:
    """The one line saying which listed entries were not removed, and why that is safe."""
    shown = ", ".join(repr(rel) for rel in ignored[:_SHOWN])
    more = f" and {len(ignored) - _SHOWN} more" if len(ignored) > _SHOWN else ""
    return (
        f"--out {str(out)!r}: left {len(ignored)} entr{'y' if len(ignored) == 1 else 'ies'} of "
        f"{WROTE_FILE} in place ({shown}{more}): absolute, with '..', through a symlink, not a "
        "regular file or not a file difftest writes; nothing outside --out is removed"
    )


def _clear_listed(out: Path, listed: list[str]) -> list[str]:
    """Remove each listed file difftest may remove (`_entry_parts`, `_ours`) from inside `out`,
    never through a symlink (`_remove_inside`); the entries ignored."""
    ignored: list[str] = []
    if not listed:
        return ignored
    top = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for rel in listed:
            parts = _entry_parts(rel)
            if parts is None or not _ours(parts) or not _remove_inside(top, parts):
                ignored.append(rel)
    finally:
        os.close(top)
    return ignored


def _entry_parts(rel: str) -> list[str] | None:
    """A manifest entry as the names it passes below `--out`; None for one that could lead
    anywhere else (absolute, '..', '.', an empty part, a NUL)."""
    if not rel or rel.startswith("/") or "\0" in rel:
        return None
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return parts


def _ours(parts: list[str]) -> bool:
    """Whether a path below `--out` is one difftest writes: an output's file (`registry.OUTPUTS`)
    at the top, or one of `OWN_FILES`."""
    if len(parts) == 1 and parts[0] in {o.file for o in registry.OUTPUTS if o.file}:
        return True
    return any(_matches(parts, pattern.split("/")) for pattern in OWN_FILES)


def _matches(parts: list[str], pattern: list[str]) -> bool:
    """`parts` against `pattern` part by part (fnmatch each; `**`: any number of folders)."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_matches(parts[skip:], pattern[1:]) for skip in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:])


def _remove_inside(top: int, parts: list[str]) -> bool:
    """Unlink the regular file `parts` names below the folder open as `top`, opening each folder on
    the way with O_NOFOLLOW, so that no symlink is followed and nothing outside is reached; then
    the folders it leaves empty. True when removed (or already gone); False when the way passes a
    symlink or a file, or what is there is not a regular file (nothing is removed)."""
    opened: list[int] = []
    try:
        at = top
        for name in parts[:-1]:
            try:
                at = os.open(name, _SUBFOLDER, dir_fd=at)
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return False  # a symlink (or a file) where a folder should be
                raise
            opened.append(at)
        try:
            found = os.stat(parts[-1], dir_fd=at, follow_symlinks=False)
        except FileNotFoundError:
            return True
        if not stat.S_ISREG(found.st_mode):
            return False  # a symlink, folder or FIFO: difftest writes none of these
        # A symlink swapped in since the stat: unlink removes the link, never its target.
        os.unlink(parts[-1], dir_fd=at)
        _remove_emptied(top, opened, parts)
        return True
    finally:
        for fd in reversed(opened):
            os.close(fd)


def _remove_emptied(top: int, opened: list[int], parts: list[str]) -> None:
    """Remove the folders below `top` that the removal of `parts` left empty (found/evidence/NAME/
    probe/ ...), deepest first; stops at the first that is not empty. rmdir never follows a link."""
    for depth in range(len(opened) - 1, -1, -1):
        try:
            os.rmdir(parts[depth], dir_fd=opened[depth - 1] if depth else top)
        except OSError:
            return


def _written_before_manifests(out: Path) -> list[str]:
    """What a difftest from before `WROTE_FILE` wrote into `out`: its reports and probe files, where
    `out` holds no list but difftest's own evidence (else nothing: a person's folder is kept)."""
    if os.path.lexists(out / WROTE_FILE):
        return []
    try:
        Evidence.model_validate_json(_read_untrusted(out / "evidence.json"))
    except (OSError, ValueError):
        return []
    found = [name for name in registry.report_files() if (out / name).is_file()]
    return found + _probe_files(out, since=None)


def _probe_files(out: Path, since: float | None) -> list[str]:
    """The probe files (`PROBE_FILES`) below `out/probe/`, relative to `out`, modified since
    `since` (None: any): regular files only, never in or below a symlinked folder."""
    probe = out / "probe"
    try:
        if not stat.S_ISDIR(os.lstat(probe).st_mode):
            return []
    except OSError:
        return []
    found = []
    for folder, _dirs, files in os.walk(probe):  # symlinked folders are listed, never entered
        for name in files:
            path = Path(folder) / name
            if not any(fnmatchcase(name, pattern) for pattern in PROBE_FILES):
                continue
            try:
                info = os.lstat(path)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISREG(info.st_mode) and (since is None or info.st_mtime >= since - 1):
                found.append(str(path.relative_to(out)))
    return found


def _read_untrusted(path: Path, limit: int | None = None) -> str:
    """The text of a file in `--out` that branch code may have replaced: never through a symlink,
    a regular file only (a FIFO would block for ever), at most `limit` bytes (ValueError beyond)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = handle.read() if limit is None else handle.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data.decode("utf-8")


def _wrote(out: Path) -> dict[str, Any]:
    """`WROTE_FILE`'s content ({"files": [...], "started": seconds}); empty when absent or not
    difftest's (a file that does not parse lists nothing, so nothing is removed). Its entries are
    untrusted: `prepare_out` checks each before it removes anything."""
    try:
        data = json.loads(_read_untrusted(out / WROTE_FILE, MANIFEST_LIMIT))
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
    """Record `names` (paths relative to `out` that this command wrote there), and the probe files
    this command wrote (in `probe/`, modified since it started: a person's file there, older, is
    never listed), so that the next command clears them and nothing else."""
    _record_wrote(out, [*names, *_probe_files(out, since=_wrote(out)["started"])])


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
            (staging / name).parent.mkdir(parents=True, exist_ok=True)  # `coverage/index.html`
            atomic_write_text(staging / name, text)
        if files:
            (out / list(files)[-1]).unlink(missing_ok=True)
        for name in files:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
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
    Keyed by output name; everything is rendered before anything is written. Each is recorded in
    the manifest (`record_written`), so the next command clears it."""
    out = Path(out_dir)
    rendered = registry.rendered_files(source)
    written = {o.name: atomic_write_text(out / o.file, text) for o, text in rendered if o.file}
    record_written(out, [o.file for o, _ in rendered if o.file])
    return written


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

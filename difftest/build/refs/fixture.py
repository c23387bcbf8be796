"""Fixture repository: the base wheel's Python sources, committed as vLLM's own repo.

Without a vLLM checkout, branches and patch series still need a commit to start
from. The installed wheel is exactly the code the base environment runs, so its
Python sources become commit `v<version>` on `main`, laid out like vLLM's
repository (`vllm/...` at the root). Identity, dates, file modes and git config
are fixed, so every machine builds the same SHAs from the same wheel, and a
patch series on top of it gives the same SHAs too.

Where the release's own tests are known (`upstream`: `tests/` and
`pyproject.toml` from its source distribution, see `build.tests.sdist`), they
are committed next to the sources, so patch series can add or change tests as
real pull requests do, and the tests tier finds them where a real clone has them.

The repository is bare: nothing is ever checked out, branches are built as
commits (see `patches.py`) and read back blob by blob (see `diff.py`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import time
from pathlib import Path

import git
from filelock import Timeout
from git.exc import GitCommandError

from difftest.build.refs._git import git_message, isolated_env
from difftest.core import paths
from difftest.core.errors import RefError
from difftest.core.locks import own_lock

_log = logging.getLogger(__name__)

#: The top folder of the fixture, as in vLLM's repository.
PACKAGE_DIR = "vllm"
#: Written last, inside the finished repository: its presence (and agreement
#: with the refs) is what makes a fixture trusted.
MARKER = "difftest-fixture.json"
#: Bump when the layout or commit recipe changes, so old fixtures are rebuilt.
FORMAT = 1
LOCK_TIMEOUT_S = 600.0

_EXCLUDED_DIRS = frozenset({"__pycache__"})
#: Compiled build products: the branch environment keeps the base's binaries,
#: so only sources belong in the repository.
_EXCLUDED_FILE = re.compile(r"\.(pyc|pyo)$|\.(so|pyd|dylib|dll)(\.\d+)*$")
_BUILDING = ".building-"


def fixture_files(vllm_src: Path) -> list[tuple[str, Path]]:
    """(path in the repository, file on disk) for every source file, sorted by repository path."""
    return [(repo_path, Path(entry.path)) for repo_path, entry in _source_entries(vllm_src)]


def _source_entries(vllm_src: Path) -> list[tuple[str, os.DirEntry[str]]]:
    """(path in the repository, directory entry) for every source file, sorted by repository path.

    `os.scandir` gives each file's type with its directory entry, so the walk costs no `stat` per
    file (`source_digest` runs on every command: the base's 3,300 files took 0.13 s with `os.walk`
    and a `Path.is_file()` each, 0.04 s this way). As with `os.walk`, links to folders are not
    followed.
    """
    vllm_src = Path(vllm_src)
    if not vllm_src.is_dir():
        raise RefError(
            f"{vllm_src} is not a folder, so no fixture repository can be built from it",
            "pass the installed package folder, `<site-packages>/vllm`",
        )
    found: list[tuple[str, os.DirEntry[str]]] = []
    pending = [(str(vllm_src), PACKAGE_DIR)]
    while pending:
        folder, prefix = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # as `os.walk` does
        for entry in entries:
            if entry.is_dir():  # a folder, or a link to one: never a file
                if not entry.is_symlink() and entry.name not in _EXCLUDED_DIRS:
                    pending.append((entry.path, f"{prefix}/{entry.name}"))
                continue
            if _EXCLUDED_FILE.search(entry.name) or not entry.is_file():
                continue
            if "\n" in entry.name:
                raise RefError(
                    f"{entry.path}: a file name with a newline cannot be committed",
                    "remove or rename that file",
                )
            found.append((f"{prefix}/{entry.name}", entry))
    found.sort(key=lambda item: os.fsencode(item[0]))
    return found


def upstream_files(upstream: Path) -> list[tuple[str, Path]]:
    """(path in the repository, file on disk) for every file of an extracted `tests/` +
    `pyproject.toml`."""
    found: list[tuple[str, Path]] = []
    for folder, dirs, files in os.walk(upstream):
        dirs[:] = sorted(d for d in dirs if d not in _EXCLUDED_DIRS)
        rel = Path(folder).relative_to(upstream)
        for name in files:
            full = Path(folder) / name
            repo_path = (rel / name).as_posix()
            if repo_path.split("/", 1)[0] not in ("tests", "pyproject.toml") or not full.is_file():
                continue
            if name.endswith((".pyc", ".pyo")) or "\n" in name:
                continue
            found.append((repo_path, full))
    return found


def source_digest(vllm_src: Path, record: Path | None = None, upstream_id: str = "") -> str:
    """A cheap fingerprint of the installed sources: names and sizes (+ the wheel's RECORD).

    It names the fixture's folder, so a different wheel gets a different
    fixture; it reads no file contents except RECORD, which holds the wheel's
    own hash of every file and so catches same-size edits. `upstream_id` (the
    pinned sdist hash the tests come from) joins it when tests are committed.
    """
    digest = hashlib.sha256(f"difftest-fixture {FORMAT}\n".encode())
    for repo_path, entry in _source_entries(vllm_src):
        digest.update(os.fsencode(repo_path) + b"\0" + str(entry.stat().st_size).encode() + b"\n")
    if record is not None:
        digest.update(b"RECORD\0" + Path(record).read_bytes())
    if upstream_id:
        digest.update(b"UPSTREAM\0" + upstream_id.encode())
    return digest.hexdigest()[:16]


def fixture_repo_path(package: str, version: str, source_digest: str) -> Path:
    """Where the fixture of one installed wheel lives in the cache."""
    name = "-".join(
        re.sub(r"[^A-Za-z0-9._-]+", "_", part) for part in (package, version, source_digest)
    )
    return paths.repos_dir() / name


def ensure_fixture_repo(
    vllm_src: Path,
    package: str,
    version: str,
    record: Path | None = None,
    upstream: Path | None = None,
    upstream_id: str = "",
) -> Path:
    """The cached fixture for this wheel (and the release's tests, if given), built on first use."""
    digest = source_digest(vllm_src, record, upstream_id if upstream is not None else "")
    return build_fixture_repo(
        vllm_src, version, fixture_repo_path(package, version, digest), upstream
    )


def build_fixture_repo(
    vllm_src: Path, version: str, dest: Path, upstream: Path | None = None
) -> Path:
    """Build (or reuse) the fixture repository of `vllm_src` at `dest`; return `dest`.

    The build happens in a sibling temp folder renamed onto `dest` at the end,
    under a file lock, so a crash leaves no half-built repository behind and
    two processes never build the same fixture at once.
    """
    dest = Path(dest).absolute()
    if _is_complete(dest, version):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    lock_path = dest.parent / f".{dest.name}.lock"
    try:
        with own_lock(lock_path, timeout=LOCK_TIMEOUT_S):
            if _is_complete(dest, version):
                return dest
            _remove_untrusted(dest)
            _remove_stale_builds(dest)
            tmp = dest.parent / f".{dest.name}{_BUILDING}{os.getpid()}-{secrets.token_hex(4)}"
            try:
                started = time.monotonic()
                commit, count = _build(Path(vllm_src), version, tmp, upstream)
                os.rename(tmp, dest)
                _log.info(
                    "fixture repository v%s (%s, %d files) built in %.1f s at %s",
                    version,
                    commit[:12],
                    count,
                    time.monotonic() - started,
                    dest,
                )
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
    except Timeout:
        raise RefError(
            f"another process has been building the fixture repository {dest} for over "
            f"{LOCK_TIMEOUT_S:.0f} s",
            f"wait for it to finish; if no difftest is running, delete the lock file {lock_path}",
        ) from None
    return dest


def fixture_commit(dest: Path) -> str | None:
    """The commit a finished fixture recorded, or None when `dest` is not a trusted fixture."""
    marker = _read_marker(Path(dest))
    return (
        marker.get("commit")
        if marker and _is_complete(Path(dest), marker.get("version", ""))
        else None
    )


def _read_marker(dest: Path) -> dict | None:
    try:
        data = json.loads((dest / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_complete(dest: Path, version: str) -> bool:
    """Trusted only if the marker exists, matches, and both refs point at its commit."""
    marker = _read_marker(dest)
    if not marker or marker.get("format") != FORMAT or marker.get("version") != version:
        return False
    g = git.Git(str(dest))
    env = isolated_env(str(dest))
    try:
        main = g.rev_parse("--verify", "refs/heads/main^{commit}", env=env)
        tag = g.rev_parse("--verify", f"refs/tags/v{version}^{{commit}}", env=env)
    except GitCommandError:
        return False
    return main == tag == marker.get("commit")


def _remove_untrusted(dest: Path) -> None:
    """Clear a `dest` left by an older or broken build; refuse to delete anything else."""
    if not dest.exists() and not dest.is_symlink():
        return
    ours = (
        dest.is_dir()
        and not dest.is_symlink()
        and (
            not any(dest.iterdir())
            or (dest / MARKER).exists()
            or ((dest / "HEAD").is_file() and (dest / "objects").is_dir())
        )
    )
    if not ours:
        raise RefError(
            f"{dest} exists and is not a difftest fixture repository, so it is not replaced",
            "delete or move it, or build the fixture somewhere else",
        )
    _log.warning("rebuilding untrusted fixture repository %s", dest)
    shutil.rmtree(dest)


def _remove_stale_builds(dest: Path) -> None:
    """Temp folders of interrupted builds (we hold the lock, so none is in progress)."""
    for leftover in dest.parent.glob(f".{dest.name}{_BUILDING}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _build(
    vllm_src: Path, version: str, tmp: Path, upstream: Path | None = None
) -> tuple[str, int]:
    """Commit the sources (and the release's tests) into a new bare repository at `tmp`;
    return (commit, file count)."""
    files = fixture_files(vllm_src)
    if not files:
        raise RefError(
            f"{vllm_src} holds no source files",
            "pass the installed package folder, `<site-packages>/vllm`",
        )
    if upstream is not None:
        files = sorted(files + upstream_files(upstream), key=lambda item: os.fsencode(item[0]))
    tmp.mkdir()
    env = isolated_env(str(tmp))
    g = git.Git(str(tmp))
    work = tmp / "difftest-build"
    work.mkdir()
    try:
        g.init(
            "--bare",
            "--quiet",
            "--template=",
            "--initial-branch=main",
            "--object-format=sha1",
            env=env,
        )
        tag = f"refs/tags/v{version}"
        try:
            g.check_ref_format(tag, env=env)
        except GitCommandError:
            raise RefError(
                f"version {version!r} cannot name a git tag", "check base.requirement's version"
            ) from None

        # One hash-object and one update-index for all files; --no-filters and
        # explicit modes make the result independent of autocrlf, attributes and umask.
        listing = work / "paths"
        listing.write_bytes(b"".join(os.fsencode(full) + b"\n" for _, full in files))
        with listing.open("rb") as stream:
            shas = g.hash_object(
                "-w", "--no-filters", "--stdin-paths", istream=stream, env=env
            ).split()
        if len(shas) != len(files):
            raise RefError(
                f"git hashed {len(shas)} of {len(files)} files from {vllm_src}",
                "rerun; if it repeats, report it",
            )
        info = work / "index-info"
        info.write_bytes(
            b"".join(
                b"100644 blob %s\t%s\0" % (sha.encode(), os.fsencode(path))
                for sha, (path, _) in zip(shas, files, strict=True)
            )
        )
        index_env = {**env, "GIT_INDEX_FILE": str(work / "index")}
        with info.open("rb") as stream:
            g.update_index("-z", "--index-info", istream=stream, env=index_env)
        tree = g.write_tree(env=index_env)
        message = (
            f"vLLM {version}: Python sources of the installed package\n\n"
            "Built by difftest from the installed wheel; compiled files (*.so, *.pyc) are left "
            "out.\n"
        )
        if upstream is not None:
            message += "tests/ and pyproject.toml come from the release's source distribution.\n"
        commit = g.commit_tree("--no-gpg-sign", "-m", message, tree, env=env)
        g.update_ref("refs/heads/main", commit, env=env)
        g.update_ref(tag, commit, env=env)
    except GitCommandError as exc:
        raise RefError(
            f"building the fixture repository from {vllm_src} failed: {git_message(exc)}",
            "check free disk space and that git (>= 2.31) is installed; then rerun",
        ) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    marker = {
        "format": FORMAT,
        "version": version,
        "commit": commit,
        "tag": f"v{version}",
        "files": len(files),
        "tests": upstream is not None,
    }
    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return commit, len(files)

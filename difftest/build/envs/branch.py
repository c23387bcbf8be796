"""Branch environments: the base's compiled vLLM with one branch's Python on top.

The offline equivalent of building a branch with `VLLM_USE_PRECOMPILED=1`: a
fresh interpreter (`bin/python`) whose `.pth` puts, in order,

1. `overlay/` — a hard-linked copy of the base's `vllm/` tree in which every
   file the branch changes (relative to the base release's commit) is replaced
   by the branch's version (unlinked first, so the base is never edited);
2. `probe/` — a copy of difftest's probe package, the only difftest code that
   runs inside a branch;
3. the base's site-packages (torch, transformers, xgrammar, ...).

A branch that changes native code (csrc/, cmake/, CMakeLists.txt, setup.py, a
compiled file or native source anywhere, any binary file) is refused: the
base's binaries would not match it, and a binary overlay is not Python. Each environment is built in
a temporary folder and renamed into place only when complete.
"""

from __future__ import annotations

import os
import py_compile
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from importlib.util import cache_from_source
from pathlib import Path
from typing import Any

import git

from difftest.build.envs.base import BaseEnv, Log
from difftest.build.envs.fingerprint import (
    canonical_hash,
    read_fingerprint,
    sha256_bytes,
    tree_digest,
    write_fingerprint,
)
from difftest.build.envs.integrity import check_manifest, make_manifest
from difftest.build.envs.locks import env_lock
from difftest.build.envs.uvtool import run_uv
from difftest.build.refs import (
    ResolvedBranch,
    binary_paths,
    changed_files,
    native_changes,
    read_blob,
    special_paths,
)
from difftest.core import paths, tally
from difftest.core.errors import EnvironmentBuildError, NativeCodeChanged

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
PTH_NAME = "difftest_overlay.pth"
#: The repository folder a branch environment overlays on the base: nothing else of a branch reaches
#: a probe.
OVERLAID = "vllm/"


def overlaid(path: str) -> bool:
    """Whether a branch environment carries a change to `path` (repository-relative)."""
    return path.startswith(OVERLAID)


@dataclass(frozen=True)
class BranchEnv:
    name: str
    path: Path
    python: Path
    fingerprint: dict[str, Any]

    @property
    def sha(self) -> str:
        return self.fingerprint["sha"]


def probe_digest() -> str:
    """Changes when the probe code changes, so environments carry the current probe."""
    return sha256_bytes(
        (
            tree_digest(PACKAGE_ROOT / "probe")
            + sha256_bytes((PACKAGE_ROOT / "__init__.py").read_bytes())
        ).encode()
    )


def branch_key(base: BaseEnv, sha: str) -> str:
    return sha256_bytes(f"{base.key}:{sha}:{probe_digest()}".encode())[:12]


def ensure_branch_env(
    base: BaseEnv,
    repo: git.Repo,
    branch: ResolvedBranch,
    base_ref: str,
    log: Log = lambda _msg: None,
) -> BranchEnv:
    """Reuse the environment of this (branch SHA, base, probe) if it still holds what was built
    (`integrity.py`), or build it. The environment's lock is held throughout, so a concurrent
    build waits and `envs --prune` skips it."""
    key = branch_key(base, branch.sha)
    final = env_folder(branch.sha, key)
    with env_lock(final.name):
        fingerprint = reusable(final, key, base, branch.name, log)
        if fingerprint is not None:
            return BranchEnv(
                branch.name, final, final / "bin" / "python", _named(fingerprint, branch)
            )
        return _build(base, repo, branch, base_ref, key, final, log)


def env_folder(sha: str, key: str) -> Path:
    """Where the environment of this commit and key lives in this machine's cache."""
    return paths.envs_dir() / f"branch-{sha[:12]}-{key}"


def reusable(final: Path, key: str, base: BaseEnv, name: str, log: Log) -> dict[str, Any] | None:
    """The fingerprint of the finished environment at `final` if it has this key and still holds
    what its manifest says; otherwise None, and whatever is there is removed (the caller holds the
    environment's lock)."""
    fingerprint = read_fingerprint(final)
    if fingerprint and fingerprint.get("key") == key and (final / "bin" / "python").exists():
        problem = check_manifest(final, fingerprint.get("manifest"), base.vllm_dir)
        if problem is None:
            return fingerprint
        log(f"{name}: environment {final.name} is corrupt ({problem}): rebuilding it")
    if final.exists():
        shutil.rmtree(final, ignore_errors=True)
    return None


@dataclass(frozen=True)
class OverlayChange:
    """One file the branch changes relative to the base release: its status (A, M or D), its
    repository path, and its new content (None when deleted)."""

    status: str
    path: str
    content: bytes | None


def _build(
    base: BaseEnv,
    repo: git.Repo,
    branch: ResolvedBranch,
    base_ref: str,
    key: str,
    final: Path,
    log: Log,
) -> BranchEnv:
    tally.count("branch-build", branch=branch.name)
    base_sha = repo.commit(base_ref).hexsha
    changes = changed_files(repo, base_sha, branch.sha)
    binary = binary_paths(repo, base_sha, branch.sha)
    native = native_changes(changes, binary)
    if native:
        code = native_changes(changes)
        parts = [f"native code ({_listed(code)})"] if code else []
        data = [path for path in native if path not in code]
        parts += [f"binary files ({_listed(data)})"] if data else []
        raise NativeCodeChanged(
            f"branch {branch.name!r} ({branch.sha[:12]}) changes what a Python overlay cannot "
            f"reproduce, relative to {base_ref}: {' and '.join(parts)}",
            "compare branches whose compiled code matches the base release (a pull request on a "
            "later main: `transplant: true` replays only its own commits), or point "
            "`base.requirement` at a wheel built from that code (GPU: the per-commit wheel of its "
            "merge-base)",
        )
    special = {
        p: what for p, what in special_paths(repo, base_sha, branch.sha).items() if overlaid(p)
    }
    if special:
        shown = ", ".join(f"{path} ({what})" for path, what in list(special.items())[:4])
        raise EnvironmentBuildError(
            f"branch {branch.name!r} ({branch.sha[:12]}) makes paths under vllm/ something other "
            f"than a regular file: {shown}",
            "a branch environment overlays the branch's regular files on the base: commit the "
            "files themselves instead of a link",
        )
    python_changes = [
        OverlayChange(
            c.status, c.path, None if c.status == "D" else read_blob(repo, branch.sha, c.path)
        )
        for c in changes
        if overlaid(c.path)
    ]
    described = {
        "kind": "branch",
        "key": key,
        "name": branch.name,
        "ref": branch.ref,
        "ref_sha": branch.ref_sha,
        "sha": branch.sha,
        "patches": {p.path.name: p.sha256 for p in branch.patches},
        "base_ref": base_ref,
        "base_ref_sha": base_sha,
    }
    built = build_overlay(base, described, python_changes, final, log)
    return BranchEnv(branch.name, built.path, built.python, _named(built.fingerprint, branch))


#: The base's fingerprint keys a branch environment records (what it was overlaid on).
BASE_KEYS = (
    "key",
    "requirement",
    "python",
    "platform",
    "torch",
    "vllm_version",
    "wheel_hash",
    "lock_hash",
)


def build_overlay(
    base: BaseEnv,
    described: dict[str, Any],
    changes: list[OverlayChange],
    final: Path,
    log: Log,
) -> BranchEnv:
    """Build the environment `described` (kind, key, name, ref, commits, patches) at `final`:
    the base's `vllm/` linked, `changes` written over it, the probe, the `.pth`, the fingerprint
    with its manifest last. `prepare` calls it with changes read from git; a cluster node with the
    changes its host shipped (`envs.shipped`). The caller holds the environment's lock."""
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        run_uv(
            ["venv", "--quiet", "--python", str(base.python), str(tmp)],
            what="create a branch virtualenv",
        )
        _link_tree(base.vllm_dir, tmp / "overlay" / "vllm")
        for change in changes:
            _apply_change(change, tmp / "overlay")
        _copy_probe(tmp / "probe")
        site = _site_packages(tmp)
        (site / PTH_NAME).write_text(
            "../../../overlay\n../../../probe\n"
            f"import site; site.addsitedir({str(base.site_packages)!r})\n"
        )
        fingerprint = {
            **described,
            "changed_files": [f"{c.status} {c.path}" for c in changes],
            "probe_digest": probe_digest(),
            "base_path": str(base.path),
            "base": {k: base.fingerprint.get(k) for k in BASE_KEYS},
            "build_s": round(time.monotonic() - started, 2),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        _check_overlay(tmp)
        fingerprint["manifest"] = make_manifest(tmp, base.vllm_dir, site / PTH_NAME)
        fingerprint["fingerprint_hash"] = canonical_hash(fingerprint)
        write_fingerprint(tmp, fingerprint)
        try:
            os.rename(tmp, final)
        except OSError:
            # A difftest without the environment lock finished the same environment first.
            if read_fingerprint(final) is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(
        f"{described['name']}: environment {final.name} built in {fingerprint['build_s']} s "
        f"({len(changes)} changed file(s))"
    )
    return BranchEnv(
        described["name"], final, final / "bin" / "python", read_fingerprint(final) or fingerprint
    )


def _listed(paths: list[str], most: int = 6) -> str:
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _named(fingerprint: dict[str, Any], branch: ResolvedBranch) -> dict[str, Any]:
    """The same SHA may be listed under several names; the fingerprint carries this one's."""
    return {**fingerprint, "name": branch.name, "ref": branch.ref}


def _link_tree(src: Path, dest: Path) -> None:
    """Hard-link every file (compiled `.so` and `.pyc` included); copy if links are impossible."""
    for dirpath, _dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            source, target = Path(dirpath, name), dest / rel / name
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)


def _apply_change(change: OverlayChange, overlay: Path) -> None:
    """Replace one file of the linked tree; never write through a hard link."""
    target = overlay / change.path
    stale_pyc = Path(cache_from_source(str(target)))
    for path in (target, stale_pyc):
        if path.exists() or path.is_symlink():
            path.unlink()
    if change.content is None:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(change.content)
    if target.suffix == ".py":
        try:
            py_compile.compile(str(target), doraise=True)
        except py_compile.PyCompileError:
            # A syntax error is the branch's own: it shows up as an import error when probed.
            pass


def _copy_probe(dest: Path) -> None:
    package = dest / "difftest"
    shutil.copytree(
        PACKAGE_ROOT / "probe", package / "probe", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy2(PACKAGE_ROOT / "__init__.py", package / "__init__.py")
    for path in package.rglob("*.py"):
        py_compile.compile(str(path), doraise=True)


def _site_packages(env: Path) -> Path:
    (site,) = env.glob("lib/python3*/site-packages")
    return site


def _check_overlay(env: Path) -> None:
    """Ask the new interpreter where `vllm` comes from (cheap: nothing is imported)."""
    code = (
        "import importlib.util as u; print(u.find_spec('vllm').origin); "
        "print(u.find_spec('difftest.probe').origin)"
    )
    out = subprocess.run(
        [str(env / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True
    )
    origins = out.stdout.split()
    if out.returncode != 0 or len(origins) != 2 or not origins[0].startswith(str(env / "overlay")):
        raise EnvironmentBuildError(
            f"the branch interpreter does not see the overlay first: {out.stdout or out.stderr}",
            "remove the environment folder (`difftest envs --prune`) and retry; report it if it "
            "persists",
        )

"""What is in the environment cache, what it costs, and what is stale.

Sizes count a file once however many hard links share it, and a branch
environment's own size counts only files it does not share with the base: that
is the real cost of one more branch.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import Timeout

from difftest.build.envs.base import BUILT_BY_AN_OLDER_DIFFTEST, base_folder_problem
from difftest.build.envs.branch import probe_digest
from difftest.build.envs.fingerprint import read_fingerprint
from difftest.build.envs.integrity import check_manifest
from difftest.build.envs.locks import env_lock, owner_name
from difftest.core import paths


@dataclass(frozen=True)
class CachedEnv:
    path: Path
    kind: str  # "base", "branch" or "unfinished"
    fingerprint: dict[str, Any] | None
    own_bytes: int
    stale_reason: str | None

    @property
    def label(self) -> str:
        fp = self.fingerprint or {}
        if self.kind == "base":
            return f"{fp.get('requirement')} (Python {fp.get('python')})"
        if self.kind == "branch":
            return f"{fp.get('name')} @ {str(fp.get('sha', ''))[:12]}"
        return "unfinished build"


def own_bytes(root: Path, shared_ok: bool) -> int:
    """Bytes on disk under `root`; with `shared_ok=False` only files with a single link."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen or (not shared_ok and st.st_nlink > 1):
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def list_envs(with_sizes: bool = True, only: Collection[Path] | None = None) -> list[CachedEnv]:
    """Every cached environment, or those of `only` (what a build just made or reused: checking
    and sizing the whole cache grows with every environment it holds)."""
    root = paths.envs_dir()
    current_probe = probe_digest()
    found = []
    wanted = None if only is None else {p.resolve() for p in only}
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        if wanted is not None and path.resolve() not in wanted:
            continue
        fp = read_fingerprint(path)
        kind = fp.get("kind", "unfinished") if fp else "unfinished"
        stale = None
        if fp is None:
            stale = "unfinished or interrupted build"
        elif kind == "branch" and not _base_alive(fp):
            stale = "its base environment is gone"
        elif kind == "branch" and fp.get("probe_digest") != current_probe:
            stale = "built with an older probe"
        elif kind == "branch" and not fp.get("manifest"):
            stale = "built by an older difftest (no manifest of its files)"
        elif kind == "branch":
            problem = check_manifest(path, fp.get("manifest"), _base_vllm(fp))
            stale = f"corrupt: {problem}" if problem else None
        elif kind == "base":
            problem = base_folder_problem(path, fp)
            corrupt = problem is not None and problem != BUILT_BY_AN_OLDER_DIFFTEST
            stale = f"corrupt: {problem}" if corrupt else problem
        size = own_bytes(path, shared_ok=(kind != "branch")) if with_sizes else 0
        found.append(CachedEnv(path, kind, fp, size, stale))
    return found


def _base_alive(branch_fp: dict[str, Any]) -> bool:
    """A branch environment is only as good as the base its `.pth` points at."""
    base_fp = read_fingerprint(Path(branch_fp.get("base_path", "/nonexistent")))
    if not base_fp:
        return False
    return bool(base_fp.get("key") == branch_fp.get("base", {}).get("key"))


def _base_vllm(branch_fp: dict[str, Any]) -> Path:
    base = Path(branch_fp.get("base_path", "/nonexistent"))
    found = sorted(base.glob("lib/python3*/site-packages"))
    return (found[0] if found else base) / "vllm"


def prune(everything: bool = False) -> tuple[list[CachedEnv], list[CachedEnv]]:
    """Remove stale environments (or all of them): (removed, skipped because another process
    holds the environment's lock - it is being built or checked right now)."""
    removed, skipped = [], []
    for env in list_envs(with_sizes=False):
        if not (everything or env.stale_reason):
            continue
        lock = env_lock(owner_name(env.path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            skipped.append(env)
            continue
        try:
            shutil.rmtree(env.path, ignore_errors=True)
        finally:
            lock.release()
        removed.append(env)
    return removed, skipped

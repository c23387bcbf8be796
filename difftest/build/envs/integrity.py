"""Is a cached branch environment still what was built? Checked on every reuse, cheaply.

A branch environment is the base's `vllm/` hard-linked into `overlay/`, the
branch's own files written over it, the probe package, and a `.pth` that puts
them first. Its fingerprint names what it was built from; this manifest says
what it holds, so a file replaced, added or deleted afterwards (by hand, by a
disk problem, by branch code that wrote into its own environment) is noticed
before the environment is trusted with another run:

- the environment's own files (the branch's changed files and their bytecode,
  the probe copy, the `.pth`) by sha256 - a handful of small files;
- every other overlay file by `stat` only: still the base's file (same inode
  when hard-linked, same size and mtime when copied), none missing, none added.

Nothing of the base's ~2.5 GB is read, so a check costs tens of milliseconds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from difftest.build.envs.fingerprint import sha256_file

OVERLAY = "overlay"
PROBE = "probe"
#: Bump when the manifest's shape changes: an environment with another version is rebuilt.
MANIFEST_VERSION = 1


def make_manifest(env: Path, base_vllm: Path, pth: Path) -> dict[str, Any]:
    """What `env` holds now (called last when building): its own files by hash, the links by count."""
    own: dict[str, str] = {}
    copies = 0
    overlay = env / OVERLAY
    seen = set()
    for rel, path in _files(overlay):
        seen.add(rel)
        base_file = base_vllm.parent / rel
        if _same_file(path, base_file, links_only=True):
            continue
        if _same_file(path, base_file, links_only=False):
            copies += 1  # the cache's filesystem could not hard-link this file
        else:
            own[f"{OVERLAY}/{rel}"] = sha256_file(path)
    for rel, path in _files(env / PROBE):
        own[f"{PROBE}/{rel}"] = sha256_file(path)
    own[str(pth.relative_to(env))] = sha256_file(pth)
    removed = sorted(rel for rel, _ in _files(base_vllm.parent, only="vllm") if rel not in seen)
    return {"version": MANIFEST_VERSION, "own": own, "links_only": copies == 0, "removed": removed}


def check_manifest(env: Path, manifest: dict[str, Any] | None, base_vllm: Path) -> str | None:
    """None if `env` holds exactly what its manifest says; otherwise the first problem, in words."""
    if not manifest or manifest.get("version") != MANIFEST_VERSION:
        return "it has no manifest of its files (built by an older difftest)"
    own: dict[str, str] = manifest["own"]
    for rel, digest in own.items():
        path = env / rel
        if not path.is_file():
            return f"{rel} is missing"
        if sha256_file(path) != digest:
            return f"{rel} was changed after the environment was built"
    removed = set(manifest["removed"])
    overlay = env / OVERLAY
    seen = set()
    for rel, path in _files(overlay):
        seen.add(rel)
        if f"{OVERLAY}/{rel}" in own:
            continue
        if not _same_file(path, base_vllm.parent / rel, links_only=manifest["links_only"]):
            return f"{OVERLAY}/{rel} is not the base's file (replaced or added after the build)"
    for rel, _ in _files(base_vllm.parent, only="vllm"):
        if rel not in seen and rel not in removed:
            return f"{OVERLAY}/{rel} is missing"
    for rel, _ in _files(env / PROBE):
        if f"{PROBE}/{rel}" not in own:
            return f"{PROBE}/{rel} was added after the environment was built"
    return None


def _files(root: Path, only: str | None = None) -> list[tuple[str, Path]]:
    """(path relative to `root`, path) of every file below `root` (below `root/only` if given)."""
    start = root / only if only else root
    found = []
    for folder, _dirs, names in os.walk(start):
        for name in names:
            path = Path(folder, name)
            found.append((path.relative_to(root).as_posix(), path))
    return found


def _same_file(path: Path, base_file: Path, links_only: bool) -> bool:
    """The overlay's file is the base's: one inode (a hard link), or, where the build had to copy,
    a copy with equal size and mtime."""
    try:
        mine, theirs = path.lstat(), base_file.lstat()
    except OSError:
        return False
    if (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino):
        return True
    return not links_only and (mine.st_size, mine.st_mtime_ns) == (theirs.st_size, theirs.st_mtime_ns)

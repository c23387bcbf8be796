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
    """What `env` holds now (called last when building): its own files by hash, the links by
    count."""
    own: dict[str, str] = {}
    base = files_below(base_vllm.parent, "vllm")
    copies = 0
    overlay = files_below(env / OVERLAY)
    for rel, (inode, path) in overlay.items():
        if rel in base and base[rel][0] == inode:
            continue
        if rel in base and _same_copy(path, base[rel][1]):
            copies += 1  # the cache's filesystem could not hard-link this file
        else:
            own[f"{OVERLAY}/{rel}"] = sha256_file(Path(path))
    for rel, (_inode, path) in files_below(env / PROBE).items():
        own[f"{PROBE}/{rel}"] = sha256_file(Path(path))
    own[str(pth.relative_to(env))] = sha256_file(pth)
    removed = sorted(rel for rel in base if rel not in overlay)
    return {"version": MANIFEST_VERSION, "own": own, "links_only": copies == 0, "removed": removed}


def check_manifest(env: Path, manifest: dict[str, Any] | None, base_vllm: Path) -> str | None:
    """None if `env` holds exactly what its manifest says; otherwise the first problem, in words."""
    if not manifest or manifest.get("version") != MANIFEST_VERSION:
        return "it has no manifest of its files (built by an older difftest)"
    own: dict[str, str] = manifest["own"]
    for rel, digest in own.items():
        own_file = env / rel
        if not own_file.is_file():
            return f"{rel} is missing"
        if sha256_file(own_file) != digest:
            return f"{rel} was changed after the environment was built"
    base = files_below(base_vllm.parent, "vllm")
    overlay = files_below(env / OVERLAY)
    for rel, (inode, path) in overlay.items():
        if f"{OVERLAY}/{rel}" in own:
            continue
        linked = rel in base and base[rel][0] == inode
        if not linked and not (
            rel in base and not manifest["links_only"] and _same_copy(path, base[rel][1])
        ):
            return f"{OVERLAY}/{rel} is not the base's file (replaced or added after the build)"
    removed = set(manifest["removed"])
    for rel in base:
        if rel not in overlay and rel not in removed:
            return f"{OVERLAY}/{rel} is missing"
    for rel in files_below(env / PROBE):
        if f"{PROBE}/{rel}" not in own:
            return f"{PROBE}/{rel} was added after the environment was built"
    return None


def files_below(root: Path, only: str = "") -> dict[str, tuple[int, str]]:
    """{path relative to `root`: (inode, absolute path)} of every file below `root` (or
    `root/only`).

    `os.scandir` reads the inode with the directory entry, so comparing thousands of files with the
    base's costs no `stat` call at all (where pathlib and `os.lstat` cost ten times more).
    """
    found: dict[str, tuple[int, str]] = {}
    pending = [(os.path.join(str(root), only) if only else str(root), f"{only}/" if only else "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append((entry.path, f"{prefix}{entry.name}/"))
            else:
                found[prefix + entry.name] = (entry.inode(), entry.path)
    return found


def _same_copy(path: str, base_file: str) -> bool:
    """Where the build had to copy instead of hard-linking: a copy with the base file's size and
    mtime."""
    try:
        mine, theirs = os.lstat(path), os.lstat(base_file)
    except OSError:
        return False
    return (mine.st_size, mine.st_mtime_ns) == (theirs.st_size, theirs.st_mtime_ns)

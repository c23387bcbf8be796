"""Fingerprints: what an environment was built from, and a stable hash of it.

A cached environment is reused only when its recorded fingerprint matches what
would be built now; the same dict goes into every evidence file so a reviewer
can tell whether their environment is the one that produced a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

FINGERPRINT_FILE = "fingerprint.json"
VOLATILE_KEYS = ("created_at", "build_s", "path", "base_path")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_hash(data: dict[str, Any]) -> str:
    """Hash of a fingerprint without its volatile keys (build time, path)."""
    stable = {k: v for k, v in data.items() if k not in VOLATILE_KEYS}
    return sha256_bytes(json.dumps(stable, sort_keys=True).encode())


def platform_tag() -> str:
    return f"{sys.platform}-{platform.machine()}"


def tree_digest(root: Path, suffixes: tuple[str, ...] = (".py",)) -> str:
    """Digest of the files below `root` with the given suffixes (paths and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in suffixes):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def read_fingerprint(env_dir: Path) -> dict[str, Any] | None:
    """The recorded fingerprint, or None if the folder is not a finished build."""
    try:
        return json.loads((env_dir / FINGERPRINT_FILE).read_text())
    except (OSError, ValueError):
        return None


def write_fingerprint(env_dir: Path, data: dict[str, Any]) -> None:
    """Written last and atomically: its presence is what marks a build as complete."""
    tmp = env_dir / f".{FINGERPRINT_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, env_dir / FINGERPRINT_FILE)

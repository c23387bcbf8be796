"""The identity of a base given as a wheel file: its content, not where it lies.

A requirement string with an absolute path would make the same wheel in two
folders two bases, and a wheel replaced in place the same base; so a `file://`
wheel is named in the base key by its file name and sha256 (hashed once per
process per file state). Pins and URLs name themselves.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from packaging.requirements import Requirement

from difftest.build.envs.fingerprint import sha256_file
from difftest.core.wheel import parse_wheel_requirement


def requirement_identity(requirement: str) -> str:
    """`name==version` or a URL as written; `name @ <file name> sha256:<hex>` for a wheel file."""
    req = Requirement(requirement)
    if not req.url:
        return requirement
    ref = parse_wheel_requirement(req)
    if ref.path is None:
        return requirement
    stat = ref.path.stat()
    return f"{ref.name} @ {ref.filename} sha256:{_hash(ref.path, stat.st_mtime_ns, stat.st_size)}"


@lru_cache(maxsize=8)
def _hash(path: Path, _mtime_ns: int, _size: int) -> str:
    return sha256_file(path)

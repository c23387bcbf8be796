"""The base release's own tests, taken from its source distribution: fetched once, checked, cached.

vLLM's wheels carry no tests; its sdist does. The fixture repository (built from
the installed wheel) gets the release's `tests/` and `pyproject.toml` from it,
so that patch series can add or change tests as real pull requests do.

The file comes from the package indexes pip is configured with, read at run
time (PEP 691 JSON or PEP 503 HTML pages, local `file://` mirrors included).
`pip download --no-binary` cannot be used: it builds the sdist's metadata, which
fails for vLLM without its build toolchain. Only releases pinned here are
fetched, and the bytes must match the pinned sha256; a file put by hand at the
cache path is accepted on the same terms (for machines without the network).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from difftest.build.envs.fingerprint import sha256_file
from difftest.build.envs.sources import pip_index_urls
from difftest.build.tests.folders import build_once
from difftest.core import paths
from difftest.core.errors import EnvironmentBuildError

PROJECT = "vllm"
#: vLLM release -> (sdist file name, sha256 of its bytes). Only these are fetched.
PINNED_SDISTS: dict[str, tuple[str, str]] = {
    "0.32.0": (
        "vllm-0.32.0.tar.gz",
        "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad",
    ),
}
#: What is taken from the sdist: the test tree and pytest's configuration, nothing that imports as
#: `vllm`.
TAKEN = ("tests", "pyproject.toml")
#: Written last into an extracted folder: its presence marks the extraction complete.
DONE = ".difftest-extracted"
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
_TIMEOUT_S = 120


@dataclass(frozen=True)
class UpstreamTests:
    """A folder holding one release's `tests/` and `pyproject.toml`, and where they came from."""

    folder: Path
    version: str
    sdist: str
    sha256: str


def upstream_tests(version: str) -> UpstreamTests | None:
    """The release's tests, extracted from its pinned sdist (fetched on first use); None when no
    sdist is pinned for `version` (the fixture then has no tests, and the tests tier says so)."""
    pin = PINNED_SDISTS.get(version)
    if pin is None:
        return None
    filename, sha256 = pin
    dest = paths.sources_dir() / f"{filename.removesuffix('.tar.gz')}-tests-{sha256[:12]}"
    build_once(dest, DONE, lambda tmp: _extract(fetch_sdist(filename, sha256), tmp))
    return UpstreamTests(dest, version, filename, sha256)


def fetch_sdist(filename: str, sha256: str) -> Path:
    """The sdist in the cache, downloaded if missing or damaged; its sha256 is always checked."""
    target = paths.sources_dir() / filename
    if target.is_file() and sha256_file(target) == sha256:
        return target
    problems: list[str] = []
    urls = pip_index_urls()
    for index in urls:
        try:
            url, published = _find_file(index, filename)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            problems.append(f"{_shown(index)}: {exc}")
            continue
        if published and published != sha256:
            problems.append(
                f"{_shown(index)} publishes sha256 {published[:12]}..., not the pinned "
                f"{sha256[:12]}..."
            )
            continue
        try:
            _download(url, target, sha256)
            return target
        except (OSError, ValueError, urllib.error.URLError) as exc:
            problems.append(f"{_shown(index)}: {exc}")
    raise EnvironmentBuildError(
        f"cannot fetch {filename} (the tests of vLLM's release) from the package indexes pip is "
        f"configured with ({', '.join(_shown(u) for u in urls) or 'none'}):\n  "
        + "\n  ".join(problems or ["no index configured"]),
        f"check the network or pip's index settings, or download {filename} yourself and put it at "
        f"{target} (sha256 {sha256})",
    )


def _find_file(index: str, filename: str) -> tuple[str, str | None]:
    """(download URL, published sha256 or None) of `filename` on the index's project page."""
    page_url = index.rstrip("/") + f"/{PROJECT}/"
    body, content_type, final_url = _read(page_url)
    if "json" in content_type:
        for entry in json.loads(body).get("files", []):
            if entry.get("filename") == filename:
                return urllib.parse.urljoin(final_url, entry["url"]), (
                    entry.get("hashes") or {}
                ).get("sha256")
    else:
        for href, text in _anchors(body.decode("utf-8", errors="replace")):
            url, _, fragment = urllib.parse.urljoin(final_url, href).partition("#")
            name = urllib.parse.unquote(url.rsplit("/", 1)[-1])
            if filename in (name, text.strip()):
                published = (
                    fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
                )
                return url, published
    raise ValueError(f"{filename} is not listed on its {PROJECT} page")


def _read(url: str) -> tuple[bytes, str, str]:
    """Body, content type and final URL of an index page; a `file://` folder serves its
    index.html."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = Path(urllib.request.url2pathname(parsed.path))
        page = path / "index.html" if path.is_dir() else path
        return page.read_bytes(), "text/html", page.as_uri()
    request = urllib.request.Request(url, headers={"Accept": _ACCEPT})
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
        return response.read(), response.headers.get("Content-Type", ""), response.geturl()


def _download(url: str, target: Path, sha256: str) -> None:
    """Stream to a temporary file next to `target`, check the hash, then rename into place."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, open(tmp, "wb") as out:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != sha256:
            raise ValueError(
                f"downloaded bytes have sha256 {digest.hexdigest()[:12]}..., not the pinned "
                f"{sha256[:12]}..."
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _extract(tarball: Path, dest: Path) -> None:
    """`tests/` and `pyproject.toml` of the sdist's top folder into `dest`, regular files only."""
    with tarfile.open(tarball, "r:gz") as archive:
        for member in archive:
            _top, _, rel = member.name.partition("/")
            if not rel or not member.isfile() or rel.split("/", 1)[0] not in TAKEN:
                continue
            if rel.startswith("/") or ".." in rel.split("/"):
                raise EnvironmentBuildError(
                    f"{tarball.name}: unsafe member {member.name!r}", "delete the file and retry"
                )
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None
            out.write_bytes(source.read())
    if not (dest / "tests").is_dir():
        raise EnvironmentBuildError(
            f"{tarball.name} holds no tests/ folder", "check the pinned sdist"
        )
    (dest / DONE).write_text(tarball.name + "\n")


def _shown(url: str) -> str:
    """An index URL without credentials, for messages."""
    parsed = urllib.parse.urlparse(url)
    return parsed._replace(netloc=parsed.hostname or "").geturl() if parsed.password else url


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.found.append((self._href, "".join(self._text)))
            self._href = None


def _anchors(html: str) -> list[tuple[str, str]]:
    parser = _Anchors()
    parser.feed(html)
    return parser.found

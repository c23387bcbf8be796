"""The base environment: the compiled vLLM release that every branch overlays.

Built once per base key (requirement, Python, platform, exclusions) with uv into
difftest's cache, bytecode precompiled (importing vLLM without `.pyc` files
takes more than twice as long), with the packages that are broken or unused on
CPU left out, and a lock of what was installed. A folder without a finished
fingerprint is never trusted: it is removed and rebuilt.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from difftest.build.envs.contents import changed_contents, has_contents, record_contents
from difftest.build.envs.fingerprint import (
    platform_tag,
    read_fingerprint,
    sha256_bytes,
    write_fingerprint,
)
from difftest.build.envs.identity import IDENTITY_VERSION, find_record, wheel_identity
from difftest.build.envs.locks import env_lock
from difftest.build.envs.sources import wheel_source_args
from difftest.build.envs.uvtool import run_uv
from difftest.build.envs.wheel_base import requirement_identity
from difftest.core import paths, tally
from difftest.core.config import BaseSpec
from difftest.core.errors import EnvironmentBuildError

Log = Callable[[str], None]

_INSPECT = r"""
import json, sys, sysconfig
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
dist = metadata.distribution(sys.argv[1])
record = next((f for f in dist.files or [] if f.name == "RECORD"), None)
print(json.dumps({
    "python": sys.version.split()[0],
    "site_packages": sysconfig.get_paths()["purelib"],
    "torch": version("torch"),
    "vllm_version": dist.version,
    "record": str(dist.locate_file(record)) if record else None,
    "excluded_present": [n for n in sys.argv[2:] if version(n)],
}))
"""


@dataclass(frozen=True)
class BaseEnv:
    path: Path
    python: Path
    site_packages: Path
    fingerprint: dict[str, Any]

    @property
    def key(self) -> str:
        return self.fingerprint["key"]

    @property
    def vllm_dir(self) -> Path:
        return self.site_packages / "vllm"


def resolve_interpreter(spec: BaseSpec) -> tuple[str, str]:
    """(interpreter path, exact version) the base will be built with."""
    if spec.python is None:
        exe = getattr(sys, "_base_executable", None) or sys.executable
        return exe, ".".join(map(str, sys.version_info[:3]))
    found = run_uv(["python", "find", spec.python], what=f"find Python {spec.python}").strip()
    out = subprocess.run(
        [found, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True
    )
    return found, out.stdout.strip()


def base_key(spec: BaseSpec, python_version: str) -> str:
    """What makes two bases interchangeable; names the folder."""
    ident = {
        "requirement": requirement_identity(spec.requirement),
        "python": python_version,
        "platform": platform_tag(),
        "exclude": sorted(spec.exclude),
    }
    return sha256_bytes(json.dumps(ident, sort_keys=True).encode())[:16]


def ensure_base(
    spec: BaseSpec, log: Log = lambda _msg: None, constraints: str | None = None
) -> BaseEnv:
    """Reuse the base for this spec if a finished one exists; otherwise build it (`constraints`: a
    lock to install exactly, as a cluster node builds its host's base: `envs.shipped`)."""
    interpreter, version = resolve_interpreter(spec)
    key = base_key(spec, version)
    path = paths.envs_dir() / f"base-{key}"
    with env_lock(path.name):
        found = _trusted(path, key, spec.package)
        problem = None if found is None else base_problem(found)
        if found is not None and problem is None:
            return found
        if problem is not None:
            log(f"base {path.name} cannot be trusted ({problem}): rebuilding it")
            shutil.rmtree(path)
        elif path.exists():
            log(f"removing unfinished base build {path.name}")
            shutil.rmtree(path)
        log(
            f"building base {spec.requirement} (Python {version}) in {path.name}: a few minutes, "
            "once"
        )
        return _build(spec, interpreter, key, path, log, constraints)


def _trusted(path: Path, key: str, package: str) -> BaseEnv | None:
    """The finished base at `path`, its files found under `path` itself (a copied or moved cache
    works), identified by its wheel (`identity.py`); None if it is not a finished base."""
    fingerprint = read_fingerprint(path)
    if not fingerprint or fingerprint.get("key") != key or fingerprint.get("kind") != "base":
        return None
    python = path / "bin" / "python"
    site = _site_packages(path)
    if not python.exists() or site is None:
        return None
    fingerprint = {**fingerprint, "site_packages": str(site)}
    if fingerprint.get("identity") != IDENTITY_VERSION:
        record = find_record(site, package)
        if record is None:
            return None
        fingerprint.update(wheel_hash=wheel_identity(record), identity=IDENTITY_VERSION)
    return BaseEnv(path=path, python=python, site_packages=site, fingerprint=fingerprint)


#: Why a base from before contents were recorded is rebuilt (stale, not corrupt).
BUILT_BY_AN_OLDER_DIFFTEST = (
    "built by an older difftest, which linked it to uv's cache and kept no record of it"
)


def base_problem(base: BaseEnv) -> str | None:
    """Why the finished `base` can no longer be trusted, or None (`base_folder_problem`)."""
    return base_folder_problem(base.path, base.fingerprint)


def base_folder_problem(path: Path, fingerprint: dict[str, Any]) -> str | None:
    """Why the base at `path` can no longer be trusted: its `vllm/` changed since it was built
    (by content: `contents.py`), or it was built by a difftest that neither recorded its contents
    nor copied its files out of uv's cache (where they share inodes with other environments)."""
    if not fingerprint.get("copied") or not has_contents(path):
        return BUILT_BY_AN_OLDER_DIFFTEST
    site = _site_packages(path)
    return changed_contents(path, (site or path) / "vllm")


def _site_packages(env: Path) -> Path | None:
    found = sorted(env.glob("lib/python3*/site-packages"))
    return found[0] if len(found) == 1 else None


def _build(
    spec: BaseSpec, interpreter: str, key: str, path: Path, log: Log, constraints: str | None
) -> BaseEnv:
    started = time.monotonic()
    tally.count("base-build")
    run_uv(
        ["venv", "--quiet", "--python", interpreter, str(path)], what="create the base virtualenv"
    )
    python = path / "bin" / "python"
    overrides = path / "difftest-overrides.txt"
    # An override with a never-true marker removes a package from the resolution entirely,
    # so the excluded packages are not even downloaded.
    overrides.write_text(
        "".join(f'{name} ; python_version < "0"\n' for name in sorted(spec.exclude))
    )
    pinned: list[str] = []
    if constraints is not None:
        (path / "difftest-constraints.txt").write_text(constraints)
        pinned = ["--constraint", str(path / "difftest-constraints.txt")]
    log(f"installing {spec.requirement} with uv")
    run_uv(
        [
            "pip",
            "install",
            "--python",
            str(python),
            "--compile-bytecode",
            # Its own copies, not hard links into uv's cache: no other environment uv builds, nor
            # another difftest home, shares an inode with what every branch runs.
            "--link-mode",
            "copy",
            "--override",
            str(overrides),
            *pinned,
        ]
        + wheel_source_args(spec.torch)
        + [spec.requirement],
        what=f"install {spec.requirement}",
        hint=(
            "check `base.requirement` and `base.torch` in branches.yaml (the torch wheel source), "
            "and the network"
        ),
    )
    lock = run_uv(["pip", "freeze", "--python", str(python)], what="record the base lock")
    (path / "lock.txt").write_text(lock)
    info = json.loads(
        subprocess.run(
            [str(python), "-I", "-c", _INSPECT, spec.package, *spec.exclude],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    if info["excluded_present"]:
        raise EnvironmentBuildError(
            f"excluded packages were installed anyway: {info['excluded_present']}",
            "remove them from `base.exclude` or report the dependency that pulls them in",
        )
    fingerprint = {
        "kind": "base",
        "key": key,
        "requirement": spec.requirement,
        "python": info["python"],
        "platform": platform_tag(),
        "torch": info["torch"],
        "vllm_version": info["vllm_version"],
        "wheel_hash": wheel_identity(Path(info["record"])) if info["record"] else None,
        "identity": IDENTITY_VERSION,
        "lock_hash": sha256_bytes(lock.encode()),
        #: Installed as copies (`--link-mode copy`), its `vllm/` contents recorded.
        "copied": True,
        "exclude": sorted(spec.exclude),
        "site_packages": info["site_packages"],
        "build_s": round(time.monotonic() - started, 1),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    record_contents(path, Path(info["site_packages"]) / "vllm")
    write_fingerprint(path, fingerprint)
    log(f"base ready in {fingerprint['build_s']} s")
    return BaseEnv(
        path=path, python=python, site_packages=Path(info["site_packages"]), fingerprint=fingerprint
    )

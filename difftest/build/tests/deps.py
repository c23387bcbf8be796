"""Test-only packages (pytest, pytest-xdist, tblib, ...): one folder per base, put on PYTHONPATH.

They are never installed into an environment: a branch environment's files are
hard links to the base, so installing into one would write into the base that
every branch shares. The requirements are resolved against the base's lock
(nothing the base has changes version), and the folder holds only what the
base lacks, so the base's own packages keep being the ones imported.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from difftest.build.envs.base import BaseEnv, Log
from difftest.build.envs.uvtool import run_uv
from difftest.build.tests.folders import build_once
from difftest.core import paths

DONE = ".difftest-deps.json"
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")


def suite_packages(base: BaseEnv, requirements: list[str], log: Log = lambda _m: None) -> Path:
    """The folder of test-only packages for `base` and `requirements`, built on first use."""
    lock = (base.path / "lock.txt").read_text()
    identity = json.dumps(
        {"base": base.key, "lock": lock, "requirements": sorted(requirements)}, sort_keys=True
    )
    dest = (
        paths.test_deps_dir() / f"{base.key}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"
    )

    def build(tmp: Path) -> None:
        log(f"installing test-only packages for the base: {', '.join(requirements)}")
        (tmp / "requirements.in").write_text("\n".join(requirements) + "\n")
        hint = "check `tests.requirements` in branches.yaml and the network"
        pinned = run_uv(
            [
                "pip",
                "compile",
                "--quiet",
                "--no-header",
                "--no-annotate",
                "--python",
                str(base.python),
                "-c",
                str(base.path / "lock.txt"),
                str(tmp / "requirements.in"),
            ],
            what="resolve the test-only packages against the base",
            hint=hint,
        )
        in_base = {_normalized(line) for line in lock.splitlines()} - {None}
        missing = [
            line.strip()
            for line in pinned.splitlines()
            if _normalized(line) not in in_base | {None}
        ]
        if missing:
            run_uv(
                [
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--compile-bytecode",
                    "--python",
                    str(base.python),
                    "--target",
                    str(tmp / "site"),
                    *missing,
                ],
                what="install the test-only packages",
                hint=hint,
            )
        (tmp / "site").mkdir(exist_ok=True)
        (tmp / "requirements.in").unlink()
        (tmp / DONE).write_text(
            json.dumps({"requirements": requirements, "installed": missing}, indent=1) + "\n"
        )

    return build_once(dest, DONE, build)


def site_dir(deps: Path) -> Path:
    """What goes on PYTHONPATH."""
    return deps / "site"


def _normalized(line: str) -> str | None:
    match = _NAME.match(line.strip())
    return re.sub(r"[-_.]+", "-", match[1]).lower() if match else None

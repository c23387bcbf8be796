"""The wheel ships the scenarios: a config anywhere (say, in a vLLM checkout for CI) finds them;
and no dependency may resolve to a version below its security fix."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
import zipfile
from itertools import chain
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from difftest.core.config import SHIPPED_SCENARIOS
from tests.factories import ROOT


def test_the_wheel_holds_every_shipped_scenario(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "uv",
            "build",
            "--wheel",
            "--quiet",
            "--out-dir",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("difftest-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        f"difftest/scenarios/{p.relative_to(SHIPPED_SCENARIOS).as_posix()}"
        for p in SHIPPED_SCENARIOS.rglob("*.yaml")
    }
    assert shipped and shipped <= names
    assert "difftest/scenarios/README.md" in names


def test_the_repository_s_scenarios_folder_is_the_package_s() -> None:
    """One source of truth: `scenarios/` at the root (used by the README) is the package's
    folder."""
    assert (ROOT / "scenarios").resolve() == SHIPPED_SCENARIOS


#: The lowest version each dependency may resolve to: the first without a published advisory that
#: concerns difftest (each named beside its floor in pyproject.toml).
ADVISORY_FLOORS = {
    "gitpython": "3.1.59",  # GHSA-wvpp-8hx9-p66j and others (3.1.58/59); CVE-2024-22190 (3.1.41)
    "jinja2": "3.1.6",  # CVE-2025-27516; CVE-2024-56201, CVE-2024-56326 (3.1.5)
    "filelock": "4.2.12",  # CVE-2026-144405; CVE-2025-68146 (3.20.1), CVE-2026-22701 (3.20.3)
    "uv": "0.11.15",  # GHSA-4gg8-gxpx-9rph; GHSA-pjjw-68hj-v9mw (0.11.6)
    "pytest": "9.0.3",  # CVE-2025-71176 (the test extra)
}


def _requirements() -> dict[str, Requirement]:
    """Every requirement of pyproject.toml ([project] dependencies and each extra), by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [
        *project["dependencies"],
        *chain.from_iterable(project["optional-dependencies"].values()),
    ]
    return {r.name.lower(): r for r in map(Requirement, listed)}


@pytest.mark.parametrize("name", sorted(ADVISORY_FLOORS))
def test_no_dependency_may_resolve_below_its_security_fix(name: str) -> None:
    """The requirement's floor is at least the fixed version, which it allows; the environment the
    tests run in holds such a version."""
    specifier = _requirements()[name].specifier
    fixed = Version(ADVISORY_FLOORS[name])
    floors = [Version(s.version) for s in specifier if s.operator in (">=", ">", "==", "~=")]
    assert floors and max(floors) >= fixed, f"{name}{specifier}: its floor is below the fix {fixed}"
    assert specifier.contains(fixed), f"{name}{specifier} refuses the fixed {fixed}"
    installed = _installed(name)
    assert installed is None or Version(installed.version) >= fixed, (
        f"{name} {installed.version if installed else ''} is installed, below the fix {fixed}: "
        "reinstall (uv pip install -e '.[test]')"
    )


def _installed(name: str) -> importlib.metadata.Distribution | None:
    """The installed distribution of `name` (None where this environment lacks it)."""
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None

"""The wheel ships the scenarios: a config anywhere (say, in a vLLM checkout for CI) finds them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

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

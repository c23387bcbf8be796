"""The manual (docs/) builds with MkDocs in strict mode: no broken link, no page left out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_manual_builds_without_a_warning(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
        + ["-d", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "WARNING" not in output, output
    assert (tmp_path / "site" / "index.html").is_file()

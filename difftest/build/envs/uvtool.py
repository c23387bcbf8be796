"""Running uv, the environment builder, with errors that say what failed.

uv comes with difftest as a Python package (`uv.find_uv_bin`), so a fresh
machine needs nothing installed by hand; a uv on PATH is the fallback.
"""

from __future__ import annotations

import shutil
import subprocess

from difftest.core.errors import EnvironmentBuildError


def uv_bin() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise EnvironmentBuildError(
        "uv is not installed", "install difftest with its dependencies (`uv run difftest ...`)"
    )


def run_uv(args: list[str], what: str, hint: str = "", timeout: float = 3600) -> str:
    """Run `uv ARGS`; return stdout, or raise naming the step and uv's last words."""
    try:
        done = subprocess.run([uv_bin(), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EnvironmentBuildError(
            f"uv timed out after {timeout:.0f} s trying to {what}", hint
        ) from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise EnvironmentBuildError(
            f"uv failed to {what}:\n{tail}", hint or "read uv's message above"
        )
    return done.stdout

"""Running uv, the environment builder, with errors that say what failed.

uv comes with difftest as a Python package whose binary is installed beside difftest's own
interpreter, so a fresh machine needs nothing installed by hand. It is looked up there and in the
system's folders only, never through PATH or `~/.local/bin` (where `uv.find_uv_bin` also looks):
a branch's code runs as the same user and could plant a `uv` there (issue #47). uv runs with
`UV_NO_CONFIG=1`, so no `uv.toml` or `[tool.uv]` (the user's, which a branch could write, or the
working folder's) changes what it does; difftest passes what it needs on the command line (the
find-links and indexes of `build.envs.sources`) and uv's own `UV_*` variables still apply.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from difftest.core.errors import EnvironmentBuildError
from difftest.core.host_tools import SYSTEM_PATH

#: Set for every uv command: uv reads no configuration file.
UV_ENV = {"UV_NO_CONFIG": "1"}


def uv_folders() -> list[Path]:
    """Where uv is looked for, in order: the scripts folder of difftest's interpreter (its virtual
    environment's `bin`, where installing difftest puts uv's binary), the folder of the interpreter
    itself, then the system's folders."""
    folders = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    folders += [Path(folder) for folder in SYSTEM_PATH.split(os.pathsep)]
    return list(dict.fromkeys(folders))


def uv_bin() -> str:
    """The uv binary difftest runs (see the module's docstring for why these folders only)."""
    for folder in uv_folders():
        candidate = folder / "uv"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise EnvironmentBuildError(
        "uv is not installed beside difftest's interpreter "
        f"({Path(sys.executable).parent}) nor in the system's folders ({SYSTEM_PATH})",
        "install difftest with its dependencies into a virtual environment (`uv pip install -e "
        ".`), which puts uv beside its interpreter: a uv on PATH or in ~/.local/bin is never run",
    )


def run_uv(args: list[str], what: str, hint: str = "", timeout: float = 3600) -> str:
    """Run `uv ARGS`; return stdout, or raise naming the step and uv's last words."""
    try:
        done = subprocess.run(
            [uv_bin(), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **UV_ENV},
        )
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

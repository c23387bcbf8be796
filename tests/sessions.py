"""Expensive set-ups made once per test session and shared by every xdist worker.

A set-up runs in whichever worker asks first, under a file lock in the session's own temporary
folder (above each worker's), and writes its outputs into a new folder there; the others wait for
it and read them.
Every result is still measured by the code under test in this very session: nothing is kept
between sessions. A set-up that failed is remembered as failed, so the other workers fail with its
error at once instead of running it again.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from tests.e2e.cli_helpers import run_cli
from tests.factories import ROOT

#: The file a finished set-up's answer is kept in (JSON), and the one a failed set-up's error is.
DONE, FAILED = "done.json", "failed.txt"


def session_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """`name`'s folder in this test session's temporary root, the same for every xdist worker."""
    root = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and root.name == f"popen-{worker}":
        root = root.parent  # the session's folder, above each worker's own
    folder = root / name
    folder.mkdir(exist_ok=True)
    return folder


def once_per_session(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]
) -> tuple[Path, Any]:
    """(folder, answer): `make(folder)` run once in this test session, its JSON answer shared.

    `make` writes what it makes under a new, empty `folder` (a worker that died mid-way leaves
    its own behind, never in the way of the next try) and returns what the tests need to find
    it again (JSON). A `make` that failed fails every later caller with its traceback; one that
    was skipped or interrupted leaves no mark, so the next caller tries again."""
    root = session_folder(tmp_path_factory, name)
    done, failed = root / DONE, root / FAILED
    with FileLock(str(root / "lock")):
        if not done.exists() and not failed.exists():
            folder = Path(tempfile.mkdtemp(prefix="made-", dir=root))
            try:
                answer = {"folder": folder.name, "answer": make(folder)}
                text = json.dumps(answer)
            except (Exception, pytest.fail.Exception):
                failed.write_text(traceback.format_exc(), encoding="utf-8")
                raise
            done.write_text(text, encoding="utf-8")
    if failed.exists():
        pytest.fail(
            f"the shared set-up {name!r} failed in this session:\n"
            f"{failed.read_text(encoding='utf-8')}",
            pytrace=False,
        )
    made = json.loads(done.read_text(encoding="utf-8"))
    return root / made["folder"], made["answer"]


@dataclass(frozen=True)
class ShippedRun:
    """`difftest run --tier scheduler` on the shipped branches.yaml, as printed and written."""

    code: int
    out: Path
    printed: str

    @property
    def evidence(self) -> dict:
        return json.loads((self.out / "evidence.json").read_text(encoding="utf-8"))


def shipped_scheduler_run(tmp_path_factory: pytest.TempPathFactory) -> ShippedRun:
    """The shipped six-branch scheduler-tier run, measured once per test session (the result cache
    off, as for every test) and printed as into a pipe of an 80-column terminal (`COLUMNS=80`, not
    a TTY). `test_run_shipped.py` reads it; the Ray comparison holds the cluster to it."""

    def make(folder: Path) -> dict[str, Any]:
        printed = io.StringIO()
        with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(printed):
            env.setenv("COLUMNS", "80")
            env.setenv("DIFFTEST_RESULT_CACHE", "off")
            code = run_cli(
                "run", "-c", ROOT / "branches.yaml", "--tier", "scheduler", "--out", folder / "out"
            )
        (folder / "printed.txt").write_text(printed.getvalue(), encoding="utf-8")
        return {"code": code}

    folder, answer = once_per_session(tmp_path_factory, "shipped-scheduler-run", make)
    return ShippedRun(
        int(answer["code"]), folder / "out", (folder / "printed.txt").read_text(encoding="utf-8")
    )

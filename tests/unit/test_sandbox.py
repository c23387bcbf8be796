"""Probe processes cannot write what other branches read (`run.probes.sandbox`): real processes,
real user and mount namespaces, a DIFFTEST_HOME of the test's own. The kit's `tamper-shared` fault
(tests/faults) does the same through a real branch's vLLM import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.run.probes import sandbox
from difftest.run.probes.runner import probe_process_ended, start_probe_process


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DIFFTEST_HOME", str(home))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    (tmp_path / "uv-cache").mkdir()
    shared = home / "envs" / "base-x" / "vllm"
    shared.mkdir(parents=True)
    (shared / "metrics.py").write_text("num_drafts += 1\n")
    return home


def probe_shell(script: str, cwd: Path) -> tuple[int, str]:
    """Run `script` as a probe process is run (`start_probe_process`): (exit code, its output)."""
    proc = start_probe_process(
        ["sh", "-c", script],
        cwd=cwd,
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        probe_process_ended(proc)
    return proc.returncode, out


def needs_namespaces() -> None:
    guard = sandbox.protection()
    if not guard.active:
        pytest.skip(f"this machine cannot sandbox probes: {guard.why_not}")


def test_a_probe_cannot_write_a_shared_file_but_can_write_its_own_folder(home, tmp_path):
    needs_namespaces()
    shared = home / "envs" / "base-x" / "vllm" / "metrics.py"
    _code, out = probe_shell(
        f"echo 'num_drafts += 2' > {shared}; echo shared=$?; "
        f"echo mine > {tmp_path}/mine; echo own=$?",
        tmp_path,
    )
    assert "shared=0" not in out and "Read-only file system" in out and "own=0" in out, out
    assert shared.read_text() == "num_drafts += 1\n"
    assert (tmp_path / "mine").read_text() == "mine\n"


def test_a_probe_cannot_lift_the_protection_from_inside(home, tmp_path):
    """Root in its own namespace, yet the read-only mounts are locked: no remount, no unmount, and
    the host's view through /proc is closed."""
    needs_namespaces()
    envs = home / "envs"
    shared = envs / "base-x" / "vllm" / "metrics.py"
    script = (
        f"mount -o remount,bind,rw {envs}; umount {envs}; "
        f"echo x > {shared}; echo x > /proc/{os.getpid()}/root{shared}; "
        f"echo x > /proc/1/root{shared}"
    )
    probe_shell(script, tmp_path)
    assert shared.read_text() == "num_drafts += 1\n"


def test_the_protection_covers_every_shared_folder_and_can_be_turned_off(home, monkeypatch):
    folders = sandbox.shared_folders()
    assert (home / "envs").resolve() in folders
    assert Path(os.environ["UV_CACHE_DIR"]).resolve() in folders
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "off")
    guard = sandbox.protection()
    assert not guard.active and "DIFFTEST_SANDBOX=off" in guard.describe()
    assert sandbox.wrap(["python", "-V"]) == ["python", "-V"]


def test_the_judge_the_interpreter_and_the_system_are_read_only_too(home, tmp_path):
    """A probe must not rewrite difftest's own code, the interpreter's standard library or the
    programs the next probe's sandbox is built with."""
    needs_namespaces()
    targets = [sandbox.PACKAGE_ROOT, Path(sys.base_prefix), Path("/usr/bin")]
    script = "; ".join(f"touch {t}/.difftest-tampered && echo WROTE {t}" for t in targets)
    _code, out = probe_shell(script, tmp_path)
    assert "WROTE" not in out and out.count("Read-only file system") == len(targets), out


def test_the_sandbox_is_built_with_the_systems_programs_not_the_callers_path(
    home, tmp_path, monkeypatch
):
    """A `mount` planted first on PATH (a folder a probe could write) is never the one run."""
    planted = tmp_path / "bin"
    planted.mkdir()
    for tool in ("unshare", "mount", "sh"):
        (planted / tool).write_text("#!/bin/sh\nexec true\n")
        (planted / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted}:{os.environ['PATH']}")
    needs_namespaces()
    argv = sandbox.wrap(["true"])
    assert not any(str(planted) in part for part in argv)
    assert Path(argv[0]).parent.as_posix() in sandbox.SYSTEM_PATH.split(":")

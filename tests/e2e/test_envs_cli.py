"""`difftest envs` and reuse of cached environments: corruption is noticed, builds are never pruned.

Each test has its own DIFFTEST_HOME holding a hard-linked copy of the shared
base (`home_with_base_copy`), so corrupting its branch environments touches
nothing of anyone else's; files are only replaced or deleted, never written
through a hard link.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from difftest.core import paths
from tests.e2e.cli_helpers import by_branch, capture_stderr, run_cli
from tests.factories import ROOT

pytestmark = pytest.mark.slow

SHIPPED = ROOT / "branches.yaml"
#: main diverges here (EOS cuts a step), both shipped PR-style branches pass.
EOS = "eos-in-accepted-drafts"


def env_of(name: str):
    envs = [
        p
        for p in (paths.envs_dir()).glob("branch-*")
        if f'"name": "{name}"' in (p / "fingerprint.json").read_text()
    ]
    assert len(envs) == 1, envs
    return envs[0]


def test_a_corrupted_environment_is_listed_as_corrupt_and_rebuilt(
    home_with_base_copy, base_env, tmp_path, capsys
):
    assert run_cli("envs", "--build", "-c", SHIPPED) == 0
    capsys.readouterr()
    # pr-56137-style's own files replaced by main's: it would measure as main does, under its own
    # SHA.
    fixed = env_of("pr-56137-style") / "overlay"
    for changed in ("vllm/v1/core/sched/scheduler.py", "vllm/v1/spec_decode/metrics.py"):
        (fixed / changed).unlink()
        shutil.copy(base_env.site_packages / changed, fixed / changed)
    # main loses one of the base's files; pr-56195-style gains one.
    (env_of("main") / "overlay" / "vllm" / "version.py").unlink()
    (env_of("pr-56195-style") / "overlay" / "vllm" / "planted.py").write_text("print('planted')\n")

    assert run_cli("envs") == 0
    listing = capsys.readouterr().out
    assert listing.count("corrupt:") == 3, listing

    # A run rebuilds the environment it uses, and measures the branch's own code again.
    with capture_stderr() as log:
        code = run_cli(
            "run",
            "-c",
            SHIPPED,
            "--tier",
            "scheduler",
            "-k",
            EOS,
            "--out",
            tmp_path / "out",
            "pr-56137-style",
        )
    assert code == 0
    assert (
        "scheduler.py was changed after the environment was built): rebuilding it" in log.getvalue()
    )
    assert {r["verdict"] for r in by_branch(tmp_path / "out", "pr-56137-style")} == {
        "pass"
    }  # as main, it would diverge
    # main, the baseline, is measured beside the named branch (to judge crashes and hangs against):
    # rebuilt too.
    assert "overlay/vllm/version.py is missing): rebuilding it" in log.getvalue()
    # `envs --build` rebuilds the last one, saying why.
    assert run_cli("envs", "--build", "-c", SHIPPED) == 0
    captured = capsys.readouterr()
    assert (
        "overlay/vllm/planted.py is not the base's file (replaced or added after the build)): "
        "rebuilding it" in captured.err
    )

    assert "corrupt" not in captured.out


def test_prune_skips_an_environment_another_process_is_building(tmp_path, monkeypatch, capsys):
    """A build holds its environment's lock; `envs --prune` must leave the folder alone until it is
    released."""
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path / "home"))
    building = paths.envs_dir() / ".branch-0123456789ab-feedfacecafe.x1y2"  # a build in progress
    building.mkdir()
    (building / "half-written").write_text("")
    lock = paths.locks_dir() / "branch-0123456789ab-feedfacecafe.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from filelock import FileLock; l = FileLock({str(lock)!r}); l.acquire(); "
            "print('held', flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert run_cli("envs", "--prune") == 0
        assert building.exists()
        assert (
            f"skipped {building.name}: another difftest is building or using it"
            in capsys.readouterr().err
        )
    finally:
        holder.communicate("\n", timeout=30)
    assert run_cli("envs", "--prune") == 0
    assert not building.exists()
    assert f"removed {building.name}" in capsys.readouterr().err

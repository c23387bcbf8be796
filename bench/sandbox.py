"""Benchmark: what confining a probe costs at its start (#47), beside an unconfined start.

Each figure is the median of `--repeat` starts of the same trivial interpreter
(`python -I -S -c pass`, milliseconds), started as difftest starts a probe (`start_probe_process`:
a scratch folder of its own, with a copy of a vLLM inspection cache as seed): unconfined
(`DIFFTEST_SANDBOX=off`), and confined (the whole machine read-only, submounts checked, nested
namespaces, a pid namespace of its own under difftest's init). Then the confinement of one forked
child (`confine_forked_child`) alone, measured in a confined process as the fork server runs it.
A probe's own start (importing vLLM, ~10 s fresh, ~2 s forked) dwarfs all of these; the ratios
say how much of it is the sandbox.

    .venv/bin/python bench/sandbox.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from difftest.run.probes import sandbox
from difftest.run.probes.runner import probe_process_ended, start_probe_process
from difftest.run.probes.scratch import Scratch

_FORKED = """
import importlib, os, sys, time
from difftest.probe import confine
root = sys.argv[1]
for name in sys.argv[3:]:  # what a fork server holds before it forks (its size is what fork copies)
    importlib.import_module(name)
server = os.getpid()
times = []
for n in range(int(sys.argv[2])):
    mine = os.path.join(root, "children", str(n))
    os.makedirs(mine)
    read, write = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if not pid:
        confine.confine_forked_child(mine, root, server)
        os.write(write, b"x")
        os._exit(0)
    os.read(read, 1)
    times.append(time.perf_counter() - started)
    os.waitpid(pid, 0)
print(sorted(times)[len(times) // 2] * 1000)
"""


def start_ms(seed: Path, repeat: int) -> float:
    """Median milliseconds from starting a probe process to its end (a trivial interpreter)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        proc = start_probe_process(
            [sys.executable, "-I", "-S", "-c", "pass"],
            env={"PATH": os.environ["PATH"]},
            scratch=Scratch.create(seed),
        )
        proc.wait()
        probe_process_ended(proc)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def forked_ms(python: str, repeat: int, modules: list[str]) -> float:
    """Median milliseconds from a confined server's fork to its child confined (in `python`,
    having imported `modules` first)."""
    scratch = Scratch.create()
    proc = start_probe_process(
        [python, "-c", _FORKED, str(scratch.root), str(repeat), *modules],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(sandbox.PACKAGE_ROOT.parent)},
        stdout=subprocess.PIPE,
        text=True,
        scratch=scratch,
        own_pids=False,  # as a fork server is started
    )
    out, _ = proc.communicate()
    probe_process_ended(proc)
    return float(out.strip())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument(
        "--server-python",
        help="an interpreter with torch (a base environment's): also time a fork of a server that "
        "imported it, as a real fork server has",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        seed = Path(folder) / "seed" / "modelinfos"
        seed.mkdir(parents=True)
        (seed / "vllm-model_executor-models-llama-LlamaForCausalLM.json").write_text("{}" * 400)
        os.environ[sandbox.SANDBOX_ENV] = "off"
        plain = start_ms(seed.parent, args.repeat)
        os.environ[sandbox.SANDBOX_ENV] = "on"
        guard = sandbox.protection()
        if not guard.active:
            print(f"cannot confine here: {guard.why_not}")
            return
        confined = start_ms(seed.parent, args.repeat)
        forked = forked_ms(sys.executable, args.repeat, [])
        heavy = None
        if args.server_python:
            heavy = forked_ms(args.server_python, args.repeat, ["torch"])
    print(f"probe start, median of {args.repeat} (trivial interpreter, scratch with a seed copy):")
    print(f"  unconfined            {plain:7.1f} ms   1.00x")
    print(f"  confined              {confined:7.1f} ms   {confined / plain:4.2f}x")
    print(f"  + per forked child    {forked:7.1f} ms   (fork to confined, in the fork server)")
    if heavy is not None:
        print(f"  + per forked child    {heavy:7.1f} ms   (the same, the server holding torch)")
    print(f"  confinement's cost    {confined - plain:7.1f} ms per fresh probe")


if __name__ == "__main__":
    main()

"""Benchmark: what changed-line coverage costs (#48), traced beside untraced, in one run.

Every probe traces the stats path and the compared branches' changed files with coverage.py
(`probe.tracing`); `DIFFTEST_COVERAGE=off` traces nothing. For each tier below, the same `difftest
run` (result cache off, so every probe measures) with tracing off and on, alternating, `--repeat`
times: the median time of one probe process (its outcome's duration: start, import, every run,
exit) and of the whole command. Fresh probes (`--no-fork`) show a probe's whole cost; the default
(forked) run shows what a user waits for. Then `fuzz`'s warm probes, which trace every example: the
same seeded search (`--against main pr-56137-style pr-56195-style`: the first has all its changed
lines reached within a few examples, the second never does) with tracing off and on, as
scenarios probed per second of search.

    .venv/bin/python bench/coverage.py [--repeat N] [--engine-k EXPR] [--fuzz-examples N]

Ends with `HEADLINE: coverage-overhead N %` (the scheduler tier's per-probe median, fresh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The difftest of this interpreter's environment.
DIFFTEST = [str(Path(sys.executable).parent / "difftest")]


def one_run(args: list[str], traced: bool, out: Path) -> tuple[float, list[float]]:
    """(the command's seconds, each probe's seconds) of one `difftest run`."""
    env = {**os.environ, "DIFFTEST_RESULT_CACHE": "off"}
    env["DIFFTEST_COVERAGE"] = "on" if traced else "off"
    started = time.perf_counter()
    done = subprocess.run(
        [*DIFFTEST, "run", *args, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(
            f"difftest run {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}"
        )
    evidence = json.loads((out / "evidence.json").read_text())
    probes = [p["outcome"]["duration_s"] for p in evidence["probes"] if p.get("outcome")]
    return wall, probes


def fuzz_rate(examples: int, traced: bool, out: Path) -> float:
    """Scenarios probed per second of one seeded search (`fuzz.json`: probed / elapsed_s)."""
    env = {**os.environ, "DIFFTEST_COVERAGE": "on" if traced else "off"}
    command = [*DIFFTEST, "fuzz", "--seed", "0", "--examples", str(examples)]
    command += ["--against", "main", "--out", str(out), "pr-56137-style", "pr-56195-style"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"difftest fuzz failed ({done.returncode}):\n{done.stderr[-2000:]}")
    report = json.loads((out / "fuzz.json").read_text())
    return float(report["probed"]) / float(report["elapsed_s"])


def measure(name: str, args: list[str], repeat: int, work: Path) -> dict[bool, tuple[float, float]]:
    """Per mode (traced or not): (median probe seconds, median command seconds)."""
    probes: dict[bool, list[float]] = {False: [], True: []}
    walls: dict[bool, list[float]] = {False: [], True: []}
    for n in range(repeat):
        for traced in (False, True) if n % 2 == 0 else (True, False):
            wall, each = one_run(args, traced, work / f"{name}-{n}-{traced}")
            walls[traced].append(wall)
            probes[traced] += each
    return {
        mode: (statistics.median(probes[mode]), statistics.median(walls[mode]))
        for mode in (False, True)
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--engine-k", default="engine-eos-in-accepted-drafts or engine-structured-outputs"
    )
    parser.add_argument("--fuzz-examples", type=int, default=60)
    parser.add_argument(
        "--only", choices=["probes", "fuzz"], default=None, help="measure one half (no HEADLINE)"
    )
    args = parser.parse_args()
    cases = [
        (
            "scheduler, fresh probes",
            ["--tier", "scheduler", "--no-fork", "main", "pr-56137-style"],
        ),
        ("scheduler, default run (6 branches, forked)", ["--tier", "scheduler"]),
        (
            "engine, fresh probes",
            ["--tier", "engine", "-k", args.engine_k, "--no-fork", "main", "pr-56137-style"],
        ),
    ]
    headline = None
    with tempfile.TemporaryDirectory(prefix="difftest-bench-coverage-") as tmp:
        print(f"median of {args.repeat} runs per mode, seconds (untraced = DIFFTEST_COVERAGE=off)")
        print(
            f"{'case':46} {'probe':>7} {'traced':>7} {'ratio':>6}   "
            f"{'command':>7} {'traced':>7} {'ratio':>6}"
        )
        for name, case in cases if args.only != "fuzz" else []:
            found = measure(name.split(",")[0], case, args.repeat, Path(tmp))
            (probe_off, wall_off), (probe_on, wall_on) = found[False], found[True]
            print(
                f"{name:46} {probe_off:7.2f} {probe_on:7.2f} {probe_on / probe_off:5.2f}x"
                f"   {wall_off:7.2f} {wall_on:7.2f} {wall_on / wall_off:5.2f}x",
                flush=True,
            )
            if headline is None:
                headline = (probe_on / probe_off - 1) * 100
        rates: dict[bool, list[float]] = {False: [], True: []}
        for n in range(args.repeat if args.only != "probes" else 0):
            for traced in (False, True) if n % 2 == 0 else (True, False):
                out = Path(tmp) / f"fuzz-{n}-{traced}"
                rates[traced].append(fuzz_rate(args.fuzz_examples, traced, out))
        if rates[True]:
            off, on = statistics.median(rates[False]), statistics.median(rates[True])
            print(
                f"{'fuzz, scenarios probed per s (warm, forked)':46} {off:7.2f} {on:7.2f} "
                f"{on / off:5.2f}x",
                flush=True,
            )
    if headline is not None:
        print(f"HEADLINE: coverage-overhead {headline:.0f} %")


if __name__ == "__main__":
    main()

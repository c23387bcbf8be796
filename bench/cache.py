"""Benchmark: what the result cache saves, measured side by side in one run.

Through the real command line (a fresh `difftest` process per command), on the shipped
`branches.yaml`, each pair with a result cache of its own (an empty temporary folder,
`DIFFTEST_RESULT_CACHE`):

1. the shipped default `run` (every tier the config runs: scheduler and engine) on an empty
   cache, then the same `run` again, unchanged (every probe's runs reused): the issue's
   target is the re-run <= 10 % of the first's wall time, with identical results;
2. the same pair for the scheduler tier alone (`run --tier scheduler`), whose probes are
   the quickest to measure, so the re-run's fixed costs weigh most there;
3. `gate --base main --head pr-56195-style` (scheduler tier) on an empty cache (cold),
   against the same gate right after the scheduler run (both branches' runs reused).

    .venv/bin/python bench/cache.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIER = ["--tier", "scheduler"]
GATE = ["gate", "--base", "main", "--head", "pr-56195-style", "--format", "json", *TIER]
#: (what it is, difftest arguments) of the run pairs: each first on an empty cache, then again,
#: unchanged.
PAIRS = [("run (shipped default)", ["run"]), ("run --tier scheduler", ["run", *TIER])]
#: A command's wall seconds and the evidence it wrote.
Timed = tuple[float, dict]


COMMAND = [sys.executable, "-c", "import sys; from difftest.cli import main; sys.exit(main())"]


def host_environ(cache: Path) -> dict[str, str]:
    """This result cache; bytecode written as Python normally does (some shells turn it off, and
    then every command would compile difftest and its libraries from source, a cost no installed
    copy pays)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "DIFFTEST_RESULT_CACHE": str(cache)}


def timed(args: list[str], cache: Path, out: Path) -> tuple[float, dict]:
    """Wall seconds of `difftest ARGS --out OUT` with this result cache, and its evidence."""
    started = time.perf_counter()
    done = subprocess.run(
        [*COMMAND, *args, "--out", str(out)],
        cwd=ROOT,
        env=host_environ(cache),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"difftest {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, json.loads((out / "evidence.json").read_text())


def reused(evidence: dict) -> str:
    probes = evidence["probes"]
    return f"{sum(p['reused'] is not None for p in probes)}/{len(probes)}"


def judged(evidence: dict) -> list[tuple[str, ...]]:
    """Every result's verdict and measured totals (not how long the run took: a new measurement's
    own)."""
    return sorted(
        (
            r["branch"],
            r["scenario"],
            r["label"],
            r["verdict"],
            json.dumps(r["measured"], sort_keys=True),
        )
        for r in evidence["results"]
    )


def verdicts(evidence: dict) -> dict[str, Counter[str]]:
    table: dict[str, Counter[str]] = {}
    for result in evidence["results"]:
        table.setdefault(result["branch"], Counter())[result["verdict"]] += 1
    return table


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def measure(work: Path) -> tuple[dict[str, tuple[Timed, Timed]], Timed, Timed, list[str]]:
    """Each pair (first, again), the gate after the scheduler run (its cache), the cold gate, and
    the load averages seen at the start, after each pair and at the end."""
    loads = [load_average()]
    pairs = {}
    for number, (name, args) in enumerate(PAIRS):
        cache = work / f"cache-{number}"
        pairs[name] = (
            timed(args, cache, work / f"first-{number}"),
            timed(args, cache, work / f"again-{number}"),
        )
        loads.append(load_average())
    after = timed(GATE, work / f"cache-{len(PAIRS) - 1}", work / "gate-after")
    cold = timed(GATE, work / "cold-cache", work / "gate-cold")
    loads.append(load_average())
    return pairs, after, cold, loads


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        # Untimed: builds or checks every environment and writes the host's bytecode, for all alike.
        subprocess.run(
            [*COMMAND, "envs", "--build"],
            cwd=ROOT,
            env=host_environ(work / "unused"),
            stdout=subprocess.DEVNULL,
            check=True,
        )
        pairs, (after_s, after), (cold_s, cold), loads = measure(work)
    print(
        "shipped branches.yaml, each command a fresh difftest process, each pair a result cache of "
        "its own; load average (1/5/15 min) at the start, after each pair, at the end: "
        f"{' | '.join(loads)}"
    )
    for name, ((_s, first), _again) in pairs.items():
        branches = len(first["branches"])
        tiers = sorted({r["tier"] for r in first["results"]})
        print(
            f"  {name}: {branches} branches, {' and '.join(tiers)} tier(s), "
            f"{len(first['results']) // branches} results per branch"
        )
    print(f"\n{'command':<40}{'wall s':>8}{'probes reused':>15}{'ratio':>8}")
    for name, ((first_s, first), (again_s, again)) in pairs.items():
        print(f"{name + ', empty cache':<40}{first_s:>8.1f}{reused(first):>15}{1.0:>8.2f}")
        print(
            f"{'  the same again, unchanged':<40}{again_s:>8.1f}{reused(again):>15}"
            f"{again_s / first_s:>8.2f}"
        )
    print(f"{'gate, empty cache (cold)':<40}{cold_s:>8.1f}{reused(cold):>15}{1.0:>8.2f}")
    print(
        f"{'gate after the scheduler run':<40}{after_s:>8.1f}{reused(after):>15}"
        f"{after_s / cold_s:>8.2f}"
    )
    print()
    for name, ((first_s, first), (again_s, again)) in pairs.items():
        same = first["results"] == again["results"]
        print(
            f"{name}: re-run / first run {again_s / first_s:.1%} of the wall time (target <= "
            f"10 %); results identical: {'yes' if same else 'NO'}"
        )
    print(
        f"gate after run / cold gate: {after_s / cold_s:.1%}; results identical: "
        f"{'yes' if judged(cold) == judged(after) else 'NO'}"
    )
    for name, (_first, (_s, again)) in pairs.items():
        print(f"verdicts, {name} (pass / diverge / broken / error):")
        for branch, counts in verdicts(again).items():
            print(
                f"  {branch:<22}"
                + "  ".join(
                    f"{v} {counts.get(v, 0)}" for v in ("pass", "diverge", "broken", "error")
                )
            )


if __name__ == "__main__":
    main()

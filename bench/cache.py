"""Benchmark: what the result cache saves, measured side by side in one run.

Through the real command line (a fresh `difftest` process per command), on the shipped
`branches.yaml`'s scheduler tier, with a result cache of its own (an empty
temporary folder, `DIFFTEST_RESULT_CACHE`):

1. `run` on an empty cache (every branch's probe imports vLLM), then the same
   `run` again, unchanged (every probe's runs reused): target re-run <= 10 % of
   the first's wall time, with identical verdicts;
2. `gate --base main --head pr-56195-style` on an empty cache (cold), against
   the same gate right after the run (both branches' runs reused).

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


COMMAND = [sys.executable, "-c", "import sys; from difftest.cli import main; sys.exit(main())"]


def host_environ(cache: Path) -> dict[str, str]:
    """This result cache; bytecode written as Python normally does (some shells turn it off, and then every
    command would compile difftest and its libraries from source, a cost no installed copy pays)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "DIFFTEST_RESULT_CACHE": str(cache)}


def timed(args: list[str], cache: Path, out: Path) -> tuple[float, dict]:
    """Wall seconds of `difftest ARGS --out OUT` with this result cache, and its evidence."""
    started = time.perf_counter()
    done = subprocess.run([*COMMAND, *args, "--out", str(out)], cwd=ROOT, env=host_environ(cache),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"difftest {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, json.loads((out / "evidence.json").read_text())


def reused(evidence: dict) -> str:
    probes = evidence["probes"]
    return f"{sum(p['reused'] is not None for p in probes)}/{len(probes)}"


def judged(evidence: dict) -> list[tuple[str, ...]]:
    """Every result's verdict and measured totals (not how long the run took: a new measurement's own)."""
    return sorted((r["branch"], r["scenario"], r["label"], r["verdict"], json.dumps(r["measured"], sort_keys=True))
                  for r in evidence["results"])


def verdicts(evidence: dict) -> dict[str, Counter[str]]:
    table: dict[str, Counter[str]] = {}
    for result in evidence["results"]:
        table.setdefault(result["branch"], Counter())[result["verdict"]] += 1
    return table


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        # Untimed: builds or checks every environment and writes the host's bytecode, for all four alike.
        subprocess.run([*COMMAND, "envs", "--build"], cwd=ROOT, env=host_environ(work / "unused"),
                       stdout=subprocess.DEVNULL, check=True)
        first_s, first = timed(["run", *TIER], work / "cache", work / "first")
        again_s, again = timed(["run", *TIER], work / "cache", work / "again")
        after_s, after = timed(GATE, work / "cache", work / "gate-after")
        cold_s, cold = timed(GATE, work / "cold-cache", work / "gate-cold")
    branches = len(first["branches"])
    print(f"shipped branches.yaml, scheduler tier: {branches} branches, "
          f"{len(first['results']) // branches} runs per branch, each command a fresh difftest process\n")
    print(f"{'command':<34}{'wall s':>8}{'probes reused':>15}{'ratio':>8}")
    rows = [
        ("run, empty cache", first_s, first, 1.0),
        ("run again, unchanged", again_s, again, again_s / first_s),
        ("gate, empty cache (cold)", cold_s, cold, 1.0),
        ("gate after the run", after_s, after, after_s / cold_s),
    ]
    for name, wall, evidence, ratio in rows:
        print(f"{name:<34}{wall:>8.1f}{reused(evidence):>15}{ratio:>8.2f}")
    same = first["results"] == again["results"]
    gate_same = judged(cold) == judged(after)
    print(f"\nre-run / first run: {again_s / first_s:.1%} of the wall time (target <= 10 %); "
          f"results identical: {'yes' if same else 'NO'}")
    print(f"gate after run / cold gate: {after_s / cold_s:.1%}; results identical: {'yes' if gate_same else 'NO'}")
    for branch, counts in verdicts(again).items():
        print(f"  {branch:<22}" + "  ".join(f"{v} {counts.get(v, 0)}" for v in ("pass", "diverge", "broken", "error")))


if __name__ == "__main__":
    main()

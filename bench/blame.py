"""Benchmark: `difftest blame` on the shipped branches' findings, wall time and sets probed.

Through the real command line (a fresh `difftest` process per command), on the shipped
`branches.yaml`, against its baseline (main), with a result cache of its own (an empty temporary
folder, `DIFFTEST_RESULT_CACHE`): first `difftest blame BRANCH --tier scheduler` for every shipped
branch but the baseline - each looks for its own findings on every scheduler scenario, then
searches the hunks of each - on the empty cache; then the same commands again, every set of
hunks now in the cache (kept by its patch's content). The issue's target: pr-56195-style's broken
mixed batch blamed in at most a few dozen sets probed, under a minute on this 2-core machine.

    .venv/bin/python bench/blame.py [--branch NAME ...] [-k SCENARIO]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-c", "import sys; from difftest.cli import main; sys.exit(main())"]


def shipped_branches() -> list[str]:
    """Every branch of the shipped config but its baseline."""
    config = yaml.safe_load((ROOT / "branches.yaml").read_text())
    return [b["name"] for b in config["branches"] if b["name"] != config["baseline"]]


def blame(branch: str, select: str | None, cache: Path, out: Path) -> tuple[float, int, dict]:
    """Wall seconds, exit code and the JSON document of `difftest blame BRANCH`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    args = ["blame", branch, "--tier", "scheduler", "--format", "json", "--out", str(out)]
    args += ["-k", select] if select else []
    started = time.perf_counter()
    done = subprocess.run(
        [*COMMAND, *args],
        cwd=ROOT,
        env={**env, "DIFFTEST_RESULT_CACHE": str(cache)},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 2, 3):
        sys.exit(f"difftest {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    document = json.loads(done.stdout) if done.returncode != 2 else {}
    if done.returncode == 2:
        said = [line for line in done.stderr.splitlines() if line.startswith("difftest: error:")]
        document["error"] = said[0].removeprefix("difftest: error: ") if said else "exit 2"
    return wall, done.returncode, document


def rows(branch: str, wall: float, code: int, document: dict) -> list[str]:
    blamed = document.get("blame")
    if not blamed:
        return [f"| {branch} | - | {document.get('error', f'exit {code}')} | - | - | {wall:.1f} |"]
    hunks = {h["number"]: h for h in blamed["hunks"]}
    out = []
    for finding in blamed["findings"]:
        chosen = finding["minimal"]
        files = sorted({hunks[n]["file"].rsplit("/", 1)[-1] for n in chosen})
        made = (
            f"{len(chosen)} of {len(hunks)} hunks ({', '.join(files)})"
            if chosen
            else f"none: {finding['problem']}"
        )
        out.append(
            f"| {branch} | {finding['scenario']} ({finding['verdict']}) | {made} | "
            f"{len(blamed['tries'])} | {blamed['probes']} | {wall:.1f} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branch", action="append", help="a shipped branch (default: all)")
    parser.add_argument("-k", dest="select", default=None, help="only these scenarios")
    args = parser.parse_args()
    branches = args.branch or shipped_branches()
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="difftest-bench-blame-") as scratch:
        cache = Path(scratch) / "results"
        for label in ("empty result cache", "again, every set in the result cache"):
            print(f"\n{label}\n")
            print("| branch | finding | made by | sets tried | probed | wall s |")
            print("|---|---|---|---:|---:|---:|")
            for branch in branches:
                wall, code, document = blame(branch, args.select, cache, Path(scratch) / branch)
                print("\n".join(rows(branch, wall, code, document)), flush=True)
    print(f"\nload average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""Benchmark: the test suite itself - wall time, and the expensive work it does - so drift is seen.

Runs the quick loop (`pytest -m quick`) and then the README's whole suite (`pytest -n 2`), each
with `DIFFTEST_TALLY` pointing at a file of its own (`difftest/core/tally.py`: every process the
suite starts appends a line per probe started, fork server, warm probe, tests-tier session,
environment build and comparison run), and JUnit written beside it. Prints, side by side: wall
time and its ratio to the target (3 minutes quick, 20 minutes whole; CI allows 90 for everything),
tests per folder and their summed seconds, the ten slowest files, and the tally: probes started
fresh and forked, processes that imported vLLM, full runs (a whole tier set, no `-k`, no shard)
and all runs. Each loop runs with a new, empty temporary root (`TMPDIR`), as CI does. The last
line is `HEADLINE: suite-minutes N` (the whole suite's wall minutes, or the quick loop's alone).

A change that doubles probes or full runs shows here before it shows on CI's clock. Run it at rest
(nothing else on the machine), with the base already built, as the targets are stated:

    .venv/bin/python bench/suite.py [--only quick|whole] [--keep DIR] [-- PYTEST_ARGS...]

`--keep DIR` keeps each loop's pytest output, JUnit file and tally there (for `--durations`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest.core.tally import TALLY_ENV, read_tally  # noqa: E402 - after the path above

#: (name, pytest arguments, target seconds).
LOOPS = {
    "quick": (["-m", "quick", "-n", "2"], 3 * 60),
    "whole": (["-n", "2"], 20 * 60),
}
#: What imports vLLM: each fresh probe, fork server and warm probe (a tests-tier session imports it
#: once per worker, counted apart).
IMPORTS = ("probe-fresh", "fork-server", "warm-probe")


def run_loop(name: str, extra: list[str], folder: Path) -> tuple[float, int, Path, Path]:
    """Wall seconds, exit code, tally file and JUnit file of one pytest run (its output in
    `folder/NAME.log`)."""
    args, _ = LOOPS[name]
    tally = folder / f"{name}.tally"
    junit = folder / f"{name}.xml"
    temporary_root = folder / f"{name}.tmp"
    temporary_root.mkdir()
    env = {**os.environ, TALLY_ENV: str(tally), "TMPDIR": str(temporary_root)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args, f"--junitxml={junit}", *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wall = time.perf_counter() - started
    (folder / f"{name}.log").write_text(done.stdout)
    print(f"\n{name}: {done.stdout.strip().splitlines()[-1] if done.stdout.strip() else '?'}")
    return wall, done.returncode, tally, junit


def summed_seconds(junit: Path, by: str) -> tuple[Counter[str], Counter[str]]:
    """Tests and summed seconds per folder of tests/ (`by="folder"`; top-level files count as
    `tests/`) or per test file (`by="file"`)."""
    tests: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    if not junit.exists():
        return tests, seconds
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        if by == "file":
            key = "/".join(parts[:-1] if parts[-1][:1].isupper() else parts) + ".py"
        else:
            key = f"tests/{parts[1]}" if len(parts) > 2 else "tests/"
        tests[key] += 1
        seconds[key] += float(case.get("time") or 0)
    return tests, seconds


def whole_runs(tally: Path) -> int:
    """Comparison runs over a whole tier set (no `-k`, no shard)."""
    if not tally.exists():
        return 0
    lines = [json.loads(line) for line in tally.read_text().splitlines() if line.strip()]
    return sum(1 for line in lines if line["kind"] == "run" and line.get("whole"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(LOOPS), help="run one loop only")
    parser.add_argument("--keep", type=Path, help="keep each loop's output, JUnit and tally here")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()
    names = [args.only] if args.only else list(LOOPS)
    with tempfile.TemporaryDirectory(prefix="difftest-bench-suite-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        measured = {name: run_loop(name, args.pytest_args, folder) for name in names}
        print(f"\n{'':26}" + "".join(f"{name:>12}" for name in names))
        walls = {name: measured[name][0] for name in names}
        print(f"{'wall time (min)':26}" + "".join(f"{walls[n] / 60:12.1f}" for n in names))
        print(f"{'target (min)':26}" + "".join(f"{LOOPS[n][1] / 60:12.0f}" for n in names))
        print(f"{'wall / target':26}" + "".join(f"{walls[n] / LOOPS[n][1]:12.2f}" for n in names))
        print(f"{'exit code':26}" + "".join(f"{measured[n][1]:12d}" for n in names))
        tallies = {n: read_tally(measured[n][2]) for n in names}
        rows = [
            ("probes started fresh", lambda t, _n: t["probe-fresh"]),
            ("probes forked", lambda t, _n: t["probe-forked"]),
            ("fork servers", lambda t, _n: t["fork-server"]),
            ("warm probes (fuzz)", lambda t, _n: t["warm-probe"]),
            ("warm probes forked (fuzz)", lambda t, _n: t["warm-probe-forked"]),
            ("vLLM imports", lambda t, _n: sum(t[k] for k in IMPORTS)),
            ("tests-tier sessions", lambda t, _n: t["test-session"]),
            ("base builds", lambda t, _n: t["base-build"]),
            ("branch env builds", lambda t, _n: t["branch-build"]),
            ("runs", lambda t, _n: t["run"]),
            ("full runs (whole tiers)", lambda _t, n: whole_runs(measured[n][2])),
        ]
        for label, value in rows:
            print(f"{label:26}" + "".join(f"{value(tallies[n], n):12d}" for n in names))
        print("\nper folder (tests, summed test seconds; the suite runs on 2 workers):")
        for name in names:
            tests, seconds = summed_seconds(measured[name][3], by="folder")
            for folder, total in seconds.most_common():
                print(f"  {name:6} {folder:18} {tests[folder]:5d} {total:8.0f} s")
        print("\nten slowest files (tests, summed test seconds):")
        for name in names:
            tests, seconds = summed_seconds(measured[name][3], by="file")
            for file, total in seconds.most_common(10):
                print(f"  {name:6} {file:44} {tests[file]:5d} {total:8.0f} s")
        failed = [n for n in names if measured[n][1] != 0]
        headline = "whole" if "whole" in names else names[-1]
        print(f"\nHEADLINE: suite-minutes {walls[headline] / 60:.1f}")
    if failed:
        print(f"\nnot a clean measurement: {', '.join(failed)} failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

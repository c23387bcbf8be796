"""Benchmark: what the serving conditions (issue 21) add to the shipped run, before and after in
one run.

Through the real command line (a fresh `difftest` process per command, no result cache):
- before: the shipped run as it stood before the serving conditions: the five branches it had
  (no `pr-50518-style`) and the scenarios it had (every shipped scenario file but the ones the
  conditions added, `ADDED`);
- after: the shipped run (`difftest run`, every tier the config runs).
Both use the same difftest code; the difference is the added branch and scenarios. The target is
after <= 4/3 x before.

    .venv/bin/python bench/serving.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-c", "import sys; from difftest.cli import main; sys.exit(main())"]
#: The branch the serving conditions added to the shipped config.
ADDED_BRANCHES = {"pr-50518-style"}
#: The scenario files the serving conditions added, per tier folder.
ADDED = {
    "scheduler": {
        "abort-in-flight.yaml",
        "chunked-prefill.yaml",
        "one-token-prompt.yaml",
        "pd-decode-node.yaml",
        "preemption-pipelined.yaml",
        "preemption-sync.yaml",
        "prefix-cache-hit.yaml",
        "spec-decoding-off.yaml",
        "token-budget-cut.yaml",
        "two-steps-in-flight.yaml",
    },
    "engine": {
        "engine-abort.yaml",
        "engine-chunked-prefill.yaml",
        "engine-preemption.yaml",
        "engine-prefix-hit.yaml",
    },
}


def before_config(work: Path) -> Path:
    """The shipped config without the added branch, over a copy of the scenarios it had."""
    raw = yaml.safe_load((ROOT / "branches.yaml").read_text())
    raw["branches"] = [b for b in raw["branches"] if b["name"] not in ADDED_BRANCHES]
    for branch in raw["branches"]:
        branch["patches"] = [str(ROOT / p) for p in branch.get("patches", [])]
    scenarios = work / "scenarios"
    for tier, added in ADDED.items():
        (scenarios / tier).mkdir(parents=True)
        for file in sorted((ROOT / "scenarios" / tier).glob("*.yaml")):
            if file.name not in added:
                shutil.copy(file, scenarios / tier / file.name)
    raw["scenarios_dir"] = str(scenarios)
    config = work / "branches.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    return config


def timed(config: Path, out: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["DIFFTEST_RESULT_CACHE"] = "off"
    started = time.perf_counter()
    done = subprocess.run(
        [*COMMAND, "run", "-c", str(config), "--out", str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"difftest run -c {config} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall


def runs(out: Path) -> int:
    import json

    return len(json.loads((out / "evidence.json").read_text())["results"])


def load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    print(load())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        before = before_config(work)
        # Environments and the fork server's first import outside the timings.
        timed(ROOT / "branches.yaml", work / "warm-up")
        rows = []
        for name, config in (("before", before), ("after", ROOT / "branches.yaml")):
            out = work / name
            rows.append((name, timed(config, out), runs(out)))
    print(f"\n{'shipped run':<10}{'wall s':>9}{'results':>9}")
    for name, wall, count in rows:
        print(f"{name:<10}{wall:>9.1f}{count:>9}")
    ratio = rows[1][1] / rows[0][1]
    print(f"\nafter / before: {ratio:.2f} (target: <= 1.33)")
    print(load())


if __name__ == "__main__":
    main()

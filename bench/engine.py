"""Benchmark: what the engine tier costs per branch, to show it fits the CI budget.

One run, branches one after another (the machine has 2 cores and an engine
probe uses both): per branch the probe's wall time, its import, model build and
engine load times (from the probe's header), then each scenario's summed run
time (from the runs' `duration_s`). Target: the three branches well under 3
minutes together.

    uv run python bench/engine.py [-c branches.yaml] [-k TEXT]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest import tiers  # noqa: E402
from difftest.build.workspace import prepare  # noqa: E402
from difftest.core.config import load_config  # noqa: E402
from difftest.run.pipeline import make_job  # noqa: E402
from difftest.run.probes.runner import run_probe  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config", default=str(ROOT / "branches.yaml"))
    parser.add_argument("-k", default=None, help="only scenarios whose name contains TEXT")
    args = parser.parse_args()
    config = load_config(Path(args.config))
    tier = tiers.probe_tier("engine")
    scenarios = [
        s for s in tier.load(config.scenarios_dir / tier.folder) if not args.k or args.k in s.name
    ]
    job = make_job(tier, scenarios, config.timeouts.run_s)
    started = time.perf_counter()
    workspace = prepare(config)
    print(f"environments ready: {time.perf_counter() - started:.1f} s")
    per_branch: dict[str, dict[str, float]] = {}
    #: What the first probe's engine really ran with (block size, pool, budget): the serving
    #: conditions' cost depends on them.
    settings: dict[str, object] = {}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for branch in workspace.branches:
            if branch.env is None:
                print(f"{branch.name}: no environment ({branch.error})")
                continue
            result = run_probe(branch.name, branch.env.python, job, tier.name, Path(tmp), 900)
            info = result.header.info if result.header else {}
            settings = settings or dict(info.get("engine_settings") or {})
            import_s = result.header.import_s if result.header else None
            rows.append(
                (
                    branch.name,
                    result.duration_s,
                    import_s,
                    info.get("model_build_s"),
                    info.get("engine_load_s"),
                    len(result.runs),
                    sum(r.status != "ok" for r in result.runs),
                    result.error,
                )
            )
            times: dict[str, float] = {}
            for run in result.runs:
                times[run.scenario] = times.get(run.scenario, 0.0) + run.duration_s
            per_branch[branch.name] = times
    print(
        "\n"
        f"{'branch':16} {'probe s':>8} {'import s':>9} {'model s':>8} {'load s':>7} {'runs':>5} "
        f"{'errors':>6}"
    )
    for name, wall, imp, model, load, n, errors, err in rows:
        print(
            f"{name:16} {wall:8.1f} {imp or 0:9.1f} {model or 0:8.1f} {load or 0:7.1f} {n:5d} "
            f"{errors:6d}" + (f"  {err.splitlines()[0]}" if err else "")
        )
    print(f"\nengine settings (as run): {settings or 'not reported'}")
    names = list(per_branch)
    print(f"\n{'scenario (sum of its runs, s)':34}" + "".join(f"{n:>16}" for n in names))
    for s in scenarios:
        print(f"{s.name:34}" + "".join(f"{per_branch[n].get(s.name, 0.0):16.2f}" for n in names))
    print(
        "\n"
        f"engine tier, {len(names)} branches, sequential: {sum(r[1] for r in rows):.1f} s (target: "
        "well under 180 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: `difftest fuzz` throughput, per branch alone and all branches together, against cold
probes.

Prints, from one run (seed 0, the shipped branches): for each branch alone and
for all of them together, the examples Hypothesis ran (test cases; repeats of an
example are answered from the cache), the distinct scenarios probed on every
branch, both per second of search, the time to the first finding (from the
start of the search) and the start-up (environments checked, probes started,
vLLM imported). Then the naive alternative measured now: one cold probe process
per example. Then, per shipped branch against main, unguided beside guided (`--guide`): the
scenarios probed per second, how many of its changed lines the examples reached, and the seconds
until the last of them was first reached (`first_reached` in fuzz.json); it ends with `HEADLINE:
reach-all-changed N s` (guided; the slowest branch whose changed lines were all reached), after
`HEADLINE: examples-per-branch N /s` (all branches together, scenarios probed per second). The
machine's load average is printed before and after, since the figures mean little on a busy
machine.

    uv run python bench/fuzz.py [--examples N] [--skip-naive] [--reach-examples N] [--only reach]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Not this folder: its coverage.py (the coverage benchmark) would shadow coverage.py itself.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from difftest.build.workspace import prepare  # noqa: E402
from difftest.core.config import load_config  # noqa: E402
from difftest.run.fuzz.campaign import FuzzRequest, fuzz, fuzzable_tier  # noqa: E402
from difftest.run.pipeline import make_job  # noqa: E402
from difftest.run.probes.runner import run_probe  # noqa: E402


def load() -> str:
    return (
        "load average "
        + " ".join(f"{v:.2f}" for v in os.getloadavg())
        + f" ({os.cpu_count()} cores)"
    )


def one_search(config, branches: list[str], examples: int, out: Path) -> dict:
    started = time.perf_counter()
    report = fuzz(config, FuzzRequest(branches=branches, seed=0, examples=examples, out=out)).report
    wall = time.perf_counter() - started
    search = report.elapsed_s
    return {
        "branches": ", ".join(branches),
        "calls": report.calls,
        "probed": report.probed,
        "calls/s": report.calls / search,
        "probed/s": report.probed / search,
        "first": report.first_finding_s,
        "findings": len(report.findings),
        "search": search,
        "other": wall - search,
    }


def reach_search(config, branch: str, guided: bool, examples: int, out: Path) -> dict:
    """One search of `branch` against main: its rate and how far it got into the changed code."""
    request = FuzzRequest(
        branches=[branch], seed=0, examples=examples, against="main", out=out, guided=guided
    )
    report = fuzz(config, request).report
    changed = [
        c for c in (report.coverage.changed if report.coverage else []) if c.branch == branch
    ]
    total = sum(len(c.lines) for c in changed)
    reached = sum(len(c.reached) for c in changed)
    last = max((r.after_s for r in report.first_reached if r.branch == branch), default=None)
    return {
        "probed/s": report.probed / report.elapsed_s if report.elapsed_s else 0.0,
        "reached": f"{reached}/{total}",
        "all": reached == total and total > 0,
        "last": last,
    }


def cold_probe_s(config, examples: int = 3) -> float:
    """Seconds per example when every example starts its own probe process (vLLM imported each
    time)."""
    tier = fuzzable_tier()
    scenarios = []

    @seed(0)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    @given(tier.fuzz_strategy())
    def collect(raw: dict) -> None:
        scenarios.append(tier.parse_scenario({**raw, "name": f"cold-{len(scenarios)}"}, "bench"))

    collect()
    python = prepare(config, ["main"]).branch("main").env.python
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        for scenario in scenarios:
            run_probe(
                "main",
                python,
                make_job(tier, [scenario], config.timeouts.run_s),
                tier.name,
                Path(work),
                600,
            )
        return (time.perf_counter() - started) / len(scenarios)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--reach-examples", type=int, default=100)
    parser.add_argument("--only", choices=["reach"], default=None)
    args = parser.parse_args()
    config = load_config(ROOT / "branches.yaml")
    names = [b.name for b in config.branches]
    prepare(config)  # environments built once, outside the timings
    print(load())
    if args.only != "reach":
        throughput(config, names, args)
    reach(config, [n for n in names if n != "main"], args.reach_examples)
    print(load())


def reach(config, branches: list[str], examples: int) -> None:
    print(
        f"\nagainst main, seed 0, --examples {examples}: unguided | guided (--guide); 'last' is "
        "the seconds until the last changed line reached was first reached"
    )
    print(
        f"{'branch':<24}{'probed/s':>9}{'reached':>9}{'last s':>8}  |{'probed/s':>9}"
        f"{'reached':>9}{'last s':>8}"
    )
    slowest: float | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for branch in branches:
            found = [
                reach_search(config, branch, guided, examples, Path(tmp) / f"{branch}-{guided}")
                for guided in (False, True)
            ]
            cells = []
            for f in found:
                last = f"{f['last']:.1f}" if f["last"] is not None else "-"
                cells.append(f"{f['probed/s']:>9.1f}{f['reached']:>9}{last:>8}")
            print(f"{branch:<24}{cells[0]}  |{cells[1]}", flush=True)
            guided = found[1]
            if guided["all"] and guided["last"] is not None:
                slowest = max(slowest or 0.0, guided["last"])
    print(
        f"HEADLINE: reach-all-changed {slowest:.1f} s"
        if slowest is not None
        else "HEADLINE: reach-all-changed - s"
    )


def throughput(config, names: list[str], args: argparse.Namespace) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, group in enumerate([[n] for n in names] + [names]):
            rows.append(one_search(config, group, args.examples, Path(tmp) / str(i)))
    print(
        "\n"
        f"seed 0, --examples {args.examples} per round; rates are per second of search, every "
        "branch of a row plays every example\n"
    )
    print(
        f"{'branches':<46}{'examples':>9}{'probed':>8}{'examples/s':>11}{'probed/s':>10}"
        f"{'first finding s':>16}{'findings':>9}{'search s':>9}{'start-up s':>11}"
    )
    for r in rows:
        first = f"{r['first']:.1f}" if r["first"] is not None else "-"
        print(
            f"{r['branches']:<46}{r['calls']:>9}{r['probed']:>8}{r['calls/s']:>11.1f}"
            f"{r['probed/s']:>10.1f}{first:>16}{r['findings']:>9}{r['search']:>9.1f}"
            f"{r['other']:>11.1f}"
        )
    if not args.skip_naive:
        cold = cold_probe_s(config)
        warm = 1 / rows[0]["probed/s"]
        print(
            "\n"
            f"{names[0]}: a cold probe per example {cold:.1f} s; warm probe {warm * 1e3:.0f} ms "
            f"per probed example (x{cold / warm:.0f})"
        )
    # Every branch plays every probed example: the all-branches row's rate is each branch's.
    print(f"HEADLINE: examples-per-branch {rows[-1]['probed/s']:.1f} /s")


if __name__ == "__main__":
    main()

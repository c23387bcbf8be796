"""`difftest run`: every scenario on every branch, verdicts, reports, exit code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from difftest.commands.progress import probe_progress
from difftest.config import Config
from difftest.errors import ConfigError
from difftest.envs.base import Log
from difftest.evidence import Evidence
from difftest.pipeline import Measurement, judge_all, make_evidence, measure_tier, select_scenarios
from difftest.reports import write_reports
from difftest.reports.terminal import render_terminal
from difftest.verdicts import exit_code
from difftest.workspace import Workspace, prepare


def compare(
    config: Config,
    names: list[str] | None,
    tier: str,
    select: str | None,
    reading: str | None,
    out: Path,
    jobs: int | None,
    do_fetch: bool,
    log: Log,
) -> tuple[Workspace, Evidence]:
    """Validate scenarios, prepare environments, probe, judge: the shared core of run and gate."""
    scenarios = select_scenarios(config, tier, select)
    if not scenarios:
        raise ConfigError(f"no scenario matches -k {select!r} in tier {tier!r}", "check the name passed to -k")
    workspace = prepare(config, names, do_fetch=do_fetch, log=log)
    chosen_reading = reading or config.oracle.reading
    work_dir = out / "probe"
    runs = {}
    for tier_name, tier_scenarios in scenarios.items():
        with probe_progress([b.name for b in workspace.branches if b.env], tier_name) as progress:
            runs[tier_name] = measure_tier(workspace, tier_name, tier_scenarios, work_dir, jobs, progress)
        for branch, delivered in runs[tier_name].items():
            state = f"failed: {delivered.error.splitlines()[0]}" if delivered.error else "done"
            log(f"{branch}: {tier_name} tier {state} in {delivered.duration_s:.1f} s ({len(delivered.runs)} runs)")
    measurement = Measurement(scenarios=scenarios, runs=runs)
    results = judge_all(workspace, measurement, chosen_reading)
    return workspace, make_evidence(workspace, measurement, results, chosen_reading)


def run_command(config: Config, args: argparse.Namespace, log: Log) -> int:
    out = Path(args.out)
    _, evidence = compare(
        config, args.branches or None, args.tier, args.select, args.reading, out, args.jobs, args.fetch, log
    )
    written = write_reports(evidence, out)
    render_terminal(evidence, Console(width=None if sys.stdout.isatty() else 140))
    log("wrote " + ", ".join(str(p) for p in written.values()))
    return exit_code(evidence.results)

"""`difftest show SCENARIO [--branch B] [--order O] [--out DIR]`: a recorded run, step by step.

Reads the evidence and the probe records `difftest run` left in DIR (the
records are checked against the hashes the evidence holds, then validated as
the runner validated them), and the scenario file (checked against the
evidence's hash) for the oracle's row of each step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from difftest import tiers
from difftest.cli.base import Command, Log, add_config, recorded_scenarios, stdout_console
from difftest.core.config import Config
from difftest.core.errors import EXIT_OK, ConfigError
from difftest.core.evidence import Evidence, read_evidence
from difftest.core.records import Result
from difftest.reports.trace import build_trace
from difftest.reports.trace_terminal import render_trace
from difftest.reports.views import branch_names, most_severe, run_index
from difftest.run.recorded import probe_of, recorded_runs


class ShowCommand(Command):
    name = "show"
    help = "print a recorded run step by step: drafts, sampled and emitted tokens, the branch's stats beside the oracle's"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config(parser)
        parser.add_argument("scenario", help="a scenario name (`difftest list` prints them)")
        parser.add_argument(
            "--branch",
            default=None,
            help="the branch to show (default: every branch that does not pass the scenario, else the first)",
        )
        parser.add_argument(
            "--order",
            default=None,
            metavar="RUN",
            help="a run label (order:a,b / alone:a) or a batch order (a,b) (default: the branch's most severe run)",
        )
        parser.add_argument(
            "--out", default="out", help="the folder `difftest run --out` wrote (default: out)"
        )
        parser.add_argument(
            "--all-steps",
            action="store_true",
            help="print every step (default: the steps around each disagreement with the oracle)",
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        folder = Path(args.out)
        evidence = read_evidence(folder / "evidence.json")
        info = evidence.scenarios.get(args.scenario)
        if info is None:
            raise ConfigError(
                f"scenario {args.scenario!r} is not in {folder / 'evidence.json'}",
                f"name one of: {', '.join(evidence.scenarios) or '(none)'}",
            )
        console = stdout_console()
        if info.skipped:
            console.print(f"{args.scenario}: not run on this base ({info.skipped})", markup=False)
            return EXIT_OK
        tier = tiers.get(info.tier)
        scenario = recorded_scenarios(config, evidence, [args.scenario])[args.scenario]
        index = run_index(evidence)
        for number, branch in enumerate(_branches(evidence, args.scenario, args.branch)):
            results = [
                r for r in evidence.results if r.scenario == args.scenario and r.branch == branch
            ]
            label = _label(results, args.order, index, branch)
            result = next((r for r in results if r.label == label), None)
            if number:
                console.print()
            if (
                not any(p.branch == branch and p.tier == tier.name for p in evidence.probes)
                and result
                and result.error
            ):
                # No probe output at all (the environment could not be built, vLLM did not import, ...).
                console.print(
                    f"{args.scenario} · {branch} · run {label}: could not be measured, no steps were recorded "
                    f"({result.error})",
                    markup=False,
                )
                continue
            runs = recorded_runs(evidence, folder, branch, tier.name)
            run = next((r for r in runs if r.scenario == args.scenario and r.label == label), None)
            if run is None or not run.steps:
                why = (
                    (run.error if run is not None else None)
                    or (result.error if result else None)
                    or "no steps recorded"
                )
                console.print(
                    f"{args.scenario} · {branch} · run {label}: no steps to show ({why})",
                    markup=False,
                )
                continue
            source = probe_of(evidence, folder, branch, tier.name, args.scenario)
            reused = source.reused if source is not None else None
            if reused is not None:
                console.print(
                    f"{branch} · {tier.name}: these steps come from the result cache: measured "
                    f"{reused.measured_at} by an earlier run (key {reused.key[:12]}), not by the run that "
                    "wrote this evidence; `difftest run --no-cache` measures them again",
                    markup=False,
                    soft_wrap=True,
                )
            trace = build_trace(tier, scenario, run, evidence.reading, branch)
            others = [r for r in results if r.label != label]
            render_trace(console, trace, result, others, all_steps=args.all_steps)
        return EXIT_OK


def _branches(evidence: Evidence, scenario: str, chosen: str | None) -> list[str]:
    names = branch_names(evidence)
    if chosen is not None:
        if chosen not in names:
            raise ConfigError(
                f"branch {chosen!r} is not in the evidence", f"name one of: {', '.join(names)}"
            )
        return [chosen]
    failing = [
        b
        for b in names
        if any(
            r.scenario == scenario and r.branch == b and r.verdict != "pass"
            for r in evidence.results
        )
    ]
    return failing or names[:1]


def _label(results: list[Result], order: str | None, index: dict, branch: str) -> str:
    """The run to show: the label given, the batch run whose order is `a,b,...`, or the most severe run."""
    if order is None:
        worst = most_severe(results)
        if worst is None:
            raise ConfigError(f"{branch} has no result for this scenario", "pick another --branch")
        return worst.label
    labels = [r.label for r in results]
    if order in labels:
        return order
    wanted = [part.strip() for part in order.split(",")]
    for label in labels:
        run = index.get((branch, results[0].scenario, label))
        if run is not None and run.role == "batch" and run.order == wanted:
            return label
    raise ConfigError(
        f"no run {order!r} of {branch} on this scenario", f"name one of: {', '.join(labels)}"
    )

"""`difftest show SCENARIO [--branch B] [--order O] [--out DIR]`: a recorded run, step by step.

Reads the evidence `difftest run` left in DIR and hands it to `reports.show`,
with the readers of what it recorded beside it: the probe records (checked
against the hashes the evidence holds, then validated as the runner validated
them, `run.reread`) and the scenario file (checked against the evidence's
hash, `run.rejudge`) for the oracle's row of each step.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from difftest.cli.base import Command, Log, add_config, recorded_scenarios, stdout_console
from difftest.core.config import Config
from difftest.core.errors import EXIT_OK
from difftest.core.evidence import Evidence, ProbeFiles, read_evidence
from difftest.core.records import ProbeRun
from difftest.reports.show import ShowRequest, show_scenario
from difftest.run.reread import probe_of, recorded_runs
from difftest.tiers.common.scenario import ScenarioBase


class ShowCommand(Command):
    name = "show"
    help = (
        "print a recorded run step by step: drafts, sampled and emitted tokens, the branch's stats "
        "beside the oracle's"
    )

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config(parser)
        parser.add_argument("scenario", help="a scenario name (`difftest list` prints them)")
        parser.add_argument(
            "--branch",
            default=None,
            help="the branch to show (default: every branch that does not pass the scenario, else "
            "the first)",
        )
        parser.add_argument(
            "--order",
            default=None,
            metavar="RUN",
            help="a run label (order:a,b / alone:a) or a batch order (a,b) (default: the branch's "
            "most severe run)",
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
        wanted = ShowRequest(args.scenario, args.branch, args.order, args.all_steps)
        recorded = _Recorded(config, evidence, folder)
        show_scenario(evidence, folder / "evidence.json", wanted, recorded, stdout_console())
        return EXIT_OK


@dataclass(frozen=True)
class _Recorded:
    """`reports.show.Recorded`: what `evidence` recorded in `folder`, through checking readers."""

    config: Config
    evidence: Evidence
    folder: Path

    def scenario(self, name: str) -> ScenarioBase:
        return recorded_scenarios(self.config, self.evidence, [name])[name]

    def runs(self, branch: str, tier: str) -> list[ProbeRun]:
        return recorded_runs(self.evidence, self.folder, branch, tier)

    def probe(self, branch: str, tier: str, scenario: str) -> ProbeFiles | None:
        return probe_of(self.evidence, self.folder, branch, tier, scenario)

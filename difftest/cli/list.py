"""`difftest list`: the scenarios of the config, with their tier, statement and runs."""

from __future__ import annotations

import argparse

from difftest import tiers
from difftest.cli.base import ALL_TIERS, Command, Log, add_config, stdout_console, tier_names
from difftest.core.config import Config
from difftest.core.errors import EXIT_OK
from difftest.reports.listing import render_listing
from difftest.run.pipeline import select_scenarios


class ListCommand(Command):
    name = "list"
    help = "list the scenarios: name, tier, what each probes, and the runs it plays"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config(parser)
        parser.add_argument(
            "--tier",
            choices=[*tiers.names(), ALL_TIERS],
            default=ALL_TIERS,
            help="only this tier's scenarios (default: all)",
        )
        parser.add_argument(
            "-k",
            dest="select",
            default=None,
            metavar="EXPR",
            help="only scenarios whose names match, as run -k",
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        selected = select_scenarios(config, tier_names(args.tier), args.select)
        render_listing(
            [(group.tier.name, s) for group in selected for s in group.scenarios], stdout_console()
        )
        return EXIT_OK

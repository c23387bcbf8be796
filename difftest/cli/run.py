"""`difftest run`: every scenario on every branch, verdicts, reports, exit code."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from difftest.cli.base import Command, Log, add_compare_options, compare_request
from difftest.cli.progress import probe_progress
from difftest.core.config import Config
from difftest.core.verdicts import exit_code
from difftest.reports import prepare_out, write_reports
from difftest.reports.terminal import render_terminal
from difftest.run.pipeline import compare


class RunCommand(Command):
    name = "run"
    help = "run every scenario on every branch, compare with the oracle and each other, report"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().setup_arguments(parser)
        add_compare_options(parser)
        parser.add_argument(
            "--jobs", type=int, default=None,
            help="branches probed at once (default: all for the scheduler tier, one per 4 cores for the engine tier)",
        )
        parser.add_argument("branches", nargs="*", help="branch names or git refs (default: all configured branches)")

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        request = compare_request(args, args.branches or None, jobs=args.jobs)
        prepare_out(request.out)
        evidence = compare(config, request, log, probe_progress).evidence
        written = write_reports(evidence, request.out)
        render_terminal(evidence, Console(width=None if sys.stdout.isatty() else 140))
        log("wrote " + ", ".join(str(p) for p in written.values()))
        return exit_code(evidence.results)

"""`difftest run`: every scenario on every branch, verdicts, reports, exit code."""

from __future__ import annotations

import argparse
import re

from rich.console import Console

from difftest.cli.base import (
    Command,
    Log,
    add_cache_option,
    add_compare_options,
    add_executor_options,
    add_format,
    compare_request,
    comparison_report,
)
from difftest.cli.progress import probe_progress
from difftest.core.config import Config
from difftest.core.records import Result
from difftest.core.verdicts import exit_code
from difftest.reports import locked_out, prepare_out, registry, write_report
from difftest.reports.sources import RunReport
from difftest.reports.terminal import render_tier_verdicts
from difftest.run.pipeline import check_request, compare


class RunCommand(Command):
    name = "run"
    help = "run every scenario on every branch, compare with the oracle and each other, report"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        super().setup_arguments(parser)
        add_compare_options(parser)
        add_executor_options(parser)
        add_cache_option(parser)
        parser.add_argument(
            "--jobs",
            type=int,
            default=None,
            help="branches probed at once (default: all for the scheduler tier, one per 4 cores "
            "for the engine tier)",
        )
        parser.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            help="print the counter table of every scenario, not only of those where some branch "
            "does not pass",
        )
        add_format(
            parser, self.name, "text", "text: tables, verdict grid and conclusion for a person"
        )
        parser.add_argument(
            "--shard",
            type=shard_spec,
            default=None,
            metavar="I/N",
            help="run only the I-th of N slices of the scenarios and write partial evidence "
            "(`difftest merge` joins them)",
        )
        parser.add_argument(
            "branches",
            nargs="*",
            help="branch names or git refs (default: all configured branches)",
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        request = compare_request(args, args.branches or None, jobs=args.jobs, shard=args.shard)
        check_request(config, request)
        with locked_out(
            request.out
        ):  # before prepare_out clears what another command may be writing
            prepare_out(request.out, log)
            progress_console = Console(stderr=True, highlight=False)

            def tier_done(tier: str, results: list[Result], more: bool) -> None:
                # A tier's verdicts as soon as it is judged: the next tier may take minutes.
                if more and args.format == "text":
                    render_tier_verdicts(results, tier, progress_console)

            comparison = compare(config, request, log, probe_progress, tier_done)
            code = exit_code(comparison.evidence.results)
            report = comparison_report(comparison, RunReport, exit_code=code, verbose=args.verbose)
            written = write_report(report, request.out)
            registry.show(report, self.name, args.format)
            log("wrote " + ", ".join(str(p) for p in written.values()))
            return code


def shard_spec(text: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N with 1 <= I <= N (e.g. 2/4)")
    return int(match[1]), int(match[2])

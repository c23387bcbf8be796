"""`difftest fuzz`: generated scenarios on every branch, each kind of failure shrunk to a scenario
file."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from difftest.cli.base import (
    Command,
    Log,
    add_config,
    add_executor_options,
    add_format,
    cluster_request,
)
from difftest.cli.progress import fuzz_progress
from difftest.core.config import Config
from difftest.core.fuzz import fuzz_exit_code
from difftest.reports import locked_out, prepare_out, record_written, registry, write_files

DEFAULT_EXAMPLES = 100


def _number(
    cast: Callable[[str], float], lowest: float, inclusive: bool, what: str
) -> Callable[[str], float]:
    """An argparse type: `cast(text)`, at least `lowest` (or above it), or a message saying what is
    wanted."""

    def parse(text: str) -> float:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < lowest or (value == lowest and not inclusive):
            raise argparse.ArgumentTypeError(
                f"{text!r}: give {what} {'of at least' if inclusive else 'above'} {lowest:g}"
            )
        return value

    return parse


EXAMPLES = _number(int, 1, True, "a whole number")
SECONDS = _number(float, 0, False, "a number of seconds")
SEED = _number(int, 0, True, "a whole number")


class FuzzCommand(Command):
    name = "fuzz"
    help = (
        "generate scenarios, run them on every branch, shrink each kind of failure to a scenario "
        "file"
    )

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config(parser)
        budget = parser.add_mutually_exclusive_group()
        budget.add_argument(
            "--examples",
            type=EXAMPLES,
            default=None,
            metavar="N",
            help=f"examples per search round (default: {DEFAULT_EXAMPLES}); the search ends after "
            "a round with no new kind of failure",
        )
        budget.add_argument(
            "--time", type=SECONDS, default=None, metavar="S", help="search for S seconds instead"
        )
        parser.add_argument(
            "--seed",
            type=SEED,
            default=0,
            help="the search's seed: same seed, same findings (default: 0)",
        )
        parser.add_argument(
            "--against",
            default=None,
            metavar="BRANCH",
            help="compare every branch with this one instead of the oracle (for changes the oracle "
            "has no opinion on)",
        )
        parser.add_argument(
            "--out", default="out", help="folder for fuzz.md, fuzz.json and found/ (default: out)"
        )
        parser.add_argument(
            "--reading", choices=["strict", "lenient"], default=None, help="override oracle.reading"
        )
        parser.add_argument(
            "--fetch",
            action="store_true",
            help="git fetch the configured repo first (pull heads too)",
        )
        parser.add_argument(
            "--no-fork",
            action="store_true",
            help="start every warm probe in an interpreter of its own instead of forking each from "
            "one warm interpreter that imported the shared libraries once (same results, slower)",
        )
        parser.add_argument(
            "--guide",
            action="store_true",
            help="steer the search toward the fuzzed branches' changed code: Hypothesis's targeted "
            "phase mutates the examples that ran most of it (same seed, same findings)",
        )
        parser.add_argument(
            "--require-coverage",
            action="store_true",
            help="exit 1 when a branch with nothing found has changed lines no example ran (by "
            "default it reads 'nothing found, not verified' and exits 0)",
        )
        add_format(parser, self.name, "text", "text: each kind of failure found, for a person")
        add_executor_options(parser)
        parser.add_argument(
            "--ray-actors",
            type=EXAMPLES,
            default=1,
            metavar="N",
            help="with --executor ray: warm probe actors per branch, examples spread over them in "
            "turn (default: 1)",
        )
        parser.add_argument(
            "branches",
            nargs="*",
            help="branch names or git refs (default: all configured branches)",
        )

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        assert config is not None
        # Imported here: the search pulls in Hypothesis (0.2 s), which no other command needs.
        from difftest.run.fuzz.campaign import FuzzRequest, OutFolder, fuzz

        examples = (
            args.examples
            if args.examples is not None
            else (None if args.time is not None else DEFAULT_EXAMPLES)
        )
        request = FuzzRequest(
            branches=args.branches or None,
            seed=args.seed,
            examples=examples,
            time_s=args.time,
            against=args.against,
            reading=args.reading,
            out=Path(args.out),
            fetch=args.fetch,
            cluster=cluster_request(args),
            actors=int(args.ray_actors),
            fork=not args.no_fork,
            guided=args.guide,
        )
        # Cleared (once the request is known valid) and recorded through the manifest, as every
        # command's --out: never by what an earlier fuzz.json names.
        out = OutFolder(
            clear=lambda: prepare_out(request.out, log),
            record=lambda files: record_written(request.out, files),
        )
        with locked_out(request.out):  # before fuzz clears what an earlier command wrote there
            with fuzz_progress() as progress:
                report = fuzz(config, request, log, progress, out).report
            written = write_files(report, request.out)
        registry.show(report, self.name, args.format)
        log(
            f"wrote {', '.join(str(p) for p in written.values())}, {request.out / 'fuzz.json'}"
            + (
                f" and {len(report.findings)} scenario file(s) under {request.out / 'found'}"
                if report.findings
                else ""
            )
        )
        return fuzz_exit_code(report, args.require_coverage)

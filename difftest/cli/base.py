"""What a subcommand is, and the options several commands share (declared once)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from difftest import tiers
from difftest.core.config import DEFAULT_CONFIG, Config
from difftest.run.pipeline import CompareRequest

Log = Callable[[str], None]
ALL_TIERS = "all"


class Command:
    """One subcommand: its name and help, its arguments, and what it does with them."""

    name: str
    help: str

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config(parser)

    def needs_config(self, args: argparse.Namespace) -> bool:
        return True

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        raise NotImplementedError


def add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG, help="branches file (default: ./branches.yaml)")


def add_compare_options(parser: argparse.ArgumentParser, out: str = "out") -> None:
    """--out, --tier, --reading, --fetch, -k: what every measuring command accepts."""
    parser.add_argument("--out", default=out, help=f"folder for report.md, report.html, junit.xml, evidence.json (default: {out})")
    parser.add_argument(
        "--tier", choices=[*tiers.names(), ALL_TIERS], default=ALL_TIERS, help="which tier to run (default: all)"
    )
    parser.add_argument("--reading", choices=["strict", "lenient"], default=None, help="override oracle.reading")
    parser.add_argument("--fetch", action="store_true", help="git fetch the configured repo first (pull heads too)")
    parser.add_argument(
        "-k", dest="select", default=None, metavar="EXPR",
        help='only scenarios whose names match, as pytest -k: words, and/or/not, parentheses ("eos and not engine")',
    )


def tier_names(choice: str) -> list[str] | None:
    """`--tier` as the pipeline takes it: None for every tier."""
    return None if choice == ALL_TIERS else [choice]


def compare_request(args: argparse.Namespace, branches: list[str] | None, **extra: object) -> CompareRequest:
    """The pipeline request from the shared options, plus the command's own choices."""
    return CompareRequest(
        branches=branches,
        tiers=tier_names(args.tier),
        reading=args.reading,
        out=Path(args.out),
        fetch=args.fetch,
        select=args.select,
        **extra,  # type: ignore[arg-type]
    )

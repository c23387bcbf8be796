"""What a subcommand is, and the options several commands share (declared once)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.console import Console

from difftest import tiers
from difftest.core.config import DEFAULT_CONFIG, Config
from difftest.core.evidence import Evidence
from difftest.core.records import ProbeRun
from difftest.reports import write_reports
from difftest.reports.trace import traces_for
from difftest.run.pipeline import CompareRequest, Comparison
from difftest.run.rejudge import recorded_scenarios  # noqa: F401 - show and verify import it from here
from difftest.tiers.common.scenario import ScenarioBase

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
    parser.add_argument(
        "-c", "--config", default=DEFAULT_CONFIG, help="branches file (default: ./branches.yaml)"
    )


def add_compare_options(parser: argparse.ArgumentParser, out: str = "out") -> None:
    """--out, --tier, --reading, --fetch, --no-fork, -k: what every measuring command accepts."""
    parser.add_argument(
        "--out",
        default=out,
        help=f"folder for report.md, report.html, junit.xml, evidence.json (default: {out})",
    )
    parser.add_argument(
        "--tier",
        choices=[*tiers.names(), ALL_TIERS],
        default=ALL_TIERS,
        help="which tier to run (default: all)",
    )
    parser.add_argument(
        "--reading", choices=["strict", "lenient"], default=None, help="override oracle.reading"
    )
    parser.add_argument(
        "--fetch", action="store_true", help="git fetch the configured repo first (pull heads too)"
    )
    parser.add_argument(
        "--no-fork",
        action="store_true",
        help="start every probe in an interpreter of its own instead of forking each tier's probes from one "
        "warm interpreter that imported the shared libraries once (same results, slower; runs the result "
        "cache holds are still reused: add --no-cache to measure them fresh)",
    )
    parser.add_argument(
        "-k",
        dest="select",
        default=None,
        metavar="EXPR",
        help='only scenarios whose names match, as pytest -k: words, and/or/not, parentheses ("eos and not engine")',
    )


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    """--no-cache, for the commands that may reuse probe runs from the result cache (`run`, `gate`)."""
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="measure every probe again instead of reusing unchanged runs from the result cache (verdicts are "
        "always judged afresh)",
    )


def tier_names(choice: str) -> list[str] | None:
    """`--tier` as the pipeline takes it: None for every tier."""
    return None if choice == ALL_TIERS else [choice]


def compare_request(
    args: argparse.Namespace, branches: list[str] | None, **extra: object
) -> CompareRequest:
    """The pipeline request from the shared options, plus the command's own choices."""
    return CompareRequest(
        branches=branches,
        tiers=tier_names(args.tier),
        reading=args.reading,
        out=Path(args.out),
        fetch=args.fetch,
        select=args.select,
        reuse_cached=not getattr(args, "no_cache", False),
        fork=not args.no_fork,
        **extra,  # type: ignore[arg-type]
    )


def add_format(
    parser: argparse.ArgumentParser, choices: tuple[str, ...], default: str, text: str
) -> None:
    parser.add_argument(
        "--format",
        choices=choices,
        default=default,
        help=f"{text}; json: the results as JSON on stdout, for scripts (default: {default})",
    )


def stdout_console() -> Console:
    """The report's console: the terminal's width, or $COLUMNS (default 80) when piped; no colour then."""
    return Console(highlight=False)


#: A comparison's runs with their steps, keyed (branch, scenario, run label).
Recorded = dict[tuple[str, str, str], ProbeRun]


def comparison_facts(comparison: Comparison) -> tuple[dict[str, ScenarioBase], Recorded]:
    """The scenarios compared (by name) and every run with its steps: what the traces and the conclusion's
    reasons are read from, built once for every report of the comparison."""
    recorded = {
        (branch, run.scenario, run.label): run
        for per_branch in comparison.delivered.values()
        for branch, delivered in per_branch.items()
        for run in delivered.runs
    }
    scenarios = {s.name: s for group in comparison.selected for s in group.scenarios}
    return scenarios, recorded


def write_comparison_reports(
    comparison: Comparison, out: Path, extra: Mapping[str, str] | None = None
) -> dict[str, Path]:
    """Every report of a comparison, with the `extra` files (name -> text), written as one set; the HTML
    one carries the step trace of each result that is not a pass."""
    scenarios, recorded = comparison_facts(comparison)
    return write_evidence_reports(comparison.evidence, out, scenarios, recorded, extra)


def write_evidence_reports(
    evidence: Evidence,
    out: Path,
    scenarios: dict[str, ScenarioBase],
    recorded: Recorded,
    extra: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """The reports of `evidence` with the facts they are read from (`comparison_facts`, or a merge's
    re-read shards): the traces of what does not pass, and the conclusion's reasons."""
    failing = [r for r in evidence.results if r.verdict != "pass"]
    traces = traces_for(failing, recorded, scenarios, evidence.reading)
    return write_reports(evidence, out, traces, extra, scenarios, recorded)

"""What a subcommand is, and the options several commands share (declared once)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from difftest import tiers
from difftest.core.config import DEFAULT_CONFIG, Config
from difftest.core.errors import ConfigError
from difftest.core.records import ProbeRun
from difftest.reports.outputs.console import stdout_console  # noqa: F401 - list, show, merge use it
from difftest.reports.registry import format_choices
from difftest.reports.sources import RunReport
from difftest.run.cluster.connect import ClusterRequest
from difftest.run.pipeline import CompareRequest, Comparison
from difftest.run.rejudge import recorded_scenarios  # noqa: F401 - show and verify import it from here
from difftest.tiers.common.scenario import ScenarioBase

Log = Callable[[str], None]
ALL_TIERS = "all"
R = TypeVar("R", bound=RunReport)


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


def add_compare_options(
    parser: argparse.ArgumentParser,
    out: str = "out",
    holds: str = "report.md, report.html, junit.xml, evidence.json",
) -> None:
    """--out (a folder for `holds`), --tier, --reading, --fetch, --no-fork, -k: what every measuring
    command accepts."""
    parser.add_argument("--out", default=out, help=f"folder for {holds} (default: {out})")
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
        help="start every probe in an interpreter of its own instead of forking each tier's probes "
        "from one warm interpreter that imported the shared libraries once (same results, slower; "
        "runs the result cache holds are still reused: add --no-cache to measure them fresh)",
    )
    parser.add_argument(
        "-k",
        dest="select",
        default=None,
        metavar="EXPR",
        help="only scenarios whose names match, as pytest -k: words, and/or/not, parentheses "
        '("eos and not engine")',
    )


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """--executor, --ray-address, --ray-place: where the probes run (run, gate, verify, fuzz)."""
    group = parser.add_argument_group("where the probes run")
    group.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="local: on this machine (default); ray: each probe a task on a Ray cluster (needs "
        "difftest[ray] here and on every node; results are judged here, as local ones)",
    )
    group.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="the Ray cluster's head, as `ray start --head` prints it (default: $RAY_ADDRESS)",
    )
    group.add_argument(
        "--ray-place",
        action="append",
        default=[],
        metavar="BRANCH=RESOURCE",
        help="run BRANCH's probes only on nodes that offer the custom resource RESOURCE "
        "(`ray start --resources '{\"RESOURCE\": 1}'`); repeatable",
    )


def cluster_request(args: argparse.Namespace) -> ClusterRequest | None:
    """The `--executor ray` request, or None for this machine; the Ray options without it are a
    usage error (they would be silently ignored). A command without the options runs here."""
    if not hasattr(args, "executor"):
        return None
    if args.executor != "ray":
        if args.ray_address or args.ray_place:
            raise ConfigError(
                "--ray-address and --ray-place apply to --executor ray only",
                "add --executor ray, or leave them out",
            )
        return None
    place: dict[str, str] = {}
    for item in args.ray_place:
        branch, _, resource = item.partition("=")
        if not branch.strip() or not resource.strip():
            raise ConfigError(
                f"--ray-place {item!r} is not BRANCH=RESOURCE", "e.g. --ray-place main=gpu_node"
            )
        place[branch.strip()] = resource.strip()
    return ClusterRequest(address=args.ray_address, place=place)


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    """--no-cache, for the commands that may reuse probe runs from the result cache (run, gate)."""
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="measure every probe again instead of reusing unchanged runs from the result cache "
        "(verdicts are always judged afresh)",
    )


def tier_names(choice: str) -> list[str] | None:
    """`--tier` as the pipeline takes it: None for every tier."""
    return None if choice == ALL_TIERS else [choice]


def compare_request(
    args: argparse.Namespace,
    branches: list[str] | None,
    *,
    jobs: int | None = None,
    shard: tuple[int, int] | None = None,
    baseline: str | None = None,
) -> CompareRequest:
    """The pipeline request from the shared options, plus the command's own choices (`run`: jobs
    and shard; `gate`: the baseline)."""
    return CompareRequest(
        branches=branches,
        tiers=tier_names(args.tier),
        reading=args.reading,
        out=Path(args.out),
        fetch=args.fetch,
        select=args.select,
        reuse_cached=not getattr(args, "no_cache", False),
        fork=not args.no_fork,
        jobs=jobs,
        shard=shard,
        baseline=baseline,
        cluster=cluster_request(args),
    )


def add_format(
    parser: argparse.ArgumentParser,
    command: str,
    default: str,
    text: str,
    also: tuple[str, ...] = (),
) -> None:
    """--format: the choices `command` offers in the output registry (`reports.registry`), after
    `also` (choices the command resolves itself: the gate's auto)."""
    choices = (*also, *format_choices(command))
    scripts = "; json: the results as JSON on stdout, for scripts" if "json" in choices else ""
    parser.add_argument(
        "--format",
        choices=choices,
        default=default,
        help=f"{text}{scripts} (default: {default})",
    )


#: A comparison's runs with their steps, keyed (branch, scenario, run label).
Recorded = dict[tuple[str, str, str], ProbeRun]


def comparison_facts(comparison: Comparison) -> tuple[dict[str, ScenarioBase], Recorded]:
    """The scenarios compared (by name) and every run with its steps: what the traces and the
    conclusion's reasons are read from, built once for every report of the comparison."""
    recorded = {
        (branch, run.scenario, run.label): run
        for per_branch in comparison.delivered.values()
        for branch, delivered in per_branch.items()
        for run in delivered.runs
    }
    scenarios = {s.name: s for group in comparison.selected for s in group.scenarios}
    return scenarios, recorded


def comparison_report(comparison: Comparison, kind: type[R], **fields: Any) -> R:
    """The report of a comparison (`kind`: the command's), what its outputs render from: its
    evidence, its scenarios and runs, the step trace of each result that does not pass, and
    `fields`."""
    scenarios, recorded = comparison_facts(comparison)
    return kind.of(comparison.evidence, scenarios, recorded, **fields)

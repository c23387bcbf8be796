"""`difftest envs`: list, build or prune the cached environments."""

from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console
from rich.table import Table

from difftest.build.envs.cache import CachedEnv, list_envs, prune
from difftest.build.workspace import prepare
from difftest.cli.base import Command, Log, add_config
from difftest.core.config import Config
from difftest.core.errors import EXIT_OK, EXIT_UNMEASURED


class EnvsCommand(Command):
    name = "envs"
    help = "list, build or prune the cached environments"

    def setup_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_config(parser)
        parser.add_argument(
            "--build",
            action="store_true",
            help="build (or reuse) the base and every branch environment, and list those",
        )
        parser.add_argument(
            "--prune", action="store_true", help="remove stale or unfinished environments"
        )
        parser.add_argument(
            "--all", action="store_true", help="with --prune: remove every environment"
        )
        parser.add_argument(
            "--fetch", action="store_true", help="with --build: git fetch the configured repo first"
        )
        parser.add_argument(
            "branches",
            nargs="*",
            help="with --build: branch names or git refs (default: all configured)",
        )

    def needs_config(self, args: argparse.Namespace) -> bool:
        """Listing and pruning read the cache only; building needs to know what to build."""
        return bool(args.build)

    def run(self, config: Config | None, args: argparse.Namespace, log: Log) -> int:
        if args.prune:
            removed, skipped = prune(everything=args.all)
            for env in removed:
                log(f"removed {env.path.name} ({env.stale_reason or 'all'})")
            for env in skipped:
                log(f"skipped {env.path.name}: another difftest is building or using it right now")
            log(
                f"{len(removed)} environment(s) removed"
                + (f", {len(skipped)} skipped" if skipped else "")
            )
            return EXIT_OK
        status = EXIT_OK
        if args.build:
            assert config is not None
            started = time.monotonic()
            workspace = prepare(config, args.branches or None, do_fetch=args.fetch, log=log)
            for branch in workspace.branches:
                if branch.env is None:
                    status = EXIT_UNMEASURED
                    log(f"{branch.name}: NOT built: {branch.error}")
                else:
                    log(f"{branch.name}: {branch.resolved.sha[:12]} -> {branch.env.python}")
            log(f"ready in {time.monotonic() - started:.1f} s")
            # What this config uses; `difftest envs` lists the whole cache.
            built = [workspace.base.path, *(b.env.path for b in workspace.branches if b.env)]
            _print_table(list_envs(only=built))
            return status
        _print_table(list_envs())
        return status


def _print_table(envs: list[CachedEnv]) -> None:
    table = Table(title="difftest environments", title_justify="left")
    for column in ("environment", "kind", "what", "own size", "status"):
        table.add_column(
            column, no_wrap=column != "status", justify="right" if column == "own size" else "left"
        )
    for env in envs:
        table.add_row(
            env.path.name,
            env.kind,
            env.label,
            f"{env.own_bytes / 1e6:,.1f} MB",
            _status(env.stale_reason),
        )
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def _status(reason: str | None) -> str:
    if reason is None:
        return "ok"
    return reason if reason.startswith("corrupt") else f"stale: {reason}"

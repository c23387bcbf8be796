"""`difftest envs`: list, build or prune the cached environments."""

from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console
from rich.table import Table

from difftest.config import Config
from difftest.envs.base import Log
from difftest.errors import EXIT_OK, EXIT_UNMEASURED


def envs_command(config: Config, args: argparse.Namespace, log: Log) -> int:
    from difftest.envs.cache import list_envs, prune

    if args.prune:
        removed = prune(everything=args.all)
        for env in removed:
            log(f"removed {env.path.name} ({env.stale_reason or 'all'})")
        log(f"{len(removed)} environment(s) removed")
        return EXIT_OK
    status = EXIT_OK
    if args.build:
        from difftest.workspace import prepare

        started = time.monotonic()
        workspace = prepare(config, args.branches or None, do_fetch=args.fetch, log=log)
        for branch in workspace.branches:
            if branch.env is None:
                status = EXIT_UNMEASURED
                log(f"{branch.name}: NOT built: {branch.error}")
            else:
                log(f"{branch.name}: {branch.resolved.sha[:12]} -> {branch.env.python}")
        log(f"ready in {time.monotonic() - started:.1f} s")
    _print_table(list_envs())
    return status


def _print_table(envs: list) -> None:
    table = Table(title="difftest environments", title_justify="left")
    for column in ("environment", "kind", "what", "own size", "status"):
        table.add_column(column, no_wrap=column != "status", justify="right" if column == "own size" else "left")
    for env in envs:
        table.add_row(
            env.path.name,
            env.kind,
            env.label,
            f"{env.own_bytes / 1e6:,.1f} MB",
            f"stale: {env.stale_reason}" if env.stale_reason else "ok",
        )
    Console(width=None if sys.stdout.isatty() else 160).print(table)

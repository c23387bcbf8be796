"""The `difftest` command line: argument parsing and exit codes, nothing else.

Each subcommand is a thin function over the library; errors the user can fix
(DifftestError) print their message and fix and exit with their code (2 for
configuration and usage), never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from difftest import __version__
from difftest.config import DEFAULT_CONFIG, load_config
from difftest.errors import EXIT_USAGE, DifftestError

console = Console(stderr=True, highlight=False)


def _log(message: str) -> None:
    console.print(f"[dim]difftest:[/] {escape(message)}", markup=True, soft_wrap=True)


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG, help="branches file (default: ./branches.yaml)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="difftest", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"difftest {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    envs = sub.add_parser("envs", help="list, build or prune the cached environments")
    _add_config(envs)
    envs.add_argument("--build", action="store_true", help="build (or reuse) the base and every branch environment")
    envs.add_argument("--prune", action="store_true", help="remove stale or unfinished environments")
    envs.add_argument("--all", action="store_true", help="with --prune: remove every environment")
    envs.add_argument("--fetch", action="store_true", help="git fetch the configured repo first")
    envs.add_argument("branches", nargs="*", help="branch names or git refs (default: all configured branches)")

    run = sub.add_parser("run", help="run every scenario on every branch, compare, report")
    _add_config(run)
    run.add_argument("--out", default="out", help="folder for report.md, report.html, junit.xml, evidence.json")
    run.add_argument(
        "-k", dest="select", default=None, metavar="EXPR",
        help='only scenarios whose names match, as pytest -k: words, and/or/not, parentheses ("eos and not engine")',
    )
    run.add_argument("--jobs", type=int, default=None, help="branches probed at once (default: all for the scheduler tier, one per 4 cores for the engine tier)")
    run.add_argument("--tier", choices=["scheduler", "engine", "all"], default="all")
    run.add_argument("--reading", choices=["strict", "lenient"], default=None, help="override oracle.reading")
    run.add_argument("--fetch", action="store_true", help="git fetch the configured repo first")
    run.add_argument("branches", nargs="*", help="branch names or git refs (default: all configured branches)")

    gate = sub.add_parser("gate", help="CI gate: fail when HEAD's stats are worse than BASE's")
    _add_config(gate)
    gate.add_argument("--base", required=True, help="branch name or git ref of the base")
    gate.add_argument("--head", required=True, help="branch name or git ref of the change")
    gate.add_argument("--always", action="store_true", help="run even when no stats-path file changed")
    gate.add_argument("--out", default="out", help="folder for the reports")
    gate.add_argument("--tier", choices=["scheduler", "engine", "all"], default="all")
    gate.add_argument("--reading", choices=["strict", "lenient"], default=None, help="override oracle.reading")
    gate.add_argument("--fetch", action="store_true", help="git fetch the configured repo first")

    verify = sub.add_parser("verify", help="re-run the scenarios of an evidence file and compare")
    _add_config(verify)
    verify.add_argument("evidence", help="an evidence.json written by `difftest run`")
    verify.add_argument("--out", default="out-verify", help="folder for the re-run's reports")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
        if args.command == "envs":
            from difftest.commands.envs import envs_command

            return envs_command(config, args, _log)
        if args.command == "run":
            from difftest.commands.run import run_command

            return run_command(config, args, _log)
        if args.command == "gate":
            from difftest.commands.gate import gate_command

            return gate_command(config, args, _log)
        from difftest.commands.verify import verify_command

        return verify_command(config, args, _log)
    except DifftestError as exc:
        console.print(f"[bold red]difftest: error:[/] {escape(exc.problem)}", markup=True, soft_wrap=True)
        if exc.hint:
            console.print(f"  [bold]fix:[/] {escape(exc.hint)}", markup=True, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        console.print("difftest: interrupted")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

"""The `difftest` command line: argument parsing and exit codes, nothing else.

Each subcommand is a `Command` (cli/<name>.py) that declares its arguments and
turns them into one library call; options shared by several commands are
declared once here. Errors the user can fix (DifftestError) print their message
and fix and exit with their code (2 for configuration and usage), never a
traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from difftest import __version__
from difftest.cli.base import Command
from difftest.cli.envs import EnvsCommand
from difftest.cli.gate import GateCommand
from difftest.cli.list import ListCommand
from difftest.cli.run import RunCommand
from difftest.cli.show import ShowCommand
from difftest.cli.verify import VerifyCommand
from difftest.core.config import load_config
from difftest.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNMEASURED, EXIT_USAGE, DifftestError

COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (RunCommand(), ShowCommand(), ListCommand(), GateCommand(), VerifyCommand(), EnvsCommand())
}

DESCRIPTION = """\
Differential tests of vLLM's speculative-decoding statistics across branches.
Runs the same seeded scenarios in every branch's real vLLM (a scripted model
against the scheduler; the real engine on a tiny local model), compares each
SpecDecodingStats counter with an oracle of correct accounting and with the
other branches, and says which branch is right, and why."""

EPILOG = f"""\
exit codes (run, gate, verify):
  {EXIT_OK}  everything passes (gate: head not worse; verify: all identical)
  {EXIT_FAILED}  a result diverges or is broken (gate: head worse; verify: differs)
  {EXIT_USAGE}  usage or configuration error: nothing was run
  {EXIT_UNMEASURED}  something could not be measured (and nothing exits 1)

`difftest COMMAND --help` describes each command's options."""

console = Console(stderr=True, highlight=False)


def log(message: str) -> None:
    console.print(f"[dim]difftest:[/] {escape(message)}", markup=True, soft_wrap=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="difftest",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"difftest {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    for command in COMMANDS.values():
        command.setup_arguments(sub.add_parser(command.name, help=command.help, description=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = COMMANDS[args.command]
    try:
        config = load_config(args.config) if command.needs_config(args) else None
        return command.run(config, args, log)
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

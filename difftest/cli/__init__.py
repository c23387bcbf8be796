"""The `difftest` command line: argument parsing and exit codes, nothing else.

Each subcommand is a `Command` (cli/<name>.py) that declares its arguments and
turns them into one library call; options shared by several commands are
declared once here. Errors the user can fix (DifftestError) print their message
and fix and exit with their code (2 for configuration and usage), never a
traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

# First of difftest's modules: it points GitPython at the system's git before anything imports it.
import difftest.cli.pin_git  # noqa: F401
from difftest import __version__
from difftest.build.refs import use_system_git
from difftest.cli.base import Command
from difftest.cli.blame import BlameCommand
from difftest.cli.coverage import CoverageCommand
from difftest.cli.envs import EnvsCommand
from difftest.cli.fuzz import FuzzCommand
from difftest.cli.gate import GateCommand
from difftest.cli.list import ListCommand
from difftest.cli.merge import MergeCommand
from difftest.cli.run import RunCommand
from difftest.cli.show import ShowCommand
from difftest.cli.verify import VerifyCommand
from difftest.core.config import load_config
from difftest.core.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNMEASURED,
    EXIT_USAGE,
    DifftestError,
)
from difftest.run.probes.descendants import become_subreaper as _become_subreaper
from difftest.run.probes.descendants import end_orphans
from difftest.run.probes.runner import allow_probes, stop_all_probes

COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        RunCommand(),
        ShowCommand(),
        ListCommand(),
        GateCommand(),
        VerifyCommand(),
        EnvsCommand(),
        FuzzCommand(),
        MergeCommand(),
        BlameCommand(),
        CoverageCommand(),
    )
}

DESCRIPTION = """\
Differential tests of vLLM's speculative-decoding statistics across branches.
Runs the same seeded scenarios in every branch's real vLLM (a scripted model
against the scheduler; the real engine on a tiny local model), compares each
SpecDecodingStats counter with an oracle of correct accounting and with the
other branches, and says which branch is right, and why."""

EPILOG = f"""\
exit codes (run, gate, verify, fuzz, blame):
  {EXIT_OK}  everything passes (gate: head not worse; verify: all identical)
     (blame: every finding blamed on a set of hunks)
  {EXIT_FAILED}  a result diverges or is broken (gate: head worse; verify: differs)
     (fuzz: it found a scenario that diverges or is broken)
  {EXIT_USAGE}  usage or configuration error: nothing was run
     (blame: also a branch without a finding to blame)
  {EXIT_UNMEASURED}  something could not be measured (and nothing exits 1)
     (blame: a finding it could not blame)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C, SIGTERM): every probe stopped, no report written

`difftest COMMAND --help` describes each command's options."""

console = Console(stderr=True, highlight=False)
#: Set once difftest made itself a child subreaper (Linux): what is its child when a command ends is
#: an orphan.
_SUBREAPER = False


def become_subreaper() -> None:
    global _SUBREAPER
    _SUBREAPER = _SUBREAPER or _become_subreaper()


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
        command.setup_arguments(
            sub.add_parser(command.name, help=command.help, description=command.help)
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = COMMANDS[args.command]
    # A probe's orphans are re-parented to difftest, and ended with it (`run.probes.descendants`).
    become_subreaper()
    with _terminate_as_interrupt(every_orphan=argv is None):
        try:
            # Every git command runs the system's git, never one found through PATH (issue #47).
            use_system_git()
            config = load_config(args.config) if command.needs_config(args) else None
            return command.run(config, args, log)
        except DifftestError as exc:
            console.print(
                f"[bold red]difftest: error:[/] {escape(exc.problem)}", markup=True, soft_wrap=True
            )
            if exc.hint:
                console.print(f"  [bold]fix:[/] {escape(exc.hint)}", markup=True, soft_wrap=True)
            return exc.exit_code
        except KeyboardInterrupt:
            stopped = stop_all_probes()
            console.print(f"difftest: interrupted; {stopped}, no report written")
            allow_probes()
            return EXIT_INTERRUPTED


@contextmanager
def _terminate_as_interrupt(every_orphan: bool = False) -> Iterator[None]:
    """SIGTERM (a CI job cancelled, `kill`) and SIGINT end difftest the way Ctrl-C does: probes
    stopped, exit 130. SIGINT is set explicitly: a process started in the background by a
    non-interactive shell (`difftest run &` in a CI script) inherits SIGINT ignored, and Python then
    keeps it so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if _SUBREAPER:  # the command line's own process: every child left is an orphan of a probe's
            end_orphans(every_child=every_orphan)


if __name__ == "__main__":
    sys.exit(main())

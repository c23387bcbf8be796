"""What a user sees before anything runs: `--help`, option help texts, progress lines.

`difftest --help` must state the purpose, the commands and the exit codes;
every option of every command must say what it does. Progress is checked on
a recording console: a branch waiting for a probe slot says so and shows no
clock, and piped progress lines are never wrapped mid-message.
"""

from __future__ import annotations

import argparse
import io

from rich.console import Console

from difftest.cli import COMMANDS, build_parser
from difftest.cli.progress import IMPORTING, WAITING, probe_progress


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_help_states_purpose_commands_and_exit_codes():
    text = build_parser().format_help()
    assert "speculative-decoding statistics" in text and "which branch is right" in text
    for name in COMMANDS:
        assert f"    {name} " in text
    assert "exit codes" in text
    for code in ("0", "1", "2", "3"):
        assert f"\n  {code}  " in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_every_option_of_every_command_has_help():
    missing = []
    for name, parser in subparsers(build_parser()).items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []
    assert set(subparsers(build_parser())) == {
        "run",
        "show",
        "list",
        "gate",
        "verify",
        "envs",
        "fuzz",
        "merge",
        "blame",
        "coverage",
    }


def test_a_waiting_probe_says_so_without_a_clock_until_it_starts():
    console = Console(record=True, force_terminal=True, width=120, color_system=None)
    with probe_progress("engine", ["main", "fix"], console) as update:
        update("main", 0, 27, "", "")
        update("main", 3, 27, "engine-plain-control", "order:a,b")
    text = console.export_text()
    final = text.strip().splitlines()[-2:]  # the bars' last state
    assert any("fix" in line and WAITING in line and "-:--:--" in line for line in final), final
    assert any(
        "main" in line and "3/27" in line and "engine-plain-control [order:a,b]" in line
        for line in final
    )


def test_piped_progress_says_when_a_probe_starts_and_is_never_wrapped():
    sink = io.StringIO()
    console = Console(file=sink, width=40)  # not a terminal: lines, no bars
    with probe_progress("scheduler", ["pr-56195-style"], console) as update:
        update("pr-56195-style", 0, 61, "", "")
        update("pr-56195-style", 9, 61, "grammar-all-invalid-async", "order:g")
    lines = sink.getvalue().splitlines()
    assert lines == [
        f"difftest: pr-56195-style scheduler: probe started, {IMPORTING}",
        "difftest: pr-56195-style scheduler: 9/61 runs done (last: grammar-all-invalid-async)",
    ]

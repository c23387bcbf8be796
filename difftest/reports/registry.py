"""Every output difftest renders, registered once: what it renders from, where it goes.

An `Output` names what it renders from (a `RunReport` kind, or the fuzz
summary), the file it writes into `--out` (or None), and the `--format` choice
that prints it on stdout, with the commands that offer that choice. The
commands' `--format` choices, the report set a command writes (`write_report`)
and the files `prepare_out` clears are all read from `OUTPUTS`, so adding an
output (SARIF, a check summary) is one module under `reports/outputs/` and
one entry here. The modules import their renderers only when they render:
this table loads neither rich nor jinja2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from difftest.core.fuzz import FuzzReport
from difftest.reports.outputs import (
    blame_summary,
    blame_text,
    differences,
    evidence,
    fuzz_summary,
    gate_summary,
    gate_text,
    html,
    junit,
    markdown,
    terminal,
)
from difftest.reports.sources import BlameReport, GateReport, RunReport, VerifyReport

S = TypeVar("S")


@dataclass(frozen=True)
class Output(Generic[S]):
    """One output: rendered from a `source` into `file` (`render`), and/or printed on stdout
    (`show`) when a command in `commands` is given `--format FORMAT`."""

    name: str
    #: What it renders from; it is an output of every source of this type (or a subtype).
    source: type[S]
    #: The file it writes into `--out`, and its text.
    file: str | None = None
    render: Callable[[S], str] | None = None
    #: The `--format` choice that prints it on stdout, the commands offering it, and the printing.
    format: str | None = None
    commands: tuple[str, ...] = ()
    show: Callable[[S], None] | None = None
    #: The file the others are read against (the evidence): moved into place after them.
    last: bool = False

    def __post_init__(self) -> None:
        if (self.file is None) != (self.render is None):
            raise ValueError(f"output {self.name!r}: a file needs its render, a render its file")
        if (self.format is None) != (self.show is None) or bool(self.format) != bool(self.commands):
            raise ValueError(f"output {self.name!r}: a --format needs its commands and its show")


#: Every output. Files are written in this order (the `last` one after the others); a command's
#: `--format` choices are listed in it.
OUTPUTS: tuple[Output[Any], ...] = (
    Output("terminal", RunReport, format="text", commands=("run",), show=terminal.show),
    Output("gate-text", GateReport, format="text", commands=("gate",), show=gate_text.show),
    Output("differences", VerifyReport, format="text", commands=("verify",), show=differences.show),
    Output("blame-text", BlameReport, format="text", commands=("blame",), show=blame_text.show),
    Output("markdown", RunReport, file="report.md", render=markdown.render),
    Output("html", RunReport, file="report.html", render=html.render),
    Output("junit", RunReport, file="junit.xml", render=junit.render),
    Output(
        "gate",
        GateReport,
        file="gate.md",
        render=gate_summary.render,
        format="md",
        commands=("gate",),
        show=gate_summary.show,
    ),
    Output(
        "blame",
        BlameReport,
        file="blame.md",
        render=blame_summary.render,
        format="md",
        commands=("blame",),
        show=blame_summary.show,
    ),
    Output(
        "evidence",
        RunReport,
        file="evidence.json",
        render=evidence.render,
        format="json",
        commands=("run", "gate", "verify", "blame"),
        show=evidence.show,
        last=True,
    ),
    Output(
        "fuzz",
        FuzzReport,
        file="fuzz.md",
        render=fuzz_summary.render,
        format="text",
        commands=("fuzz",),
        show=fuzz_summary.show,
    ),
)


def output(name: str) -> Output[Any]:
    """The output of that name."""
    found = [o for o in OUTPUTS if o.name == name]
    if not found:
        raise KeyError(f"no output {name!r}: one of {', '.join(o.name for o in OUTPUTS)}")
    return found[0]


def format_choices(command: str) -> tuple[str, ...]:
    """The `--format` choices `command` offers, in the order of `OUTPUTS`."""
    return tuple(dict.fromkeys(o.format for o in OUTPUTS if o.format and command in o.commands))


def report_files() -> tuple[str, ...]:
    """The files a measuring command (`run`, `gate`, `verify`, `merge`) writes into `--out`."""
    return tuple(o.file for o in OUTPUTS if o.file and issubclass(o.source, RunReport))


def rendered_files(source: object) -> list[tuple[Output[Any], str]]:
    """(output, text) of every file output of `source`, in the order they are written (the `last`
    one
    after the others); each is rendered before any is written."""
    outputs = [o for o in OUTPUTS if o.file and isinstance(source, o.source)]
    ordered = [o for o in outputs if not o.last] + [o for o in outputs if o.last]
    return [(o, _render(o, source)) for o in ordered]


def render(name: str, source: object) -> str:
    """The file text of output `name` for `source` (the gate's summary, for the CI job summary)."""
    return _render(output(name), source)


def show(source: object, command: str, choice: str) -> None:
    """Print on stdout the output that `command --format CHOICE` asks for."""
    found = [o for o in OUTPUTS if o.format == choice and command in o.commands]
    if not found:
        raise KeyError(f"{command} has no --format {choice!r}: one of {format_choices(command)}")
    _show(found[0], source)


def show_output(name: str, source: object) -> None:
    """Print output `name` on stdout (`merge`, which has no `--format`, prints the terminal one)."""
    _show(output(name), source)


def _show(chosen: Output[Any], source: object) -> None:
    if chosen.show is None or not isinstance(source, chosen.source):
        raise TypeError(f"output {chosen.name!r} prints nothing from {type(source).__name__}")
    chosen.show(source)


def _render(chosen: Output[Any], source: object) -> str:
    if chosen.render is None or not isinstance(source, chosen.source):
        raise TypeError(f"output {chosen.name!r} renders no file from {type(source).__name__}")
    return chosen.render(source)

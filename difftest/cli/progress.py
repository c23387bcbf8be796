"""Progress of long work: which branch, which scenario, how far (on stderr).

On a terminal: a bar per branch. A branch waiting for a free probe slot says
so and shows no clock; its clock starts when its probe process starts
(importing vLLM takes 10-20 s). In a log (not a terminal): one line when each
probe starts and one whenever a branch reaches a new scenario, never wrapped
mid-message, so a piped run is never silent for long and its lines grep well.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from difftest.run.probes.runner import Progress as ProgressCallback

WAITING = "waiting for a free probe slot"
IMPORTING = "importing vLLM ..."


@contextmanager
def probe_progress(
    tier: str, branches: list[str], console: Console | None = None
) -> Iterator[ProgressCallback]:
    """A bar per branch (on `console`, default stderr); the callback is safe to call from the
    runner's threads."""
    console = console or Console(stderr=True)
    lock = threading.Lock()
    with Progress(
        TextColumn("[bold]{task.fields[branch]}[/] " + escape(tier)),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=not console.is_terminal,
        disable=not console.is_terminal,
    ) as bars:
        tasks = {
            b: bars.add_task(WAITING, branch=escape(b), total=None, start=False) for b in branches
        }
        current: dict[str, str] = {}

        def update(branch: str, done: int, total: int, scenario: str, label: str) -> None:
            with lock:
                if not scenario:  # the probe process started: its clock starts now
                    bars.start_task(tasks[branch])
                    bars.update(tasks[branch], completed=done, total=total, description=IMPORTING)
                    if not console.is_terminal:
                        console.print(
                            f"difftest: {branch} {tier}: probe started, {IMPORTING}",
                            markup=False,
                            soft_wrap=True,
                        )
                    return
                bars.update(
                    tasks[branch],
                    completed=done,
                    total=total,
                    description=escape(f"{scenario} [{label}]"),
                )
                if console.is_terminal:
                    return
                # In a CI log: a line whenever a branch reaches a new scenario, instead of a live
                # bar.
                if current.get(branch) != scenario:
                    current[branch] = scenario
                    console.print(
                        f"difftest: {branch} {tier}: {done}/{total} runs done (last: {scenario})",
                        markup=False,
                        soft_wrap=True,
                    )

        yield update


@contextmanager
def fuzz_progress() -> Iterator[Callable[[int, int | None, int, int], None]]:
    """One bar for the search: examples of the current round, round number, findings so far."""
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]fuzz[/] round {task.fields[round]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[findings]} finding(s)"),
        console=console,
        transient=not console.is_terminal,
        disable=not console.is_terminal,
    ) as bars:
        task = bars.add_task("search", total=None, round=1, findings=0)
        last = {"round": 0}

        def update(done: int, total: int | None, round_: int, findings: int) -> None:
            bars.update(task, completed=done, total=total, round=round_, findings=findings)
            if not console.is_terminal and round_ != last["round"]:
                # In a CI log: a line per search round instead of a live bar.
                last["round"] = round_
                console.print(
                    f"difftest: fuzz round {round_} ({findings} finding(s) so far)", markup=False
                )

        yield update

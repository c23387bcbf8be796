"""The branch's own spec-decode log line, interval by interval, as a server logs it.

vLLM's `LoggingStatLogger` feeds one `SpecDecodingLogging` every step and logs
(then resets) it on a timer, so a server prints one line per interval. A branch
that adds a list to the logger and forgets to reset it is right over a whole
run and wrong from its second interval on. The probe replays that: one logger,
fed each recorded step's stats in order and logged after every `every` engine
steps (the deterministic stand-in for the timer), each line's figures read from
the arguments the branch formats (before `%.2f` rounds them). Runs inside the
probe, on the branch's own `SpecDecodingLogging`.
"""

from __future__ import annotations

import re
from typing import Any

#: The figures read from a line: (key, the label before its conversion in the format).
FIGURES = (
    ("mean_acceptance_length", "Mean acceptance length"),
    ("accepted", "Accepted: "),
    ("drafted", "Drafted: "),
    ("per_position", "Per-position acceptance rate"),
)
_CONVERSION = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]")


def interval_lines(
    logging_cls: Any, stats_by_step: list[tuple[int, Any]], steps: int, every: int
) -> list[dict[str, Any] | None]:
    """For each interval of `every` steps (step numbers `[i * every, (i + 1) * every)` of the
    run's `steps`), what the branch's logger printed at its end: None where it printed nothing."""
    logger = logging_cls()
    printed: list[dict[str, Any]] = []

    def capture(fmt: str, *args: Any) -> None:
        printed.append(_read(fmt, args))

    out: list[dict[str, Any] | None] = []
    for start in range(0, max(steps, 1), every):
        printed.clear()
        try:
            for step, stats in stats_by_step:
                if start <= step < start + every:
                    logger.observe(stats)
            logger.log(log_fn=capture)
        except Exception as exc:  # noqa: BLE001 - the branch's logger: judged as that interval's
            out.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        out.append(printed[-1] if printed else None)
    return out


def _read(fmt: str, args: tuple[Any, ...]) -> dict[str, Any]:
    """The line's figures (not its text: the throughputs in it change from run to run, and a
    re-run must reproduce the evidence)."""
    line: dict[str, Any] = {}
    for key, label in FIGURES:
        line[key] = _plain(key, argument(fmt, args, label))
    return line


def argument(fmt: str, args: tuple[Any, ...], label: str) -> Any:
    """The argument a lazily formatted log line (`log_fn(fmt, *args)`) prints after `label`, before
    any `%.2f` rounds it: its index is the number of conversions in the format before the label."""
    at = fmt.find(label)
    if at < 0:
        return None
    index = len(_CONVERSION.findall(fmt[:at].replace("%%", "")))
    return args[index] if index < len(args) else None


def _plain(key: str, value: Any) -> Any:
    """The argument as JSON: a number, the per-position rates as a list of floats."""
    if value is None:
        return None
    try:
        if key == "per_position":
            return [float(part) for part in str(value).split(",") if part.strip()]
        return float(value) if key == "mean_acceptance_length" else int(value)
    except (TypeError, ValueError):
        return None

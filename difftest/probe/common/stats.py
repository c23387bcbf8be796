"""Summing a branch's SpecDecodingStats, whatever fields the branch defines.

Every field of the dataclass is summed (ints and floats added, lists added
element-wise), so a branch that adds a counter shows up without code changes
here. The counters compared are `protocol.COUNTER_TABLE`'s; the one place that
knows what "emitted" is called in each variant is `EMITTED_FIELDS`. The mean
acceptance length is the number the branch itself logs: its own
`SpecDecodingLogging` is fed every step and its message parsed.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..protocol import COUNTER_TABLE, EMITTED_FIELDS, own_named
from . import intervals

#: Fields compared as counters under their own name; the rest (except num_spec_tokens) go to
#: Totals.extra, but for the branch's emitted counter.
CORE_FIELDS = own_named(COUNTER_TABLE)
#: The core fields that hold one count per draft position.
PER_POSITION = tuple(c.name for c in COUNTER_TABLE if c.per_position and c.name in CORE_FIELDS)
#: Configuration, not a counter: kept in the raw step stats only.
NOT_SUMMED = ("num_spec_tokens",)

_MEAN_RE = re.compile(r"Mean acceptance length:\s*([0-9.]+|nan)")


def stats_dict(stats: Any) -> dict[str, Any] | None:
    """Every dataclass field of one step's stats, as plain JSON values."""
    if stats is None:
        return None
    return {f.name: _plain(getattr(stats, f.name)) for f in dataclasses.fields(stats)}


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    return value


def _add(acc: Any, value: Any) -> Any:
    if acc is None:
        return list(value) if isinstance(value, list) else value
    if isinstance(value, list):
        width = max(len(acc), len(value))
        acc = list(acc) + [0] * (width - len(acc))
        return [a + (value[i] if i < len(value) else 0) for i, a in enumerate(acc)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return acc + value
    return acc if acc == value else value  # non-numeric: keep the latest


def sum_steps(step_stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise sum over the steps that reported stats."""
    total: dict[str, Any] = {}
    for stats in step_stats:
        for name, value in stats.items():
            if name not in NOT_SUMMED:
                total[name] = _add(total.get(name), value)
    return total


def totals(
    step_stats: list[dict[str, Any]], mean: float | None, k: int, field_names: list[str]
) -> dict[str, Any]:
    """A `results.Totals`-shaped dict from the steps' raw stats and the branch's logged mean.

    `field_names` are the branch's dataclass fields: a run without any stats
    still reports its emitted counter as a counter (0), not as implied.
    """
    summed = sum_steps(step_stats)
    for name in field_names:
        if name not in NOT_SUMMED and name not in summed:
            summed[name] = [0] * k if name.endswith("_per_pos") else 0
    out: dict[str, Any] = {name: summed.get(name, 0) for name in CORE_FIELDS}
    for name in PER_POSITION:
        if not out[name]:
            out[name] = [0] * k
    emitted_field = next((f for f in EMITTED_FIELDS if f in summed), None)
    if emitted_field is not None:
        out["num_emitted_tokens"] = summed[emitted_field]
        out["emitted_source"] = f"counter:{emitted_field}"
    else:
        out["num_emitted_tokens"] = out["num_drafts"] + out["num_accepted_tokens"]
        out["emitted_source"] = "implied"
    out["mean_acceptance_length"] = mean
    out["extra"] = {n: v for n, v in summed.items() if n not in CORE_FIELDS and n != emitted_field}
    return out


def _mean_argument(fmt: str, args: tuple[Any, ...]) -> float | None:
    """The argument the log line formats as its mean acceptance length, at full precision."""
    try:
        return float(intervals.argument(fmt, args, "Mean acceptance length"))
    except (TypeError, ValueError):
        return None


def branch_mean(logging_cls: Any, stats_objects: list[Any]) -> tuple[float | None, dict[str, Any]]:
    """The mean acceptance length as the branch's own SpecDecodingLogging logs it.

    Returns (value, notes). The log prints two decimals; notes say so, and
    say when the number had to come from main's formula instead.
    """
    notes: dict[str, Any] = {}
    if not stats_objects:
        return None, notes
    messages: list[str] = []
    unrounded: list[float] = []

    def capture(fmt: str, *args: Any) -> None:
        messages.append(fmt % args if args else fmt)
        value = _mean_argument(fmt, args)
        if value is not None:
            unrounded.append(value)

    try:
        logger = logging_cls()
        for stats in stats_objects:
            logger.observe(stats)
        logger.log(log_fn=capture)
        notes["mean_acceptance_length_log"] = messages[-1] if messages else None
        if unrounded:
            notes["mean_acceptance_length_source"] = "branch log (the logged argument, unrounded)"
            return unrounded[-1], notes
        match = _MEAN_RE.search(messages[-1]) if messages else None
        if match:
            notes["mean_acceptance_length_source"] = "branch log (2 decimals)"
            return float(match.group(1)), notes
        notes["mean_acceptance_length_source"] = "formula: log line not parsed"
    except Exception as exc:  # noqa: BLE001 - the branch changed the logger's API: fall back, and say so
        notes["mean_acceptance_length_source"] = f"formula: SpecDecodingLogging failed ({exc!r})"
    drafts = sum(s.num_drafts for s in stats_objects)
    accepted = sum(s.num_accepted_tokens for s in stats_objects)
    return (1 + accepted / drafts) if drafts else None, notes

"""How a counter value reads in text (reasons, explanations, every report): one rule everywhere."""

from __future__ import annotations

import math
import reprlib
from typing import Any

#: How many characters of a value an error message quotes.
MAX_QUOTED = 80
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, MAX_QUOTED, MAX_QUOTED
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def format_value(value: Any) -> str:
    """Lists compact, floats to 4 places, None as `-`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4f}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


def quote(value: Any, limit: int = MAX_QUOTED) -> str:
    """`repr(value)` cut to `limit` characters, computed in bounded time whatever the value's size
    (error messages quote values from files and probes: one may be huge, or nested without end)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

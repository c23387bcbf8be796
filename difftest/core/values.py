"""How a counter value reads in text (reasons, explanations, every report): one rule everywhere."""

from __future__ import annotations

import math
from typing import Any


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

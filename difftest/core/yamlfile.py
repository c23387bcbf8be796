"""Reading the YAML files users write (the config, scenarios), with their size bounded.

YAML anchors and aliases let a few hundred bytes stand for billions of values
(the "billion laughs"): parsing is instant, because aliases share one object,
but anything that walks the data (validation messages, a dump for the probe)
would never end. A file whose data expands past `MAX_VALUES` is refused with
a ConfigError naming it, before anything reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from difftest.core.errors import ConfigError

#: More values than any real config or scenario holds (the largest shipped scenario has a few
#: hundred).
MAX_VALUES = 100_000


def read_yaml(path: Path, data: bytes | None = None) -> Any:
    """The parsed file (`data`: its bytes, if already read); ConfigError for bad syntax or size."""
    try:
        raw = yaml.safe_load(path.read_bytes() if data is None else data)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{path}: not valid YAML: {exc}", "fix the YAML syntax at the line shown"
        ) from None
    if _expands_past(raw, MAX_VALUES):
        raise ConfigError(
            f"{path}: the data expands to more than {MAX_VALUES:,} values (YAML anchors and "
            "aliases?)",
            "write the values out instead of nesting aliases",
        )
    return raw


def _expands_past(data: Any, limit: int) -> bool:
    """Whether `data`, with every alias expanded, holds more than `limit` values (stops early)."""
    pending, seen = [data], 0
    while pending:
        item = pending.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False

"""Reading the YAML files users write (the config, scenarios), with their size bounded.

YAML anchors and aliases let a few hundred bytes stand for billions of values
(the "billion laughs"): parsing is instant, because aliases share one object,
but anything that walks the data (validation messages, a dump for the probe)
would never end. A file whose data expands past `MAX_VALUES` is refused with
a ConfigError naming it, before anything reads it.

A key given twice in one mapping is refused too: YAML loaders keep the last one silently, so a
branch with `patches:` twice (the second `[]`) would be measured as plain main under the PR's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from difftest.core.errors import ConfigError

#: More values than any real config or scenario holds (the largest shipped scenario has a few
#: hundred).
MAX_VALUES = 100_000


class DuplicateKey(yaml.YAMLError):
    """A mapping that gives one key twice."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (a merge `<<` may still be
    overridden: that is what it is for)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in first:
                    raise DuplicateKey(
                        f"the key {key!r} is given twice in one mapping: at line {first[key]} and "
                        f"at line {line}"
                    )
                first[key] = line
            except TypeError:  # an unhashable key: the safe loader's own error says so
                continue
        return super().construct_mapping(node, deep)


def read_yaml(path: Path, data: bytes | None = None) -> Any:
    """The parsed file (`data`: its bytes, if already read); ConfigError for bad syntax, a key
    given twice, or size."""
    try:
        raw = yaml.load(path.read_bytes() if data is None else data, Loader=_StrictLoader)
    except DuplicateKey as exc:
        raise ConfigError(
            f"{path}: {exc}", "keep one of the two (YAML would silently keep only the last)"
        ) from None
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

"""Turning pydantic's validation errors into lines a user can act on.

Used by the config and by the scenario loaders, so every schema error reads
the same way: the key, what is wrong, the value that was given, and the fixes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import ValidationError

from difftest.core.values import quote


def describe(
    exc: ValidationError, hint_for: Callable[[str], str | None]
) -> tuple[list[str], list[str]]:
    """(lines, fixes): one line per problem; the fixes that apply, without repeats."""
    lines, fixes = [], []
    for err in exc.errors():
        key = ".".join(
            str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union"))
        )
        msg = err["msg"].removeprefix("Value error, ")
        if not key and err["type"] == "value_error":
            # A check across keys: its message names the key it is about (`key: what is wrong`),
            # and the whole mapping it was given is no value to show.
            key = msg.split(":", 1)[0] if _KEY.match(msg.split(":", 1)[0]) else ""
            lines.append(f"  {msg}")
        else:
            shown = "missing" if err["type"] == "missing" else f"got {quote(err.get('input'))}"
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
                fixes.append(f"remove `{key}` or check its spelling")
            lines.append(f"  {key or '(top level)'}: {msg} ({shown})")
        hint = hint_for(key) if key else None
        if hint:
            fixes.append(hint)
    return lines, list(dict.fromkeys(fixes))


#: A key path as messages name it (`kv_blocks`, `requests.r.drafter.steps`).
_KEY = re.compile(r"^[A-Za-z_][\w-]*(\.[\w-]+)*$")

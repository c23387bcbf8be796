"""Text that came from a branch, made safe to store, print and render.

Branch code runs inside the probe and can put anything into a record or its
log: lone surrogates (which no UTF-8 file can hold, so writing a report would
crash), NUL, ESC and other control characters (terminal escape sequences in a
CI log, invisible text in a report). The host cleans every string it takes
from a probe, once, when it reads it (`run.probes.read_records`, `run.probes.runner`); the
reports clean again whatever they render, so no path can skip it.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Lone surrogates, and control characters other than tab and line breaks.
_UNSAFE = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
REPLACEMENT = "\ufffd"


def clean(text: str) -> str:
    """`text` with every unsafe character replaced by U+FFFD (tabs and line breaks kept)."""
    return _UNSAFE.sub(REPLACEMENT, text)


#: JSON escapes that decode to an unsafe character (`\\u` may, `\\b` and `\\f` always do).
_UNSAFE_ESCAPE = re.compile(r"\\[ubf]")


def loads_clean(line: str) -> Any:
    """`json.loads(line)` with every string `clean`ed; a line that can hold no unsafe character
    (none raw, no escape that decodes to one: the probe's usual record) is not walked, which makes
    reading a probe's records several times faster."""
    value = json.loads(line)
    if _UNSAFE.search(line) is None and _UNSAFE_ESCAPE.search(line) is None:
        return value
    return clean_strings(value)


def clean_strings(value: Any) -> Any:
    """`value` (parsed JSON) with every string in it, keys included, `clean`ed."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list):
        return [clean_strings(v) for v in value]
    if isinstance(value, dict):
        return {clean_strings(k): clean_strings(v) for k, v in value.items()}
    return value

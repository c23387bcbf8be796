"""Making text from branches safe in each output format.

Branch names, error messages and violation details come from code under test:
they must never break a table, close a code block, become markup, or hold
characters a format cannot carry.
"""

from __future__ import annotations

import re

from difftest.core.text import clean

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_NEWLINES = re.compile(r"\r\n|\r|\n")
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def printable(text: str) -> str:
    """Control characters (other than tab and line breaks)
    and lone surrogates replaced by U+FFFD."""
    return clean(text)


def md_escape(text: object) -> str:
    """Make any string safe inside a Markdown table cell: one line, no markup, no HTML."""
    s = _MD_SPECIAL.sub(r"\\\1", printable(str(text)))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _NEWLINES.sub("<br>", s)


def md_code(text: object) -> str:
    """Inline code showing `text` as it is, on one line (outside a table: a `|` there would end the
    cell): its fence is longer than any backtick run inside."""
    s = _NEWLINES.sub(" ", printable(str(text)))
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def fenced(text: str, language: str = "text") -> str:
    """A code block whose fence is longer than any backtick run inside,
    so it cannot be closed early."""
    text = printable(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def xml_text(text: object) -> str:
    """`text` with every character XML 1.0 forbids replaced by U+FFFD."""
    return _NOT_XML.sub("\ufffd", str(text))

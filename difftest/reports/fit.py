"""Fitting tables whose columns are branches into a terminal's width without cutting a name.

A branch name is never shortened with an ellipsis: the header is first tried
whole, then broken after its hyphens (`pr-56137-` / `style`), and only when
even that does not fit are the columns keyed by letters with a legend
(`A main · B pr-56137-style`). With more branches than one table can hold,
the branches are spread over several tables of the same rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from string import ascii_uppercase

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

_PIECE = re.compile(r"[^-_/.]*[-_/.]|[^-_/.]+$")
#: The width names are broken to when the cells themselves must wrap.
NARROW = 10


def wrap_name(name: str, width: int) -> str:
    """`name` broken after `-`, `_`, `/` or `.` into lines of at most `width` characters (a longer
    piece stays whole: nothing is cut)."""
    pieces = _PIECE.findall(name) or [name]
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = piece
        else:
            line += piece
    lines.append(line)
    return "\n".join(lines)


def longest_piece(name: str) -> int:
    return max((len(p) for p in _PIECE.findall(name)), default=len(name))


def letters(count: int) -> list[str]:
    """A, B, ..., Z, AA, AB, ...: column keys for any number of branches."""
    out = []
    for i in range(count):
        key = ""
        i += 1
        while i:
            i, rest = divmod(i - 1, 26)
            key = ascii_uppercase[rest] + key
        out.append(key)
    return out


def legend(names: list[str], keys: list[str] | None = None) -> Text:
    text = Text("columns: ", style="dim")
    for i, (key, name) in enumerate(zip(keys or letters(len(names)), names, strict=True)):
        if i:
            text.append(" · ", style="dim")
        text.append(key, style="bold")
        text.append(f" {name}")
    return text


def width_of(console: Console, table: Table) -> int:
    """The width `table` takes when nothing is wrapped (measured without the console's limit)."""
    return Measurement.get(console, console.options.update(max_width=100_000), table).maximum


Build = Callable[[list[Text], list[int]], Table]


def fit(
    console: Console, build: Build, names: list[str], cell_width: int
) -> list[tuple[Table, Text | None]]:
    """Tables (each with its legend, or None) that show every branch column within `console.width`.

    `build(headers, columns)` makes a table of the branch columns at the given
    indices. Tried in order, the first that fits is used: all branches with
    whole names, with names broken at hyphens, keyed by letters; then the same
    for the branches split over several tables, as few as fit. When not even
    one branch per table fits, the cells are what is too wide: names broken as
    narrow as they go, and rich wraps the cells at spaces.
    """
    everyone = list(range(len(names)))
    for size in range(len(names), 0, -1):
        chunks = [everyone[i : i + size] for i in range(0, len(everyone), size)]
        for variant in (_whole, _broken(cell_width), _keyed):
            tables = [_table(build, variant, names, chunk) for chunk in chunks]
            if all(width_of(console, table) <= console.width for table, _ in tables):
                return tables
    return [_table(build, _broken(NARROW), names, [i]) for i in everyone]


def _whole(names: list[str], chunk: list[int]) -> tuple[list[Text], Text | None]:
    return [Text(names[i]) for i in chunk], None


def _broken(width: int) -> Callable[[list[str], list[int]], tuple[list[Text], Text | None]]:
    def headers(names: list[str], chunk: list[int]) -> tuple[list[Text], Text | None]:
        return [Text(wrap_name(names[i], max(width, longest_piece(names[i])))) for i in chunk], None

    return headers


def _keyed(names: list[str], chunk: list[int]) -> tuple[list[Text], Text | None]:
    keys = letters(len(names))
    return [Text(keys[i]) for i in chunk], legend(
        [names[i] for i in chunk], [keys[i] for i in chunk]
    )


def _table(
    build: Build,
    variant: Callable[[list[str], list[int]], tuple[list[Text], Text | None]],
    names: list[str],
    chunk: list[int],
) -> tuple[Table, Text | None]:
    headers, key = variant(names, chunk)
    return build(headers, chunk), key

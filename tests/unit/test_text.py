"""Cleaning text from branches:
the fast path of `loads_clean` never lets an unsafe character through."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from difftest.core.text import clean_strings, loads_clean

#: JSON values whose strings (keys too) hold anything:
#: lone surrogates, NUL, ESC, C1 controls, non-ASCII.
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)


@given(VALUES, st.booleans())
def test_loads_clean_equals_cleaning_every_string(value, ascii_only: bool) -> None:
    try:
        line = json.dumps(value, ensure_ascii=ascii_only)
        line.encode("utf-8")
    except (
        UnicodeEncodeError
    ):  # a raw lone surrogate: no UTF-8 file holds one, escaped it is tested too
        line = json.dumps(value)
    assert loads_clean(line) == clean_strings(json.loads(line))

"""`-k EXPR` selects scenarios by name like pytest's -k (pure: names in, names out)."""

from __future__ import annotations

import pytest

from difftest.core.errors import ConfigError
from difftest.core.selection import compile_selection

NAMES = ["eos-in-accepted-drafts", "eos-on-bonus", "engine-eos-in-accepted-drafts", "long-random-k3", "engine-plain-control"]


def chosen(expression: str) -> list[str]:
    matcher = compile_selection(expression)
    return [n for n in NAMES if matcher(n)]


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("eos", ["eos-in-accepted-drafts", "eos-on-bonus", "engine-eos-in-accepted-drafts"]),
        ("eos and not engine", ["eos-in-accepted-drafts", "eos-on-bonus"]),
        ("bonus or long", ["eos-on-bonus", "long-random-k3"]),
        ("engine and (plain or accepted)", ["engine-eos-in-accepted-drafts", "engine-plain-control"]),
        ("not not bonus", ["eos-on-bonus"]),
        ("k3", ["long-random-k3"]),
    ],
)
def test_expressions_select_like_pytest(expression: str, expected: list[str]) -> None:
    assert chosen(expression) == expected


@pytest.mark.parametrize("expression", ["", "eos and", "(eos", "eos)", "or eos", "eos not"])
def test_malformed_expressions_are_usage_errors(expression: str) -> None:
    with pytest.raises(ConfigError) as info:
        compile_selection(expression)
    assert "-k" in str(info.value) and "fix:" in str(info.value)

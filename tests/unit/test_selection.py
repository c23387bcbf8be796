"""`-k EXPR` selects scenarios by name like pytest's -k (pure: names in, names out)."""

from __future__ import annotations

import pytest

from difftest.core.errors import ConfigError
from difftest.core.selection import compile_selection

NAMES = [
    "eos-in-accepted-drafts",
    "eos-on-bonus",
    "engine-eos-in-accepted-drafts",
    "long-random-k3",
    "engine-plain-control",
]


def chosen(expression: str) -> list[str]:
    matcher = compile_selection(expression)
    return [n for n in NAMES if matcher(n)]


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("eos", ["eos-in-accepted-drafts", "eos-on-bonus", "engine-eos-in-accepted-drafts"]),
        ("eos and not engine", ["eos-in-accepted-drafts", "eos-on-bonus"]),
        ("bonus or long", ["eos-on-bonus", "long-random-k3"]),
        (
            "engine and (plain or accepted)",
            ["engine-eos-in-accepted-drafts", "engine-plain-control"],
        ),
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


def test_a_shard_takes_every_nth_scenario_and_an_empty_shard_is_a_usage_error(
    shipped_config,
) -> None:
    import pytest as _pytest

    from difftest.core.errors import ConfigError
    from difftest.run.pipeline import select_scenarios, take_shard

    selected = select_scenarios(shipped_config, ["scheduler"], None)
    names = [s.name for group in selected for s in group.scenarios]
    slices = [
        [s.name for group in take_shard(selected, i, 3) for s in group.scenarios] for i in (1, 2, 3)
    ]
    assert sorted(sum(slices, [])) == sorted(names) and slices[0] == names[0::3]
    with _pytest.raises(
        ConfigError, match=f"shard {len(names) + 1}/{len(names) + 1} has no scenario"
    ):
        take_shard(selected, len(names) + 1, len(names) + 1)

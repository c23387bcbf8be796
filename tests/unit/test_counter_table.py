"""The counter table (`protocol.COUNTER_TABLE`): every view of the counters is derived from it.

A toy counter added to the table, through the same derivation functions the
real classes and maps are built with, must show up in each of them: the
host's models, the report rows, the trace columns, the Prometheus map; and
the oracle must refuse a counter it has no rule for. The typed view mypy reads
(`records.py`, under `TYPE_CHECKING`) must agree with what the table derives.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from difftest.core import records
from difftest.core.records import (
    COUNTER_TABLE,
    Counter,
    StepStats,
    Totals,
    step_stats_model,
    totals_model,
)
from difftest.core.verdicts import MAL
from difftest.probe.protocol import COUNTERS, counter_names, own_named, prometheus_fields
from difftest.reports.trace import FIELDS, trace_fields
from difftest.reports.views import ROW_LABELS, row_labels
from difftest.tiers.base import EMITTED_SOURCE
from difftest.tiers.common.accounting import ORACLE, Rule, Verification, check_rules, count

TOY = Counter(
    name="num_toy_tokens",
    label="toy tokens",
    short="toy",
    trace="toy_tokens",
    prometheus="spec_decode_num_toy_tokens",
)
TOY_PER_POS = Counter(
    name="num_toy_tokens_per_pos",
    label="toy tokens per pos",
    short="toy/pos",
    trace="toy_tokens_per_pos",
    kind="per_position",
)
#: A counter a branch may name in two ways, or not at all (as emitted is).
TOY_NAMED = Counter(
    name="num_toy_named",
    label="toy named",
    short="named",
    trace="named",
    branch_names=("num_toy_named", "num_toy_alias"),
)
TABLE = (*COUNTER_TABLE, TOY, TOY_PER_POS, TOY_NAMED)
#: Totals' fields after its counters.
AFTER = ["emitted_source", "mean_acceptance_length", "extra"]


def test_totals_gain_a_field_per_new_counter_after_the_others() -> None:
    model = totals_model(TABLE)
    assert list(model.model_fields) == [
        *COUNTERS,
        TOY.name,
        TOY_PER_POS.name,
        TOY_NAMED.name,
        *AFTER,
    ]
    totals = model(num_toy_tokens=3, num_toy_tokens_per_pos=[2, 1])
    assert (totals.num_toy_tokens, totals.num_toy_tokens_per_pos) == (3, [2, 1])
    assert model().num_toy_tokens == 0 and model().num_toy_tokens_per_pos == []
    with pytest.raises(ValidationError, match="num_toy_tokens"):
        model(num_toy_tokens=1.0)  # counters are strict integers, as the real ones
    dumped = list(model().model_dump())
    assert dumped.index(TOY_NAMED.name) + 1 == dumped.index("emitted_source")


def test_step_stats_gain_the_counters_every_branch_names_and_check_the_others() -> None:
    model = step_stats_model(TABLE)
    own = list(own_named(TABLE))
    assert list(model.model_fields) == ["num_spec_tokens", *own]
    assert TOY.name in own and TOY_NAMED.name not in own
    assert model(num_toy_tokens_per_pos=[1, 0]).num_toy_tokens_per_pos == [1, 0]
    assert model(num_toy_alias=4).value("num_toy_alias") == 4  # a branch's own name, kept as extra
    with pytest.raises(ValidationError, match="num_toy_alias must be an integer"):
        model(num_toy_alias=1.5)
    with pytest.raises(ValidationError, match="num_emitted_tokens must be an integer"):
        model(num_emitted_tokens=True)  # the real table's branch-named counter is still checked


def test_report_rows_trace_columns_and_prometheus_gain_the_new_counter() -> None:
    labels = row_labels(TABLE)
    assert list(labels)[-5:] == [TOY.name, TOY_PER_POS.name, TOY_NAMED.name, EMITTED_SOURCE, MAL]
    assert labels[TOY.name] == "toy tokens"
    assert trace_fields(TABLE)["toy_tokens"] == "toy"
    assert list(trace_fields(TABLE))[-3:] == ["toy_tokens", "toy_tokens_per_pos", "named"]
    prometheus = prometheus_fields(TABLE)
    assert prometheus["spec_decode_num_toy_tokens"] == TOY.name
    assert TOY_PER_POS.name not in prometheus.values()  # a counter the engine does not export
    assert counter_names(TABLE)[-3:] == (TOY.name, TOY_PER_POS.name, TOY_NAMED.name)


def test_the_real_views_are_the_table_applied() -> None:
    assert COUNTERS == counter_names(COUNTER_TABLE)
    assert list(Totals.model_fields) == [*COUNTERS, *AFTER]
    assert list(StepStats.model_fields) == ["num_spec_tokens", *own_named(COUNTER_TABLE)]
    assert ROW_LABELS == row_labels(COUNTER_TABLE)
    assert FIELDS == trace_fields(COUNTER_TABLE)
    assert "num_emitted_tokens" not in own_named(COUNTER_TABLE)  # each branch names it its way


def test_a_counter_without_an_oracle_rule_is_refused() -> None:
    with pytest.raises(LookupError, match="no rule for \\['num_toy_tokens'"):
        check_rules(TABLE, ORACLE)
    check_rules(COUNTER_TABLE, ORACLE)  # the real table has a rule per counter
    extra = {
        c.name: Rule("a toy rule", lambda row: row.real) for c in (TOY, TOY_PER_POS, TOY_NAMED)
    }
    check_rules(TABLE, {**ORACLE, **extra})
    with pytest.raises(LookupError, match="no counter for \\['num_gone'\\]"):
        check_rules(COUNTER_TABLE, {**ORACLE, "num_gone": Rule("removed", lambda row: 0)})


def test_the_oracle_counts_a_new_counter_by_its_rule() -> None:
    rules = {
        **ORACLE,
        TOY.name: Rule("accepted twice", lambda row: 2 * row.accepted),
        TOY_PER_POS.name: Rule("per position, real drafts", lambda row: row.real),
        TOY_NAMED.name: Rule("emitted", lambda row: row.emitted),
    }
    verifications = [Verification("a", 3, 3, 2, 3), Verification("b", 1, 3, 5, 2)]
    counts = count(verifications, 3, "strict", TABLE, rules)
    assert counts[TOY.name] == 2 * (2 + 1)  # b's accepted prefix is capped at its 1 real draft
    assert counts[TOY_PER_POS.name] == [2, 1, 1]
    assert counts[TOY_NAMED.name] == counts["num_emitted_tokens"] == 5


def _typed_views() -> dict[str, list[tuple[str, str]]]:
    """(field, annotation) of each class the type checker reads in place of a derived model."""
    tree = ast.parse(Path(records.__file__).read_text())
    blocks = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, "records.py declares its typed views in one `if TYPE_CHECKING:` block"
    return {
        cls.name: [
            (ast.unparse(item.target), ast.unparse(item.annotation))
            for item in cls.body
            if isinstance(item, ast.AnnAssign)
        ]
        for cls in blocks[0].body
        if isinstance(cls, ast.ClassDef)
    }


def _declared(counter: Counter) -> tuple[str, str]:
    return (counter.name, "list[StrictInt]" if counter.per_position else "StrictInt")


def _in_order(declared: list[tuple[str, str]], derived: list[tuple[str, str]]) -> bool:
    """Every declared field is a derived one, in the derived order (a new counter may be absent)."""
    names = [name for name, _ in declared]
    return [field for field in derived if field[0] in names] == declared


def test_the_typed_views_mypy_reads_declare_what_the_table_derives() -> None:
    views = _typed_views()
    totals = views["Totals"]
    counters = [_declared(c) for c in COUNTER_TABLE]
    assert _in_order([field for field in totals if field[0] not in AFTER], counters)
    declared = [name for name, _ in totals]
    assert declared == [name for name in Totals.model_fields if name in declared]
    assert declared[-len(AFTER) :] == AFTER
    own = [_declared(c) for c in COUNTER_TABLE if not c.branch_names]
    assert views["StepStats"] and _in_order(views["StepStats"], own)


def test_a_typed_view_that_is_not_what_the_table_derives_is_caught() -> None:
    counters = [_declared(c) for c in COUNTER_TABLE]
    assert _in_order(counters[:2] + counters[3:], counters)  # a counter not declared yet is fine
    assert not _in_order([counters[1], counters[0]], counters)  # out of order
    assert not _in_order([("num_drafts", "list[StrictInt]")], counters)  # the wrong type
    assert not _in_order([("num_gone", "StrictInt")], counters)  # a counter the table lacks

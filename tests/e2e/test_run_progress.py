"""What a piped `difftest run` prints while it works (slow: real vLLM, one branch, both tiers).

A run in a CI log is never silent while a probe imports vLLM, its lines are
never wrapped mid-message, and the scheduler tier's verdicts are printed as
soon as that tier is judged, before the engine tier's probe even starts.
"""

from __future__ import annotations

import pytest

from tests.e2e.cli_helpers import CONTROL, run_cli
from tests.factories import ROOT

pytestmark = pytest.mark.slow

ENGINE_CONTROL = "engine-plain-control"


def test_the_scheduler_verdicts_come_before_the_engine_tier_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    code = run_cli(
        "run",
        "-c",
        ROOT / "branches.yaml",
        "-k",
        f"{CONTROL} or {ENGINE_CONTROL}",
        "--out",
        tmp_path,
        "main",
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    err = captured.err
    early = err.index("scheduler tier verdicts")
    assert err.index("difftest: main scheduler: probe started, importing vLLM") < early
    assert early < err.index("difftest: main engine: probe started, importing vLLM")
    assert CONTROL in err[early : err.index("difftest: main engine")]
    # Progress lines are whole lines, however narrow the terminal is.
    for line in err.splitlines():
        if "runs done" in line:
            assert line.startswith("difftest: main ") and line.endswith(")"), line
    assert "scheduler tier verdicts" not in captured.out  # stdout holds the report only

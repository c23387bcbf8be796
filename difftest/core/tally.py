"""A count of the expensive things a process does, for `bench/suite.py` to see drift.

Set `DIFFTEST_TALLY` to a file and every process (the CLI, the test suite's workers) appends one
JSON line per expensive event: a probe started fresh or forked, a fork server or warm probe started
(each imports vLLM), a tests-tier session, a base or branch environment built, a comparison run.
Unset, it costs one environment lookup. Lines are appended with one `write` on a file opened for
appending, so processes writing at once do not interleave within a line.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

TALLY_ENV = "DIFFTEST_TALLY"

#: Each kind of event, and what it costs.
KINDS = {
    "probe-fresh": "a probe in an interpreter of its own (imports vLLM)",
    "probe-forked": "a probe forked from a warm fork server",
    "fork-server": "a fork server started (imports vLLM)",
    "warm-probe": "a fuzz search's warm probe process started (imports vLLM)",
    "warm-probe-forked": "a fuzz search's warm probe forked from a warm fork server",
    "test-session": "a tests-tier pytest session (imports vLLM in each worker)",
    "base-build": "a base environment built",
    "branch-build": "a branch environment built",
    "run": "a comparison of branches over tiers (run, gate, verify, blame's measurements)",
}


def count(kind: str, **detail: Any) -> None:
    """Record one event of `kind` (one of `KINDS`) where `DIFFTEST_TALLY` points, if it is set."""
    target = os.environ.get(TALLY_ENV)
    if not target:
        return
    if kind not in KINDS:
        raise ValueError(f"unknown tally kind {kind!r}; one of {sorted(KINDS)}")
    # Under pytest, the test that paid for it (`bench/suite.py` shows which tests repeat work).
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    line = json.dumps({"kind": kind, **detail, **({"test": test} if test else {})}) + "\n"
    with open(target, "a", encoding="utf-8") as stream:
        stream.write(line)


def read_tally(path: Path) -> Counter[str]:
    """How many events of each kind the file holds (an absent file holds none)."""
    if not path.exists():
        return Counter()
    found: Counter[str] = Counter()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            found[json.loads(line)["kind"]] += 1
    return found

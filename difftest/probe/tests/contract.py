"""What the host and the tests tier's pytest plugin agree on: environment variables and labels.

Standard library only, no pytest: the host imports it to start sessions and to
read their results, the plugin (`plugin.py`) to act on them.
"""

from __future__ import annotations

#: Set per gateway (`//env:DIFFTEST_CODE=<branch>`): which branch's code a worker runs.
CODE_ENV = "DIFFTEST_CODE"
#: Folder the controller writes `progress.jsonl` and `workers.json` into; its presence turns the
#: plugin on.
OUT_ENV = "DIFFTEST_SUITE_OUT"
#: JSON list of the node ids of grafted test modules that may run.
GRAFTS_ENV = "DIFFTEST_SUITE_GRAFTS"
#: JSON of the job's `trace` entry (`probe.tracing`): each worker traces those files from its start
#: and hands what it executed to the controller, which writes it into `workers.json`.
TRACE_ENV = "DIFFTEST_SUITE_TRACE"
#: For difftest's own tests only: leave the controller's sys.path in the workers (the xdist
#: default).
INHERIT_PATH_ENV = "DIFFTEST_SUITE_INHERIT_PATH"
#: Prefix of a worker's collection errors and skips: `[difftest code=<branch> node=<node id>] `.
LABEL = "[difftest code={} node={}] "
#: The JUnit properties the controller adds to every test case.
CODE_PROPERTY = "difftest_code"
NODEID_PROPERTY = "difftest_nodeid"
#: Marks grafted copies of a branch's test modules (`test_x__difftest1.py`).
GRAFT_MARK = "__difftest"

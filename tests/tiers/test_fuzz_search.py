"""The fuzz search on a real branch: same seed, same findings (slow: real vLLM).

Both searches use one warm probe but examine every scenario afresh (a new
examiner, an empty cache), so the probe's answers themselves must repeat: the findings, and when
each changed line of the branch was first reached (every job traced, as `fuzz` traces them).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from difftest.run.coverage.tracing_job import plan_tracing
from difftest.run.fuzz.campaign import Examiner, Prober, fuzzable_tier
from difftest.run.fuzz.reach import FuzzReach
from difftest.run.fuzz.search import search
from difftest.run.fuzz.warm_probe import WarmProbe, WarmProbeLimits

pytestmark = pytest.mark.slow
BRANCH = "pr-56195-style"


def test_same_seed_same_findings_on_a_real_branch(workspace, tmp_path) -> None:
    tier = fuzzable_tier()
    python = workspace.branch(BRANCH).env.python
    found = []
    reached = []
    plan = plan_tracing(workspace, lambda _m: None)
    for attempt in range(2):
        # A warm probe per search, as each `difftest fuzz` starts its own (the first search's
        # first job would otherwise be the only one to run the modules' import).
        with (
            WarmProbe(
                BRANCH, python, tier.name, tmp_path / str(attempt), WarmProbeLimits(600, 120)
            ) as server,
            ThreadPoolExecutor(1) as pool,
        ):
            prober = Prober({BRANCH: server}, pool, plan)
            reach = FuzzReach(workspace, "main", plan, tier.name)
            assert prober.warm_up(tier, reach) == {}
            examiner = Examiner(tier, prober, [BRANCH], None, "strict", 120, BRANCH, reach)
            result = search(tier.fuzz_strategy(), examiner.examine, seed_value=0, examples=100)
            found.append([(f.value, f.kinds) for f in result.found])
            reached.append([(r.file, r.line, r.example) for r in reach.first_reached()])
            standing = next(b for b in reach.evidence().branches if b.branch == BRANCH)
            assert standing.status in ("verified", "not verified"), standing
            # What `--guide` climbs: how much of the branch's changed code each example ran.
            assert max(examiner.scores.values()) > min(examiner.scores.values()) >= 0
            # Nearly every one of the 100 examples reaches the probe (an example drawn twice is
            # answered from memory), plus the shrinking of what it finds.
            assert examiner.probed >= 90 + len(result.found)
            assert server.starts == 1
    assert found[0], "seed 0 finds pr-56195-style's lost stats"
    assert found[0] == found[1]
    assert reached[0], "the search runs pr-56195-style's changed lines in the scheduler"
    assert reached[0] == reached[1]

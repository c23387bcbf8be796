"""The suite's `xdist_group` marks keep a group on one worker, so its session fixtures run once.

The expensive fixtures (a shipped run, each fault-kit path, the Ray cluster) are shared by the tests
of one group; if xdist split a group, each worker would run them again. pytest 9.2 with
pytest-xdist 3.8 did exactly that, silently (pyproject pins pytest below 9.2): this runs a small
grouped suite on two real workers and counts the fixture's set-ups.
"""

from __future__ import annotations

pytest_plugins = ["pytester"]

GROUPED = """
import os
import pytest

@pytest.fixture(scope="session", params=["a", "b"])
def shared(request):
    with open(os.environ["SETUPS"], "a") as log:
        log.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    return request.param

@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("n", range(4))
def test_grouped(shared, n):
    pass

@pytest.mark.parametrize("n", range(6))
def test_free(n):
    pass
"""


def test_a_group_and_its_session_fixture_stay_on_one_worker(pytester, monkeypatch) -> None:
    setups = pytester.path / "setups.txt"
    monkeypatch.setenv("SETUPS", str(setups))
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=14)
    workers = setups.read_text().split()
    assert len(workers) == 2 and len(set(workers)) == 1, (
        f"the group was split over workers {workers}: each set its fixture up again"
    )

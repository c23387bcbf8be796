"""`run.coverage.reach`: a stats-path file's statements, functions and one-way branch points
from what the probes executed (coverage.py's parser on a real file; the executed lines given here
as the probe reports them, tests/e2e/test_coverage_cli.py traces them for real)."""

from __future__ import annotations

import pytest

from difftest.core.stats_path import unreached_reason
from difftest.reports.coverage_view import page_name
from difftest.run.coverage.changed import Executed
from difftest.run.coverage.reach import NO_SCENARIO, reach_of, stats_path_files

pytestmark = pytest.mark.quick

FILE = "vllm/v1/core/sched/example.py"
SOURCE = (
    "class Sched:\n"  # 1
    "    def step(self, n):\n"  # 2
    "        if n:\n"  # 3
    "            n += 1\n"  # 4
    "        def inner():\n"  # 5
    "            return n\n"  # 6
    "        return n\n"  # 7
    "\n"  # 8
    "def never():\n"  # 9
    "    return 0\n"  # 10
)


def _tree(tmp_path):
    path = tmp_path / FILE
    path.parent.mkdir(parents=True)
    path.write_text(SOURCE)
    (tmp_path / "vllm/v1/sample").mkdir(parents=True)
    (tmp_path / "vllm/v1/sample/x.py").write_text("X = 1\n")
    (tmp_path / "vllm/other.py").write_text("Y = 1\n")
    return tmp_path / "vllm"


def test_statements_functions_and_branch_points_taken_one_way(tmp_path):
    root = _tree(tmp_path)
    assert stats_path_files(root) == [FILE, "vllm/v1/sample/x.py"]
    executed = Executed(
        lines={FILE: {1, 2, 3, 4, 5, 7, 9}},
        arcs={FILE: {(-2, 3), (3, 4), (4, 5), (5, 7), (7, -2)}},
        traced_probes=1,
    )
    (reach, untouched) = reach_of(root, executed, [FILE, "vllm/v1/sample/x.py"])
    assert reach.statements == 9 and reach.reached == [1, 2, 3, 4, 5, 7, 9]
    assert reach.unreached == [6, 10] and reach.part == "vllm/v1/core/"
    # `if n:` never went straight to line 5.
    assert reach.partial == [(3, 5)]
    functions = {f.name: (f.statements, f.reached) for f in reach.functions}
    assert functions == {"Sched.step": (4, 4), "Sched.step.inner": (1, 0), "never": (1, 0)}
    assert reach.reason == NO_SCENARIO and reach.imported
    assert not untouched.imported and untouched.reason == NO_SCENARIO


def test_a_file_that_does_not_parse_is_named_not_counted(tmp_path):
    root = _tree(tmp_path)
    (root.parent / FILE).write_text("def broken(:\n")
    (reach,) = reach_of(root, Executed(), [FILE])
    assert reach.problem.startswith("does not parse") and reach.statements == 0


def test_the_most_specific_reason_names_why():
    assert unreached_reason("vllm/v1/worker/xpu_worker.py") == "GPU-only: Intel XPU only"
    assert unreached_reason("vllm/distributed/kv_transfer/kv_connector/v1/nixl/x.py").startswith(
        "condition not modelled: vLLM's own KV connectors"
    )
    assert unreached_reason("vllm/v1/core/sched/scheduler.py") == ""


NESTED = (
    "import os\n"  # 1
    "if os.sep:\n"  # 2
    "    def under_if():\n"  # 3
    "        return 1\n"  # 4
    "class K:\n"  # 5
    "    if True:\n"  # 6
    "        def method(self):\n"  # 7
    "            if self:\n"  # 8
    "                def closure():\n"  # 9
    "                    return 2\n"  # 10
    "            return 3\n"  # 11
    "def one(): return 4\n"  # 12
)


def test_functions_under_an_if_a_class_or_another_function_are_each_counted_once(tmp_path):
    """#48 review: a function defined under a module-level `if`, a method under a class-level
    `if`, a closure under an `if` are all listed, each statement counted in one function only,
    and a one-line function is not reached by its import alone."""
    root = _tree(tmp_path)
    (root.parent / FILE).write_text(NESTED)
    executed = Executed(lines={FILE: {1, 2, 3, 5, 6, 7, 12}}, traced_probes=1)
    (reach,) = reach_of(root, executed, [FILE])
    functions = {f.name: (f.statements, f.reached) for f in reach.functions}
    assert functions == {
        "under_if": (1, 0),
        "K.method": (3, 0),
        "K.method.closure": (1, 0),
        "one": (0, 0),
    }


def test_a_file_that_cannot_be_read_is_named_and_pages_never_collide(tmp_path):
    root = _tree(tmp_path)
    (root.parent / FILE).unlink()
    (root.parent / FILE).mkdir()  # reading it fails, as an unreadable file would
    (reach,) = reach_of(root, Executed(), [FILE])
    assert reach.problem.startswith("could not be read")
    names = [
        "vllm/v1/worker/cpu/model_runner.py",
        "vllm/v1/worker/cpu_model_runner.py",
        "vllm/v1/worker/gpu/input_batch.py",
        "vllm/v1/worker/gpu_input_batch.py",
    ]
    assert len({page_name(n) for n in names}) == len(names)

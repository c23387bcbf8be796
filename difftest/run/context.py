"""One comparison's shared facts, passed as one object instead of through every signature.

Where the run logs, how it shows progress, which oracle reading and baseline
it judges by, where its files go, the result cache and how probes start: the
pipeline builds a `RunContext` once, and everything that measures branches
reads what it needs from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from difftest.build.workspace import Workspace
from difftest.core.config import Config, Timeouts
from difftest.core.records import Reading
from difftest.run.cache.results import ResultCache
from difftest.run.cluster.executor import RayExecutor
from difftest.run.coverage.tracing_job import TracePlan
from difftest.run.probes.runner import Progress

Log = Callable[[str], None]
#: (tier name, branch names) -> a context manager yielding that tier's progress callback.
ProgressFactory = Callable[[str, list[str]], AbstractContextManager[Progress | None]]


def quiet(_message: str) -> None:
    """The default log: says nothing."""


def no_progress(_tier: str, _branches: list[str]) -> AbstractContextManager[Progress | None]:
    """The default progress: shows nothing."""
    return nullcontext(None)


@dataclass(frozen=True)
class RunContext:
    """What every step that measures branches in one comparison shares."""

    workspace: Workspace
    #: The branch crashes and hangs are judged against (`default_baseline`).
    baseline: str
    #: The oracle reading verdicts are judged by.
    reading: Reading = "strict"
    #: `--out`: probe files go to `<out>/probe/`, a suite tier's sessions to `<out>/<tier>/`.
    out: Path = Path("out")
    log: Log = quiet
    progress: ProgressFactory = no_progress
    cache: ResultCache | None = None
    #: Branch probes at once; None: each tier's default.
    jobs: int | None = None
    #: Fork probes from one warm interpreter per tier (`run.probes.forking`).
    fork: bool = False
    #: Run the probes on a Ray cluster instead of this machine (`run.cluster`, `--executor ray`).
    cluster: RayExecutor | None = None
    #: What every probe job traces (`run.coverage.tracing_job`); None: nothing is traced.
    trace: TracePlan | None = None
    #: For difftest's own tests of the tests tier only (see `run.suites.measure.run_session`).
    suite_args: tuple[str, ...] = field(default=())
    inherit_controller_path: bool = False

    @property
    def timeouts(self) -> Timeouts:
        return self.workspace.config.timeouts

    @property
    def setup_errors(self) -> Mapping[str, str | None]:
        """Every compared branch -> why it has no environment (None: it has one)."""
        return {b.name: b.error for b in self.workspace.branches}

    @property
    def probe_dir(self) -> Path:
        return self.out / "probe"


def default_baseline(workspace: Workspace, wanted: str | None = None) -> str:
    """The requested baseline, else the config's, if it is among the compared branches; else the
    first."""
    return baseline_among([b.name for b in workspace.branches], workspace.config, wanted)


def baseline_among(names: list[str], config: Config, wanted: str | None = None) -> str:
    """`default_baseline` for branch names not built yet."""
    for name in (wanted, config.baseline):
        if name in names:
            return name
    return names[0]

"""The scheduler tier's session: vLLM imported once, one config per (k, draft path), a fresh
Scheduler per run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..protocol import Job, JobScenario, PlannedRun, RunResult, vllm_imported


def prebuild(job: Job, fresh: bool) -> Path:
    """The model folder every probe of `job` reads, built before they run (`probe.prebuild`);
    `fresh`: one already there is removed first."""
    import shutil

    from .model_dir import ensure_model_dir, recipe_key

    if fresh:
        shutil.rmtree(Path(job["work_dir"]) / f"model-{recipe_key()}", ignore_errors=True)
    return ensure_model_dir(Path(job["work_dir"]))


class SchedulerSession:
    def __init__(self, job: Job) -> None:
        started = time.perf_counter()
        import dataclasses

        import vllm

        vllm_imported()  # before anything else: the fork server's child checks its environment here
        from vllm.v1.spec_decode.metrics import SpecDecodingStats

        from .driver import HAS_SKIP_FLAG
        from .factory import SchedulerFactory
        from .model_dir import ensure_model_dir

        self.import_s = time.perf_counter() - started
        self.vllm = vllm
        self.stats_fields = [f.name for f in dataclasses.fields(SpecDecodingStats)]
        self.skip_flag = HAS_SKIP_FLAG
        self.factory = SchedulerFactory(ensure_model_dir(Path(job["work_dir"])))
        # The first construction inspects the model: keep it out of run timings.
        self.factory.model_config()

    def header_info(self) -> dict[str, Any]:
        return {
            "import_s": self.import_s,
            "vllm_version": getattr(self.vllm, "__version__", None),
            "vllm_file": self.vllm.__file__,
            "spec_decoding_stats_fields": self.stats_fields,
            #: Whether the branch's DraftTokenIds carries the runner's "drafting skipped" flag.
            "draft_token_ids_skip_flag": self.skip_flag,
        }

    def play(self, scenario: JobScenario, run: PlannedRun) -> RunResult:
        from .driver import run_order

        return run_order(self.factory, scenario["data"], list(run["order"]))


def start(job: Job) -> SchedulerSession:
    return SchedulerSession(job)

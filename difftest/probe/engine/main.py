"""The engine tier's session: build the tiny model (or take the scenario's), start ONE engine,
play each planned run on it.

One `LLM` per process (a second one fails on CPU), so every engine scenario of
a job shares one engine configuration: `engine_config` refuses a job whose
scenarios disagree, and a session that cannot start makes the probe exit 3
(nothing could be measured).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from ..protocol import Job, JobScenario, PlannedRun, RunResult, vllm_imported


def prebuild(job: Job, fresh: bool) -> Path:
    """The model folder every probe of `job` reads (the scenarios' own, or the tiny model built
    before they run, `probe.prebuild`); `fresh`: a tiny model already there is removed first."""
    import shutil

    from .tiny_model import ensure_tiny_model, recipe_key

    # Read without `session.engine_config` (which imports vLLM): the probe checks the rest.
    named = {str(s["data"].get("engine", {}).get("model") or "") for s in job["scenarios"]}
    if named - {""}:
        return Path(sorted(named - {""})[0])
    if fresh:
        shutil.rmtree(Path(job["work_dir"]) / f"tiny-llama-{recipe_key()}", ignore_errors=True)
    return ensure_tiny_model(Path(job["work_dir"]))


class EngineTierSession:
    def __init__(self, job: Job) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        started = time.perf_counter()
        import vllm

        vllm_imported()  # before anything else: the fork server's child checks its environment here

        from .session import EngineSession, engine_config
        from .tiny_model import ensure_tiny_model, manifest

        self.import_s = time.perf_counter() - started
        self.vllm = vllm
        self.cfg = engine_config([s["data"] for s in job["scenarios"]])
        t1 = time.perf_counter()
        if self.cfg.get("model"):
            self.model_dir = Path(self.cfg["model"])
            self.model = _model_identity(self.model_dir)
        else:
            self.model_dir = ensure_tiny_model(Path(job["work_dir"]))
            self.model = manifest(self.model_dir)
        self.model_build_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        self.session = EngineSession(self.model_dir, self.cfg)
        self.engine_load_s = time.perf_counter() - t2
        #: Per scenario: the cuts its reference runs chose, and its primed prompts.
        self.state: dict[str, dict[str, Any]] = {}

    def header_info(self) -> dict[str, Any]:
        return {
            "import_s": self.import_s,
            "vllm_version": getattr(self.vllm, "__version__", None),
            "vllm_file": self.vllm.__file__,
            "engine_config": self.cfg,
            #: What the engine really runs with (e.g. the CPU backend's block size, the KV pool).
            "engine_settings": self.session.settings,
            "model": self.model,
            "tokenizer_eos": self.session.tokenizer_eos,
            "model_build_s": round(self.model_build_s, 3),
            "engine_load_s": round(self.engine_load_s, 3),
            #: Whether the model runner's drafter-skip decision could be observed (engine oracle
            #: needs it).
            "runner_skip_observed": self.session.runner_tap.available,
        }

    def play(self, scenario: JobScenario, run: PlannedRun) -> RunResult:
        from .driver import run_one

        return run_one(
            self.session, scenario["data"], dict(run), self.state.setdefault(scenario["name"], {})
        )


def start(job: Job) -> EngineTierSession:
    return EngineTierSession(job)


def _model_identity(model_dir: Path) -> dict[str, Any]:
    """A user's model folder: its path and the hash of its config (weights are not re-hashed)."""
    config = model_dir / "config.json"
    return {
        "path": str(model_dir),
        "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest(),
    }

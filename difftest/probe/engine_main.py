"""The engine tier's probe process: build the tiny model, start ONE engine, play every scenario.

Called from `python -m difftest.probe` when `job["tier"] == "engine"`. Writes
the same JSONL as the scheduler probe: a header (with the import, model build
and engine load times, so `bench/engine.py` can show where time goes), then one
flushed line per run; a failing run becomes an error run with its traceback.
A job whose scenarios disagree on the engine config, or an engine that cannot
be built, exits 3 with the traceback on stderr (nothing can be measured).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from .time_limit import time_limit

Writer = Callable[[TextIO, dict[str, Any]], None]
ErrorRun = Callable[..., dict[str, Any]]


def main(job: dict[str, Any], out_path: Path, write: Writer, error_run: ErrorRun) -> int:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    work_dir = Path(job["work_dir"])
    scenarios = []
    for entry in job.get("scenarios", []):
        data = dict(entry.get("data") or {})
        data.setdefault("name", entry.get("name", "?"))
        scenarios.append(data)
    t0 = time.perf_counter()
    try:
        from .engine_driver import EngineSession, engine_config, run_one
        from .tiny_model import ensure_tiny_model, manifest

        cfg = engine_config(scenarios)
        import vllm
    except Exception:
        traceback.print_exc()
        return 3
    import_s = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        model_dir = Path(cfg["model"]) if cfg.get("model") else ensure_tiny_model(work_dir)
        model_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        session = EngineSession(model_dir, cfg)
        load_s = time.perf_counter() - t2
    except Exception:
        traceback.print_exc()
        return 3

    with out_path.open("w") as out:
        write(
            out,
            {
                "kind": "header",
                "tier": "engine",
                "vllm_version": getattr(vllm, "__version__", None),
                "vllm_file": vllm.__file__,
                "python": sys.version.split()[0],
                "engine_config": cfg,
                "model": manifest(model_dir) if not cfg.get("model") else _model_identity(model_dir),
                "tokenizer_eos": session.tokenizer_eos,
                "import_s": round(import_s, 3),
                "model_build_s": round(model_s, 3),
                "engine_load_s": round(load_s, 3),
                "setup_s": round(model_s + load_s, 3),
            },
        )
        for scenario in scenarios:
            cuts: dict[str, dict[str, Any]] = {}
            for run in scenario.get("runs") or []:
                started = time.perf_counter()
                try:
                    with time_limit(job.get("run_timeout_s")):
                        record = run_one(session, scenario, run, cuts)
                    write(out, {"kind": "run", **record})
                except Exception:
                    write(out, error_run(scenario["name"], run, started, "engine"))
    return 0


def _model_identity(model_dir: Path) -> dict[str, Any]:
    """A user's model folder: its path and the hash of its config (weights are not re-hashed)."""
    import hashlib

    config = model_dir / "config.json"
    return {"path": str(model_dir), "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest()}

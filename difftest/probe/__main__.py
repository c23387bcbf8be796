"""`python -m difftest.probe --job JOB.json --out RUNS.jsonl`: one branch, one process, every scenario.

Runs inside a branch environment. Environment defaults are set before vLLM is
imported; a failed import of vLLM exits non-zero with the traceback on stderr.
Each run is written and flushed as soon as it ends, so a probe killed on
timeout still leaves everything it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from .time_limit import RunTimeout, time_limit


def _set_env(work_dir: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(work_dir / "vllm-cache"))
    os.environ.setdefault("HF_HOME", str(work_dir / "hf-home"))


def _runs_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs the outer layer planned (`data["runs"]`), or: listed order, then each request alone."""
    if data.get("runs"):
        return data["runs"]
    ids = [r["id"] for r in data["requests"]]
    runs = [{"label": "order:" + ",".join(ids), "order": ids}]
    if len(ids) > 1:
        runs += [{"label": f"alone:{rid}", "order": [rid]} for rid in ids]
    return runs


def _write(out: TextIO, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def _error_run(name: str, run: dict[str, Any], started: float, tier: str = "scheduler") -> dict[str, Any]:
    return {
        "kind": "run",
        "scenario": name,
        "tier": tier,
        "order": list(run.get("order") or []),
        "label": run.get("label", "?"),
        "status": "timeout" if isinstance(sys.exc_info()[1], RunTimeout) else "error",
        "error": traceback.format_exc(),
        "duration_s": round(time.perf_counter() - started, 6),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m difftest.probe")
    parser.add_argument("--job", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    if job.get("tier") == "engine":
        from .engine_main import main as engine_main

        _set_env(Path(job["work_dir"]))
        return engine_main(job, args.out, _write, _error_run)
    if job.get("tier", "scheduler") != "scheduler":
        print(f"difftest.probe: tier {job.get('tier')!r} is not handled by this probe", file=sys.stderr)
        return 2
    work_dir = Path(job["work_dir"])
    _set_env(work_dir)

    t0 = time.perf_counter()
    try:
        import dataclasses

        import vllm
        from vllm.v1.spec_decode.metrics import SpecDecodingStats

        from .driver import run_order
        from .factory import SchedulerFactory
        from .model_dir import ensure_model_dir
    except Exception:
        traceback.print_exc()
        return 3
    import_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    try:
        factory = SchedulerFactory(ensure_model_dir(work_dir))
        factory.model_config()  # first construction inspects the model: keep it out of run timings
    except Exception:
        traceback.print_exc()
        return 3
    setup_s = time.perf_counter() - t1

    with args.out.open("w") as out:
        _write(
            out,
            {
                "kind": "header",
                "vllm_version": getattr(vllm, "__version__", None),
                "vllm_file": vllm.__file__,
                "python": sys.version.split()[0],
                "spec_decoding_stats_fields": [f.name for f in dataclasses.fields(SpecDecodingStats)],
                "import_s": round(import_s, 3),
                "setup_s": round(setup_s, 3),
            },
        )
        for entry in job.get("scenarios", []):
            name = entry.get("name") or entry.get("data", {}).get("name", "?")
            data = dict(entry.get("data") or {})
            data.setdefault("name", name)
            try:
                runs = _runs_of(data)
            except Exception:
                _write(out, _error_run(name, {"label": "plan"}, time.perf_counter()))
                continue
            for run in runs:
                started = time.perf_counter()
                try:
                    with time_limit(job.get("run_timeout_s")):
                        record = run_order(factory, data, list(run["order"]), run["label"])
                    _write(out, {"kind": "run", **record})
                except Exception:
                    _write(out, _error_run(name, run, started))
    return 0


if __name__ == "__main__":
    sys.exit(main())

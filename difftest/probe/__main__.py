"""`python -m difftest.probe --job JOB.json --out RUNS.jsonl`: one branch, one tier, every planned run.

Runs inside a branch environment. The nonce is taken from the environment
first, then environment defaults are set, then the tier's entry starts its
session (which imports vLLM) and `protocol.serve` plays every run.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from . import protocol

#: Probe entries by name (a host tier names its entry): module with `start(job) -> Session`.
ENTRIES = {
    "scheduler": "difftest.probe.scheduler.main",
    "engine": "difftest.probe.engine.main",
}


def _set_env(work_dir: Path) -> None:
    """Offline, in-process defaults, for a probe started by hand as well as by the host."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(work_dir / "vllm-cache"))
    os.environ.setdefault("HF_HOME", str(work_dir / "hf-home"))


def main(argv: list[str] | None = None) -> int:
    nonce = protocol.take_nonce()
    protocol.die_with_host()
    parser = argparse.ArgumentParser(prog="python -m difftest.probe")
    parser.add_argument("--job", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        job = protocol.read_job(args.job)
    except (OSError, ValueError) as exc:
        print(f"difftest.probe: cannot read the job {args.job}: {exc}", file=sys.stderr)
        return 2
    entry = ENTRIES.get(job.get("entry", ""))
    if entry is None:
        print(f"difftest.probe: no probe entry {job.get('entry')!r} (entries: {sorted(ENTRIES)})", file=sys.stderr)
        return 2
    _set_env(Path(job["work_dir"]))
    start = importlib.import_module(entry).start
    return protocol.serve(job, args.out, nonce, start)


if __name__ == "__main__":
    sys.exit(main())

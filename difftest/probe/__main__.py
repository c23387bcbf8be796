"""`python -m difftest.probe --job JOB.json --out RUNS.jsonl`: one branch, one tier, every
planned run.
`python -m difftest.probe --serve`: the same, job after job (one per line on stdin, answers
on stdout).

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

from . import confine, protocol

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


def _start(job: protocol.Job) -> protocol.Session:
    """The session of the job's entry (the entry was checked by `_entry`)."""
    _set_env(Path(job["work_dir"]))
    return importlib.import_module(ENTRIES[job["entry"]]).start(job)


def _entry_error(job: protocol.Job) -> str | None:
    if job.get("entry", "") in ENTRIES:
        return None
    return f"difftest.probe: no probe entry {job.get('entry')!r} (entries: {sorted(ENTRIES)})"


def _checked_start(job: protocol.Job) -> protocol.Session:
    problem = _entry_error(job)
    if problem:
        raise ValueError(problem)
    return _start(job)


def _serve(nonce: str) -> int:
    """Answer on a private copy of stdout; everything else written to stdout (vLLM's own logging
    goes there) is sent to stderr, so only the probe's records reach the host's channel.

    Once the input ends, every answer has been written and flushed: the process leaves at once
    instead of tearing down torch and vLLM (seconds on a busy machine, for nothing)."""
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)
    with channel:
        code = protocol.serve_stream(sys.stdin, channel, nonce, _checked_start)
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    nonce = protocol.take_nonce()
    records_fd = protocol.take_records_fd()
    protocol.die_with_host()
    confine.hide_memory()
    protocol.dump_stacks_on_signal()
    parser = argparse.ArgumentParser(prog="python -m difftest.probe")
    parser.add_argument("--job", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--serve", action="store_true", help="play jobs read one per line on stdin")
    args = parser.parse_args(argv)
    if args.serve:
        return _serve(nonce)
    out: Path | int | None = args.out if args.out is not None else records_fd
    if args.job is None or out is None:
        parser.error("--job and --out are required (or --serve)")
    try:
        job = protocol.read_job(args.job)
    except (OSError, ValueError) as exc:
        print(f"difftest.probe: cannot read the job {args.job}: {exc}", file=sys.stderr)
        return 2
    problem = _entry_error(job)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    return protocol.serve(job, out, nonce, _start)


if __name__ == "__main__":
    protocol.finish(main())

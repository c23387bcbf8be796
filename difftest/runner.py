"""Running the probe inside each branch environment, in parallel, with a timeout.

One interpreter start per branch and tier: importing vLLM costs ~12 s and
dominates everything else, so every scenario of a tier runs in that one process.
Branches run concurrently as separate processes; a thread per branch only waits
on its process, so a plain thread pool is enough (pytest-xdist would need
execnet and pytest inside every branch interpreter for no gain). The probe
flushes one JSON line per run, so a crash or a hang loses only the runs it had
not finished, and those are reported as could-not-measure, never as a pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftest import paths
from difftest.results import ProbeRun

#: (branch, finished runs, expected runs, scenario and label of the last finished run)
Progress = Callable[[str, int, int, str, str], None]

_CAPTURE_TAIL = 40


@dataclass
class BranchRun:
    """What one branch's probe process delivered."""

    branch: str
    tier: str
    header: dict[str, Any] | None = None
    runs: list[ProbeRun] = field(default_factory=list)
    #: Why the process as a whole failed (import error, crash, timeout); None if it exited cleanly.
    error: str | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    #: Wall-clock start and end (epoch seconds): shows which branches overlapped.
    started_at: float = 0.0
    ended_at: float = 0.0
    log_path: Path | None = None


def probe_environ(parallel: int = 1) -> dict[str, str]:
    """The probe's environment: offline, in-process, caches inside difftest's home.

    Probes running side by side share the cores instead of each starting one
    torch thread per core (oversubscribed, three engines took longer together
    than one after another).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    threads = str(max(1, (os.cpu_count() or 1) // max(1, parallel)))
    env.setdefault("OMP_NUM_THREADS", threads)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind" if parallel > 1 else "auto")
    cache = paths.vllm_cache_dir()
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(cache / "hf"),
        VLLM_CACHE_ROOT=str(cache),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_CPU_KVCACHE_SPACE="1",
        TOKENIZERS_PARALLELISM="false",
        # The base is shared by every branch: nothing may write bytecode into it.
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def run_probe(
    branch: str,
    python: Path,
    job: dict[str, Any],
    work_dir: Path,
    timeout_s: float,
    expected_runs: int,
    progress: Progress | None = None,
    parallel: int = 1,
) -> BranchRun:
    """Run `python -m difftest.probe` on one job; never raises for the branch's own failures."""
    work_dir.mkdir(parents=True, exist_ok=True)
    tier = job["tier"]
    job_path = work_dir / f"{branch}-{tier}-job.json"
    out_path = work_dir / f"{branch}-{tier}-runs.jsonl"
    log_path = work_dir / f"{branch}-{tier}-probe.log"
    job_path.write_text(json.dumps(job, indent=1))
    out_path.unlink(missing_ok=True)
    result = BranchRun(branch=branch, tier=tier, log_path=log_path, started_at=time.time())
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(python), "-m", "difftest.probe", "--job", str(job_path), "--out", str(out_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=probe_environ(parallel),
            start_new_session=True,
        )
        seen = 0
        while proc.poll() is None:
            if time.monotonic() - started > timeout_s:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                result.timed_out = True
                break
            seen = _report_progress(out_path, branch, seen, expected_runs, progress)
            time.sleep(0.2)
        _report_progress(out_path, branch, seen, expected_runs, progress)
    result.duration_s = round(time.monotonic() - started, 2)
    result.ended_at = time.time()
    result.header, result.runs = read_runs(out_path)
    if result.timed_out:
        result.error = f"probe timed out after {timeout_s:.0f} s (raise `timeouts.probe_s` if the branch is just slow)"
    elif proc.returncode != 0:
        result.error = f"probe exited with code {proc.returncode}:\n{_tail(log_path)}"
    return result


def read_runs(path: Path) -> tuple[dict[str, Any] | None, list[ProbeRun]]:
    """Parse RUNS.jsonl; a torn last line (killed mid-write) is ignored."""
    header, runs = None, []
    if not path.exists():
        return header, runs
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        kind = record.pop("kind", None)
        if kind == "header":
            header = record
        elif kind == "run":
            runs.append(ProbeRun.model_validate(record))
    return header, runs


def run_branches(
    targets: list[tuple[str, Path]],
    job: dict[str, Any],
    work_dir: Path,
    timeout_s: float,
    expected_runs: int,
    jobs: int,
    progress: Progress | None = None,
) -> dict[str, BranchRun]:
    """Probe every (branch, interpreter) concurrently; results keyed by branch name."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            name: pool.submit(
                run_probe, name, python, job, work_dir, timeout_s, expected_runs, progress, min(jobs, len(targets))
            )
            for name, python in targets
        }
        return {name: future.result() for name, future in futures.items()}


def _report_progress(out_path: Path, branch: str, seen: int, total: int, progress: Progress | None) -> int:
    if progress is None or not out_path.exists():
        return seen
    lines = out_path.read_text().splitlines()
    runs = [line for line in lines if '"kind": "run"' in line or '"kind":"run"' in line]
    if len(runs) != seen:
        try:
            last = json.loads(runs[-1])
        except ValueError:
            last = {}
        progress(branch, len(runs), total, last.get("scenario", ""), last.get("label", ""))
    return len(runs)


def _tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-_CAPTURE_TAIL:])

"""What the end-to-end tests share: running the CLI on a config and reading what it wrote."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from difftest.cli import main
from tests.factories import shipped_branch, write_config

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
METRICS = "vllm/v1/spec_decode/metrics.py"
#: A scheduler scenario every branch passes (EOS on the bonus token): fast, 4 runs.
CONTROL = "eos-on-bonus"
#: A line of the Scheduler's __init__ after which planted faults go.
INIT_MARKER = "        self.vllm_config = vllm_config\n"


def results_of(out: Path) -> list[dict]:
    return json.loads((out / "evidence.json").read_text())["results"]


def by_branch(out: Path, branch: str) -> list[dict]:
    return [r for r in results_of(out) if r["branch"] == branch]


def run_cli(*args: str) -> int:
    return main([str(a) for a in args])


def control_beside_main(config: Path, out: Path, *extra: str) -> int:
    """`run -k CONTROL --tier scheduler` on a config holding main and one faulty branch."""
    return run_cli("run", "-c", config, "--tier", "scheduler", "-k", CONTROL, "--out", out, *extra)


def assert_main_intact(out: Path) -> None:
    """main's results survived the other branch's failure, and every report was written."""
    assert {r["verdict"] for r in by_branch(out, "main")} == {"pass"}
    for name in ("report.md", "report.html", "junit.xml", "evidence.json"):
        assert (out / name).stat().st_size > 0


def faulty_config(tmp_path: Path, name: str, patch: Path, **extra) -> Path:
    """A config with main and one branch `name` = main plus `patch`."""
    return write_config(
        tmp_path,
        [shipped_branch("main"), {"name": name, "ref": "main", "patches": [str(patch)]}],
        **extra,
    )


@contextlib.contextmanager
def capture_stderr() -> Iterator[io.StringIO]:
    """difftest's log (stderr), captured in a module-scoped fixture where capsys is not
    available."""
    from difftest import cli

    buffer = io.StringIO()
    cli.console.file = buffer
    try:
        yield buffer
    finally:
        cli.console._file = (
            None  # back to following sys.stderr (pytest's capture changes it per test)
        )


def interrupted_when(argv: list[str], said: str, wait_s: float = 30) -> tuple[int, str]:
    """`difftest ARGV` as a process, Ctrl-C (SIGINT) once a line of its log holds `said`: its exit
    code and the log after that line (an AssertionError if it never says it, or hangs)."""
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "difftest"), *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if said in line:
            break
    else:
        raise AssertionError(f"difftest never said {said!r}:\n" + "".join(seen))
    process.send_signal(signal.SIGINT)
    try:
        rest = process.stderr.read()
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"difftest had not exited {wait_s} s after Ctrl-C") from None
    return process.returncode, rest

"""The fault kit: hostile branch patches, each with the contract difftest must keep against it.

Each `Fault` is a real patch on the fixture repository (vLLM 0.32.0's sources),
written by `patch(tmp, repo)`, and `expect` names the verdicts its runs must
read next to `main`. `tests/faults/test_fault_kit.py` runs every fault through
every path a verdict can come by (fresh probes, forked probes, a result cache
written then reused, shards merged) and checks the same contract on each:
the verdicts, the exit code, main intact, every report whole, no process left.
A new path to a verdict is not done until it is in that matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.cli_helpers import INIT_MARKER, METRICS, SCHEDULER
from tests.patching import insert_after, prepend, symlink_patch

#: The environment variable the `env-count` fault's counting reads (vLLM's prefix: it reaches
#: probes).
SKEW_ENV = "VLLM_DIFFTEST_FAULT_SKEW"


@dataclass(frozen=True)
class Fault:
    name: str
    #: What the branch does, in a sentence (the issue's words).
    does: str
    #: (tmp folder, fixture repo) -> the patch file.
    patch: Callable[[Path, object], Path]
    #: The verdicts every run of the branch must read.
    expect: frozenset[str]
    #: Text that must appear in every run's reason (error or first violation).
    says: str = ""
    #: Strikes in each probe's first run only: that run reads `expect` and says `says`, and every
    #: later run of the same probe must pass (what it costs is that run alone).
    once: bool = False


def _pid_file(tmp: Path, name: str) -> Path:
    return tmp / f"{name}.pids"


#: Starts a non-daemon thread when the stats module is imported: the probe cannot exit.
EXIT_HANG = (
    "import threading as _threading, time as _time\n"
    "def _flush_forever():\n"
    "    while True:\n"
    "        _time.sleep(1)\n"
    "_threading.Thread(target=_flush_forever, name='stats-flusher').start()\n"
)
#: Truncates the probe's own records file as the process exits.
TRUNCATE = (
    "import atexit as _atexit, sys as _sys\n"
    "def _truncate():\n"
    "    if '--out' in _sys.argv:\n"
    "        open(_sys.argv[_sys.argv.index('--out') + 1], 'w').close()\n"
    "_atexit.register(_truncate)\n"
)
#: Replaces its records file with a FIFO (a blocking open of it would hang the host) when the first
#: scheduler is built.
FIFO = (
    "        import os as _os, sys as _sys\n"
    "        if '--out' in _sys.argv and not getattr(_sys, '_difftest_fifo', False):\n"
    "            _sys._difftest_fifo = True\n"
    "            _out = _sys.argv[_sys.argv.index('--out') + 1]\n"
    "            _os.unlink(_out)\n"
    "            _os.mkfifo(_out)\n"
)
#: Exits 1 after every record and the trailer are written.
EXIT_ONE = "import atexit as _atexit, os as _os\n_atexit.register(lambda: _os._exit(1))\n"


def _orphan(tmp: Path) -> str:
    """Starts a child that leaves the probe's session and sleeps; its pid goes to a file the test
    reads."""
    pids = _pid_file(tmp, "orphan")
    return (
        "import subprocess as _subprocess\n"
        "_child = _subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        f"open({str(pids)!r}, 'a').write(f'{{_child.pid}}\\n')\n"
    )


def _environ_reader(tmp: Path) -> str:
    """Copies what the probe's own process shows of its environment where the test can read it."""
    seen = tmp / "environ-seen.txt"
    return (
        "import os as _os\n"
        f"with open({str(seen)!r}, 'ab') as _seen:\n"
        "    _seen.write(open('/proc/self/environ', 'rb').read() + b'\\n')\n"
        "    _seen.write(repr(dict(_os.environ)).encode() + b'\\n')\n"
    )


#: At import of its own scheduler, rewrites a file it did not change, in place (the same inode its
#: overlay shares with the base and every other branch): metrics.py counting each draft twice, its
#: size and mtime kept and its bytecode rewritten to match, so nothing but the content tells.
TAMPER_SHARED = (
    "def _difftest_tamper():\n"
    "    import importlib.util as _util, os as _os\n"
    "    from importlib._bootstrap_external import _code_to_timestamp_pyc\n"
    "    _src = _util.find_spec('vllm.v1.spec_decode.metrics').origin\n"
    "    _st = _os.stat(_src)\n"
    "    _new = open(_src, 'rb').read().replace(\n"
    "        b'self.num_drafts += 1', b'self.num_drafts += 2', 1\n"
    "    )\n"
    "    with open(_src, 'r+b') as _file:\n"
    "        _file.write(_new)\n"
    "    _os.utime(_src, ns=(_st.st_atime_ns, _st.st_mtime_ns))\n"
    "    _code = compile(_new, _src, 'exec')\n"
    "    _pyc = _code_to_timestamp_pyc(_code, int(_st.st_mtime), _st.st_size)\n"
    "    with open(_util.cache_from_source(_src), 'r+b') as _file:\n"
    "        _file.write(_pyc)\n"
    "        _file.truncate()\n"
    "_difftest_tamper()\n"
)

#: Counts one accepted token too many whenever SKEW_ENV is set.
ENV_COUNT = (
    "        import os as _os\n"
    f"        if _os.environ.get({SKEW_ENV!r}):\n"
    "            num_accepted_tokens += 1\n"
)
ENV_COUNT_MARKER = "        self.num_accepted_tokens += num_accepted_tokens\n"

FAULTS = (
    Fault(
        "exit-hang",
        "starts a non-daemon thread at import of metrics.py: the probe never exits",
        lambda tmp, repo: prepend(tmp / "exit-hang.patch", repo, METRICS, EXIT_HANG),
        frozenset({"broken"}),
        says="'stats-flusher'",
    ),
    Fault(
        "sched-hang",
        "schedule() never returns in the probe's first run (a hang waits out `run_s`, so once is "
        "enough); the runs after it must still be measured",
        lambda tmp, repo: insert_after(
            tmp / "sched-hang.patch",
            repo,
            SCHEDULER,
            "        self.current_step += 1\n",
            "        import sys as _sys, time as _time\n"
            "        if not getattr(_sys, '_difftest_fault_hung', False):\n"
            "            _sys._difftest_fault_hung = True\n"
            "            _time.sleep(3600)\n",
        ),
        frozenset({"broken"}),
        says="did not finish",
        once=True,
    ),
    Fault(
        "sched-crash",
        "raises inside schedule() on every step",
        lambda tmp, repo: insert_after(
            tmp / "sched-crash.patch",
            repo,
            SCHEDULER,
            "        self.current_step += 1\n",
            '        raise RuntimeError("difftest fault kit: planted crash")\n',
        ),
        frozenset({"broken"}),
        says="crashed in vLLM: RuntimeError: difftest fault kit: planted crash",
    ),
    Fault(
        "truncate",
        "truncates its own records file at exit",
        lambda tmp, repo: prepend(tmp / "truncate.patch", repo, METRICS, TRUNCATE),
        frozenset({"error"}),
    ),
    Fault(
        "fifo",
        "replaces its own records file with a FIFO",
        lambda tmp, repo: insert_after(tmp / "fifo.patch", repo, SCHEDULER, INIT_MARKER, FIFO),
        frozenset({"error"}),
    ),
    Fault(
        "exit-one",
        "exits 1 after its last run",
        lambda tmp, repo: prepend(tmp / "exit-one.patch", repo, METRICS, EXIT_ONE),
        frozenset({"broken"}),
        says="exited with code 1",
    ),
    Fault(
        "orphan",
        "starts a child that leaves the probe's session",
        lambda tmp, repo: insert_after(
            tmp / "orphan.patch",
            repo,
            SCHEDULER,
            INIT_MARKER,
            "".join("        " + line + "\n" for line in _orphan(tmp).splitlines()),
        ),
        frozenset({"pass"}),
    ),
    Fault(
        "environ",
        "reads its own process's environment, looking for the nonce",
        lambda tmp, repo: prepend(tmp / "environ.patch", repo, METRICS, _environ_reader(tmp)),
        frozenset({"pass"}),
    ),
    Fault(
        "tamper-shared",
        "rewrites in place, at import, a vLLM file it did not change (shared with every branch)",
        lambda tmp, repo: prepend(tmp / "tamper-shared.patch", repo, SCHEDULER, TAMPER_SHARED),
        # Its vLLM does not import (the write fails), as any branch whose import raises.
        frozenset({"error"}),
        # No `says`: a merged run re-reads records and names only that the probe wrote none; the
        # read-only write is asserted in tests/unit/test_sandbox.py and the base by content here.
    ),
    Fault(
        "symlink-dir",
        "replaces the folder vllm/v1/core/sched by a symbolic link",
        lambda tmp, repo: symlink_patch(
            tmp / "symlink-dir.patch", repo, "vllm/v1/core/sched", "/tmp"
        ),
        frozenset({"error"}),
        says="vllm/v1/core/sched (a symbolic link)",
    ),
    Fault(
        "env-count",
        f"counts an accepted token too many when {SKEW_ENV} is set (it is not, here)",
        lambda tmp, repo: _env_count_patch(tmp, repo),
        frozenset({"pass"}),
    ),
)


#: Kills the process that runs it when that is a Ray worker (its title starts with `ray::`).
#: Guarded so: on a local path the parent is difftest itself or its fork server (probes share the
#: caller's process-id namespace), which this kit does not cover.
KILL_WORKER = (
    "import os as _os, signal as _signal\n"
    "try:\n"
    "    _title = open(f'/proc/{_os.getppid()}/cmdline', 'rb').read()\n"
    "except OSError:\n"
    "    _title = b''\n"
    "if _title.startswith(b'ray::'):\n"
    "    _os.kill(_os.getppid(), _signal.SIGKILL)\n"
)

#: Only through `--executor ray` (#29, case 4): the branch kills the Ray worker running its probe,
#: on every try. Its node stays up, so the probe runs once more there, dies the same way, and the
#: branch reads could not measure, naming the worker's death twice.
KILLS_ITS_RAY_WORKER = Fault(
    "kills-its-worker",
    "kills the Ray worker that runs its probe (its parent), at import of the scheduler",
    lambda tmp, repo: prepend(tmp / "kills-its-worker.patch", repo, SCHEDULER, KILL_WORKER),
    frozenset({"error"}),
    says="its Ray worker died while the node stayed up",
)


def _env_count_patch(tmp: Path, repo: object) -> Path:
    from difftest.build.refs import read_blob
    from tests.patching import make_patch

    old = read_blob(repo, "v0.32.0", METRICS).decode()
    assert ENV_COUNT_MARKER in old, "SpecDecodingStats no longer adds num_accepted_tokens this way"
    new = old.replace(ENV_COUNT_MARKER, ENV_COUNT + ENV_COUNT_MARKER, 1)
    return make_patch(tmp / "env-count.patch", METRICS, old, new)


def deep_orphan(tmp: Path) -> str:
    """Starts, through a shell that leaves the session and clears the environment, a grandchild that
    sleeps (no token, no group of the probe's: only the subreaper can find it); its pid to a
    file."""
    pids = _pid_file(tmp, "deep-orphan")
    shell = (
        f"setsid env -i /bin/sh -c 'sleep 777 & echo $! >> {pids}; wait' </dev/null >/dev/null "
        "2>&1 &"
    )
    return (
        "        import subprocess as _subprocess\n"
        f"        _subprocess.Popen(['/bin/sh', '-c', {shell!r}], start_new_session=True)\n"
    )


def deep_orphan_pids(tmp: Path) -> list[int]:
    path = _pid_file(tmp, "deep-orphan")
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def orphan_pids(tmp: Path) -> list[int]:

    path = _pid_file(tmp, "orphan")
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def environ_seen(tmp: Path) -> str:
    path = tmp / "environ-seen.txt"
    return path.read_bytes().decode("utf-8", "replace") if path.exists() else ""


# -- faults of `difftest blame` (tests/faults/test_blame_faults.py) ------------------------------

#: A comment-only edit of the scheduler: a hunk that can make no finding.
COMMENT_MARKER = INIT_MARKER


def _counting_with_a_comment(tmp: Path, repo: object, name: str, prelude: str, skew: str) -> Path:
    """`name`.patch: metrics.py with `prelude` at its top and `skew` just before it adds the
    accepted tokens, and a comment-only hunk in the scheduler (a hunk that can make no finding)."""
    from difftest.build.refs import read_blob
    from tests.patching import make_patch

    metrics = read_blob(repo, "v0.32.0", METRICS).decode()
    assert ENV_COUNT_MARKER in metrics, "SpecDecodingStats no longer adds num_accepted_tokens so"
    counting = prelude + "\n" + metrics.replace(ENV_COUNT_MARKER, skew + ENV_COUNT_MARKER, 1)
    scheduler = read_blob(repo, "v0.32.0", SCHEDULER).decode()
    comment = "        # A comment only: nothing the scheduler does.\n"
    commented = scheduler.replace(COMMENT_MARKER, COMMENT_MARKER + comment, 1)
    one = make_patch(tmp / f"{name}-metrics.part", METRICS, metrics, counting)
    two = make_patch(tmp / f"{name}-comment.part", SCHEDULER, scheduler, commented)
    patch = tmp / f"{name}.patch"
    patch.write_text(one.read_text() + two.read_text())
    return patch


def flaky_counting_patch(tmp: Path, repo: object) -> Path:
    """A change whose counting comes and goes (#29, case 2): every other probe process that imports
    its metrics.py (a counter file in `tmp`, one byte per import) counts one accepted token too
    many; and a comment-only hunk in the scheduler, which a search misled by chance would blame."""
    counter = tmp / "flaky-imports"
    chooser = (
        "import os as _os\n"
        f"_fd = _os.open({str(counter)!r}, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT)\n"
        "_os.write(_fd, b'x')\n"
        "_os.close(_fd)\n"
        f"_FLAKY = _os.path.getsize({str(counter)!r}) % 2 == 1\n"
    )
    skew = "        if _FLAKY:\n            num_accepted_tokens += 1\n"
    return _counting_with_a_comment(tmp, repo, "flaky-counting", chooser, skew)


def flaky_imports(tmp: Path) -> int:
    """How many probe processes imported the flaky branch's metrics.py."""
    path = tmp / "flaky-imports"
    return path.stat().st_size if path.exists() else 0


def stubborn_counting_patch(tmp: Path, repo: object) -> Path:
    """A change that makes a finding (one accepted token too many) and fights being stopped: at
    import of its metrics.py every probe ignores SIGINT and SIGTERM, starts a child that leaves its
    session (pid to `orphan.pids`) and takes 2 s; plus a comment-only hunk, so the search has sets
    to try when Ctrl-C comes."""
    stubborn = (
        "import signal as _signal, time as _time\n"
        "_signal.signal(_signal.SIGINT, _signal.SIG_IGN)\n"
        "_signal.signal(_signal.SIGTERM, _signal.SIG_IGN)\n" + _orphan(tmp) + "_time.sleep(2)\n"
    )
    skew = "        num_accepted_tokens += 1\n"
    return _counting_with_a_comment(tmp, repo, "stubborn-counting", stubborn, skew)

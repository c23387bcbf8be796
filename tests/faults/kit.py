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

import shlex
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from difftest.core import paths
from difftest.run.probes.sandbox import protection
from tests.e2e.cli_helpers import INIT_MARKER, METRICS, SCHEDULER
from tests.mailbox import post, socket_path
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
    #: What its changed-line coverage must read (`core.coverage`), and say, when the kit checks it.
    coverage: str | None = None
    coverage_says: str = ""


#: Starts a non-daemon thread when the stats module is imported: the probe cannot exit.
EXIT_HANG = (
    "import threading as _threading, time as _time\n"
    "def _flush_forever():\n"
    "    while True:\n"
    "        _time.sleep(1)\n"
    "_threading.Thread(target=_flush_forever, name='stats-flusher').start()\n"
)
#: Puts a trace function of its own in place of the probe's tracer (coverage.py's).
TRACER_SWAP = "import sys as _sys\n_sys.settrace(lambda *_args: None)\n"
#: The records file the probe's host opened for it, found as branch code would find it: among its
#: own open descriptors.
_RECORDS_FD = (
    "def _records_fd():\n"
    "    import os as _os\n"
    "    for _fd in _os.listdir('/proc/self/fd'):\n"
    "        try:\n"
    "            if _os.readlink(f'/proc/self/fd/{_fd}').endswith('-runs.jsonl'):\n"
    "                return int(_fd)\n"
    "        except OSError:\n"
    "            pass\n"
)
#: Truncates the probe's own records file as the process exits (through a copy of the descriptor
#: it takes at import: the probe has closed its own by then).
TRUNCATE = (
    _RECORDS_FD + "import atexit as _atexit, os as _os\n"
    "_kept = _records_fd()\n"
    "if _kept is not None:\n"
    "    _kept = _os.dup(_kept)\n"
    "    _atexit.register(lambda: _os.ftruncate(_kept, 0))\n"
)
#: Tries to replace its records file with a FIFO (a blocking open of it would hang the host) when
#: the first scheduler is built; where the probe is confined, `--out` is read-only and the attempt
#: fails (quietly: the branch goes on and measures).
FIFO = "".join(
    "        " + line + "\n"
    for line in (
        _RECORDS_FD.splitlines()
        + [
            "import os as _os, sys as _sys",
            "if not getattr(_sys, '_difftest_fifo', False):",
            "    _sys._difftest_fifo = True",
            "    _fd = _records_fd()",
            "    if _fd is not None:",
            "        _out = _os.readlink(f'/proc/self/fd/{_fd}')",
            "        try:",
            "            _os.unlink(_out)",
            "            _os.mkfifo(_out)",
            "        except OSError:",
            "            pass",
        ]
    )
)
#: Exits 1 after every record and the trailer are written.
EXIT_ONE = "import atexit as _atexit, os as _os\n_atexit.register(lambda: _os._exit(1))\n"


def fault_box(tmp: Path) -> Path:
    """`tmp/fault-box.txt`, kept by the test process from what probes send to its mailbox
    (`tests.mailbox`): how a confined probe, which can write nothing outside its scratch folder,
    tells the test what it did. One message per line: a kind, a space, what it says."""
    return tmp / "fault-box.txt"


_BOXES: dict[str, socket.socket] = {}
_BOXES_LOCK = threading.Lock()


def send_to_box(tmp: Path, indent: str, what: str) -> str:
    """Python source that sends the f-string `what` to the test's fault box, as one line."""
    return f"{indent}{post(fault_box(tmp), f'({what}) + chr(10)')}\n"


def box_messages(tmp: Path, kind: str) -> list[str]:
    """What the probes sent to `tmp`'s fault box with `kind` first (waiting a moment for the last
    datagram to be kept)."""
    kept = fault_box(tmp)
    time.sleep(0.2)
    lines = kept.read_bytes().decode("utf-8", "replace").splitlines() if kept.exists() else []
    return [line.split(" ", 1)[1] for line in lines if line.split(" ", 1)[0] == kind]


def _sleeper(tmp: Path, kind: str) -> str:
    """Python source (a `-c` argument) of a process that sends `kind` and its own pid as the test
    sees it (`<sender>`: a probe's pids are its pid namespace's) to the fault box, then sleeps."""
    return (
        "import time; " + post(fault_box(tmp), f"'{kind} <sender>' + chr(10)") + "; time.sleep(600)"
    )


def _orphan(tmp: Path) -> str:
    """Starts a child that leaves the probe's session and sleeps; its pid goes to the test's fault
    box."""
    return (
        "import subprocess as _subprocess, sys as _sys\n"
        f"_child = _subprocess.Popen([_sys.executable, '-c', {_sleeper(tmp, 'orphan')!r}], "
        "start_new_session=True)\n"
    )


def _environ_reader(tmp: Path) -> str:
    """Sends what the probe's own process shows of its environment to the test's fault box."""
    return send_to_box(
        tmp,
        "",
        "'environ ' + repr(open('/proc/self/environ', 'rb').read()) + ' ' "
        "+ repr(dict(__import__('os').environ))",
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

#: Whether this machine confines probes (`run.probes.sandbox`); some faults read differently.
CONFINED = protection().active
#: What the `escape` fault appends to every file it reaches (none must hold it afterwards).
ESCAPED = "difftest-escape"


def escape_targets(tmp: Path) -> dict[str, Path]:
    """The places #47's hostile sweep wrote from a branch, as they are for the kit's run in `tmp`:
    a home (its git config, a `git` first on PATH, pip's and uv's config), the config and its
    patches, the result cache (outside difftest's home), difftest's home (its models, locks and
    git mirrors, found by glob at run time) and `--out` (the probe's working folder's parent)."""
    user_home = tmp / "user-home"
    return {
        "gitconfig": user_home / ".gitconfig",
        "planted git": user_home / ".local" / "bin" / "git",
        "pip.conf": user_home / ".config" / "pip" / "pip.conf",
        "uv.toml": user_home / ".config" / "uv" / "uv.toml",
        "config": tmp / "branches.yaml",
        "results": tmp / "results",
        "difftest home": paths.difftest_home(),
    }


def escape(tmp: Path) -> str:
    """The `escape` fault's payload: every write swallowed, so the branch measures (and a write
    that lands is seen only by the test that looks for `ESCAPED`)."""
    targets = {name: str(path) for name, path in escape_targets(tmp).items()}
    return (
        "def _difftest_escape():\n"
        "    import glob as _glob, os as _os\n"
        f"    _t = {targets!r}\n"
        f"    _mark = {ESCAPED!r}\n"
        "    _home = _t['difftest home']\n"
        "    _out = _os.path.dirname(_os.getcwd())\n"
        "    _files = [_t[k] for k in ('gitconfig', 'planted git', 'pip.conf', 'uv.toml')]\n"
        "    _files.append(_t['config'])\n"
        "    _files += _glob.glob(_os.path.join(_os.path.dirname(_t['config']), '*.patch'))\n"
        "    _files += _glob.glob(_t['results'] + '/**/*.json', recursive=True)\n"
        "    _files += _glob.glob(_home + '/models/*/tokenizer.json')\n"
        "    _files += _glob.glob(_home + '/repos/*/HEAD')\n"
        "    _files += _glob.glob(_home + '/repos/*/config')\n"
        "    _files += [_out + '/.difftest-wrote.json', _out + '/escaped', _home + '/escaped']\n"
        "    for _path in _files:\n"
        "        try:\n"
        "            _os.makedirs(_os.path.dirname(_path), exist_ok=True)\n"
        "            with open(_path, 'a') as _file:\n"
        "                _file.write(_mark)\n"
        "        except OSError:\n"
        "            pass\n"
        "    for _lock in _glob.glob(_home + '/locks/*.lock'):\n"
        "        try:\n"
        "            _os.unlink(_lock)\n"
        "            _os.symlink(_lock, _lock)\n"
        "        except OSError:\n"
        "            pass\n"
        "_difftest_escape()\n"
    )


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
        "replaces its own records file with a FIFO (impossible where probes are confined: it "
        "measures)",
        lambda tmp, repo: insert_after(tmp / "fifo.patch", repo, SCHEDULER, INIT_MARKER, FIFO),
        frozenset({"pass"}) if CONFINED else frozenset({"error"}),
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
        "tracer-swap",
        "replaces the probe's tracer with its own at import of metrics.py (sys.settrace): it "
        "measures, but its coverage cannot be vouched for",
        lambda tmp, repo: prepend(tmp / "tracer-swap.patch", repo, METRICS, TRACER_SWAP),
        frozenset({"pass"}),
        coverage="unknown",
        coverage_says="the tracer was replaced while the probe ran",
    ),
    Fault(
        "env-count",
        f"counts an accepted token too many when {SKEW_ENV} is set (it is not, here)",
        lambda tmp, repo: _env_count_patch(tmp, repo),
        frozenset({"pass"}),
    ),
    *(
        [
            Fault(
                "escape",
                "at import, tries every write of #47's hostile sweep outside its scratch folder "
                "(quietly: it measures as main does)",
                lambda tmp, repo: prepend(tmp / "escape.patch", repo, METRICS, escape(tmp)),
                frozenset({"pass"}),
            )
        ]
        # Unconfined, its writes would land: it runs only where probes are confined.
        if CONFINED
        else []
    ),
)


#: Kills the nearest of its ancestors whose title starts with `ray::`: unconfined, the Ray worker
#: that runs its probe; confined, none is in sight (its ancestors there are difftest's init).
KILL_WORKER = (
    "import os as _os, signal as _signal\n"
    "_up = _os.getppid()\n"
    "while _up > 1:\n"
    "    try:\n"
    "        if open(f'/proc/{_up}/cmdline', 'rb').read().startswith(b'ray::'):\n"
    "            _os.kill(_up, _signal.SIGKILL)\n"
    "            break\n"
    "        _up = int(open(f'/proc/{_up}/stat').read().rsplit(')', 1)[1].split()[1])\n"
    "    except (OSError, ValueError, IndexError):\n"
    "        break\n"
)

#: Only through `--executor ray` (#29, case 4, now #47): the branch tries to kill the Ray worker
#: running its probe. Confined, its probe is alone in a pid namespace under difftest's init,
#: which ignores it: the worker is out of its sight and reach, and the branch measures as main
#: does. (Unconfined, it kills the worker on both tries and reads could not measure.)
KILLS_ITS_RAY_WORKER = Fault(
    "kills-its-worker",
    "kills the Ray worker above its probe, if it can see it, at import of the scheduler",
    lambda tmp, repo: prepend(tmp / "kills-its-worker.patch", repo, SCHEDULER, KILL_WORKER),
    frozenset({"pass"}) if CONFINED else frozenset({"error"}),
    says="" if CONFINED else "its Ray worker died while the node stayed up",
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
    sleeps (no token, no group of the probe's: only the subreaper can find it); it sends its pid
    to the test's fault box."""
    sleeper = shlex.quote(_sleeper(tmp, "deep-orphan"))
    return (
        "        import shlex as _shlex, subprocess as _subprocess, sys as _sys\n"
        "        _shell = _subprocess.Popen(['/bin/sh', '-c', 'setsid env -i ' + "
        f"_shlex.quote(_sys.executable) + ' -c ' + {sleeper!r} + ' </dev/null 2>/dev/null &'], "
        "start_new_session=True)\n"
        "        _shell.wait()\n"
    )


def deep_orphan_pids(tmp: Path) -> list[int]:
    return [int(pid) for pid in box_messages(tmp, "deep-orphan") if pid.isdigit()]


def orphan_pids(tmp: Path) -> list[int]:
    return [int(pid) for pid in box_messages(tmp, "orphan") if pid.isdigit()]


def environ_seen(tmp: Path) -> str:
    return "\n".join(box_messages(tmp, "environ"))


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


def counter(tmp: Path) -> Path:
    """A Unix stream socket in `tmp` that answers each connection with how many came before it
    (1, 2, ...): state a confined probe can keep across probe processes, which it cannot write
    anywhere (connecting needs no write access to the folder)."""
    address = socket_path(tmp / "fault-counter", ".counter")
    with _BOXES_LOCK:
        if str(address) not in _BOXES:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address.unlink(missing_ok=True)
            server.bind(str(address))
            server.listen(16)
            threading.Thread(target=_count, args=(server,), daemon=True).start()
            _BOXES[str(address)] = server
            _COUNTS[str(address)] = 0
    return address


_COUNTS: dict[str, int] = {}


def _count(server: socket.socket) -> None:
    address = server.getsockname()
    while True:
        connection, _ = server.accept()
        with connection, _BOXES_LOCK:
            _COUNTS[address] += 1
            connection.sendall(str(_COUNTS[address]).encode())


def counted(tmp: Path) -> int:
    """How many connections `tmp`'s counter answered."""
    return _COUNTS.get(str(socket_path(tmp / "fault-counter", ".counter")), 0)


def flaky_counting_patch(tmp: Path, repo: object) -> Path:
    """A change whose counting comes and goes (#29, case 2): every other probe process that imports
    its metrics.py (counted by the test's counter socket in `tmp`) counts one accepted token too
    many; and a comment-only hunk in the scheduler, which a search misled by chance would blame."""
    chooser = (
        "import socket as _socket\n"
        "_counter = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)\n"
        f"_counter.connect({str(counter(tmp))!r})\n"
        "_FLAKY = int(_counter.recv(32)) % 2 == 1\n"
        "_counter.close()\n"
    )
    skew = "        if _FLAKY:\n            num_accepted_tokens += 1\n"
    return _counting_with_a_comment(tmp, repo, "flaky-counting", chooser, skew)


def flaky_imports(tmp: Path) -> int:
    """How many probe processes imported the flaky branch's metrics.py."""
    return counted(tmp)


def stubborn_counting_patch(tmp: Path, repo: object) -> Path:
    """A change that makes a finding (one accepted token too many) and fights being stopped: at
    import of its metrics.py every probe ignores SIGINT and SIGTERM, starts a child that leaves its
    session (pid to the fault box) and takes 2 s; plus a comment-only hunk, so the search has sets
    to try when Ctrl-C comes."""
    stubborn = (
        "import signal as _signal, time as _time\n"
        "_signal.signal(_signal.SIGINT, _signal.SIG_IGN)\n"
        "_signal.signal(_signal.SIGTERM, _signal.SIG_IGN)\n" + _orphan(tmp) + "_time.sleep(2)\n"
    )
    skew = "        num_accepted_tokens += 1\n"
    return _counting_with_a_comment(tmp, repo, "stubborn-counting", stubborn, skew)

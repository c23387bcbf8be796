"""`python -m difftest.probe.forkserver`: import what every branch shares once, fork a probe per
branch.

Importing vLLM's scheduler costs ~9 s, of which ~7 s is third-party libraries
that every branch environment takes from the same base site-packages (torch,
transformers, numpy, ...). This process, started with one branch's interpreter,
imports those libraries (never `vllm`, which differs per branch) and then, for
each request, forks a child that becomes exactly the probe a fresh interpreter
would have been for ITS branch: its own session, log, working folder and
environment, the branch interpreter's own `sys.path` (overlay first), its own
copy of the probe package, and `vllm` imported from its overlay by
`difftest.probe.__main__.main`, the same entry a fresh probe runs.

Some of these libraries read the environment at import, and vLLM's import
sets a few variables first (`TORCHINDUCTOR_COMPILE_THREADS` before it imports
`torch._inductor`, whose config reads it then): the host gives every probe,
fresh or forked, those values from the start (`run.probes.environ.VLLM_IMPORT_ENV`), and a
child whose branch's vLLM import leaves such a variable (`IMPORT_TIME_ENV`)
other than the server imported with stops there, so that branch is probed fresh. Fork
is refused — the host then starts fresh interpreters and says why — where it
is not safe: not Linux, a shared library imported `vllm`, or any thread running
after the imports (a forked child would inherit the locks those threads hold,
not the threads).

Wire format (JSON lines; requests on stdin, answers on a private copy of stdout):

    -> {"ready": true, "import_s": S, "modules": [...]}  or  {"ready": false, "why": "..."}
    <- {"id": N, "python": P, "argv": [...], "env": {...}, "cwd": D, "log": F, "fds": [NAMES],
        "scratch": S, "scratch_root": R, "confine": B}
    -> {"id": N, "pid": PID}        the child started
    -> {"id": N, "error": "..."}    it could not be started (the server goes on)
    -> {"pid": PID, "code": C}      the child ended (C as subprocess's returncode)

With `"fds": [NAMES]`, the host has first sent those descriptors over the Unix socket whose
descriptor `protocol.FORKSERVER_PIPES_FD_ENV` names, with the request's id as the message, in that
order: `nonce`, the read end of a pipe holding the probe's nonce (never in the request, which every
later child inherits in this server's memory); a warm probe's `stdin` and `stdout` (`python -m
difftest.probe --serve`), ends of two pipes; the `log` the host opened (a warm probe's stderr,
appended to); the `records` file the host opened. Never a path the child opens itself: with
`"confine": true` it can write nothing but its `scratch` folder (`confine.confine_forked_child`).

The end of stdin ends the server; its children then die with it (PR_SET_PDEATHSIG).
Standard library only, like the rest of the probe.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

from . import confine, protocol
from .shared import import_shared, must_import_vllm_first

#: Environment variables the shared libraries may read at import (torch, its compilers and thread
#: pools, the Hugging Face stack). Should the branch's vLLM import leave one of them other than the
#: server had when it imported them, the child's libraries were set up differently from a fresh
#: probe's: the child stops before measuring anything and the branch is probed fresh.
IMPORT_TIME_ENV = (
    "TORCH",
    "PYTORCH",
    "TRITON",
    "OMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "CUDA",
    "NCCL",
    "HF_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "XGRAMMAR",
)

#: How long the server waits for a request's descriptors (the host sends them just before it).
FDS_WAIT_S = 5.0

_PATH_QUERY = "import json, sys; print(json.dumps([sys.path[1:], sys.prefix, sys.exec_prefix]))"


def fork_unsafe() -> str | None:
    """Why forking this process now would not give a faithful probe; None when it would."""
    if not sys.platform.startswith("linux"):
        return f"fork is only trusted on Linux (this is {sys.platform})"
    loaded = sorted(n for n in sys.modules if n == "vllm" or n.startswith("vllm."))
    if loaded:
        return f"a shared library imported vLLM ({loaded[0]}): each branch must import its own"
    if must_import_vllm_first():
        return (
            "VLLM_ENABLE_CUDA_COMPATIBILITY is set: vLLM must set up its CUDA libraries before "
            "torch is imported"
        )
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        return (
            f"{threads} threads run after the shared imports (a forked child would inherit their "
            "locks)"
        )
    return None


#: The server's environment when it imported the shared libraries.
_SERVER_ENV: dict[str, str] = {}


def main() -> int:
    protocol.die_with_host()
    confine.hide_memory()  # its children inherit it: none may ptrace the server or another child
    given = os.environ.pop(protocol.FORKSERVER_PIPES_FD_ENV, "")
    pipes = socket.socket(fileno=int(given)) if given.isdigit() else None
    _SERVER_ENV.update(os.environ)
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)  # whatever a library prints must not reach the answers
    modules, import_s = import_shared()
    why = fork_unsafe()
    _answer(
        channel,
        {"ready": why is None, "why": why, "import_s": round(import_s, 3), "modules": modules},
    )
    if why is not None:
        return 0
    _serve(channel, modules, pipes)
    return 0


def _answer(channel: TextIO, message: dict[str, Any]) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def _serve(channel: TextIO, modules: list[str], pipes: socket.socket | None) -> None:
    """Fork one child per request line until stdin ends; report every child's end."""
    buffered = b""
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([0], [], [], 0.1)
        if readable:
            chunk = os.read(0, 65536)
            if not chunk:
                os._exit(0)  # the host is done: children still running die with this process
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                if line.strip():
                    request = json.loads(line)
                    try:
                        fds = _received_fds(pipes, request)
                    except (OSError, RuntimeError) as exc:  # this request's alone: serve the next
                        _answer(channel, {"id": request["id"], "error": str(exc)})
                        continue
                    try:
                        pid = _fork_child(request, channel, modules, fds, pipes)
                    finally:
                        for fd in fds:
                            os.close(fd)  # the child's now: its end of file is the host's to see
                    children.add(pid)
                    _answer(channel, {"id": request["id"], "pid": pid})
        for pid in list(children):
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                children.discard(pid)
                _answer(channel, {"pid": pid, "code": os.waitstatus_to_exitcode(status)})


def _received_fds(pipes: socket.socket | None, request: dict[str, Any]) -> list[int]:
    """The descriptors the host sent just before the request, in the order `"fds"` names them (the
    nonce's pipe, a warm probe's stdin and stdout, the log, the records)."""
    wanted = len(request.get("fds") or [])
    if not wanted:
        return []
    if pipes is None:
        raise RuntimeError("a request with descriptors, but the server was given no socket")
    if not select.select([pipes], [], [], FDS_WAIT_S)[0]:
        raise RuntimeError(f"the descriptors of request {request['id']} never came")
    message, fds, _flags, _address = socket.recv_fds(pipes, 64, wanted)
    if message.decode() != str(request["id"]) or len(fds) != wanted:
        for fd in fds:
            os.close(fd)
        raise RuntimeError(f"descriptors for request {message!r} came with request {request['id']}")
    return list(fds)


def _fork_child(
    request: dict[str, Any],
    channel: TextIO,
    modules: list[str],
    fds: list[int] | None = None,
    pipes: socket.socket | None = None,
) -> int:
    """In the server: the child's pid. In the child: never returns; it ends as
    `python -m difftest.probe` ends (`protocol.finish`: threads joined, atexit handlers run, the
    branch's own included), never back into the server's loop."""
    server = os.getpid()
    sys.stdout.flush()  # nothing a library left buffered may reach a child's log
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        channel.close()  # the server's answers are not the child's to write
        if pipes is not None:
            pipes.close()  # nor are other children's pipes its to receive
        _become_probe(request, server, fds or [])
        code = _run_probe(request, modules)
    except SystemExit as exc:  # what the interpreter does with `sys.exit(x)`
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in the probe's log, as a fresh interpreter would
        traceback.print_exc()
    finally:
        # Ends as a fresh probe ends (its branch's copy of `protocol.finish`); never returns here.
        ending = sys.modules.get("difftest.probe.protocol", protocol)
        finish: Callable[[int], NoReturn] = ending.finish
        finish(code)


def _become_probe(request: dict[str, Any], server: int, fds: list[int]) -> None:
    """What `subprocess.Popen(..., start_new_session=True, stdout=log, stdin=DEVNULL, cwd=...)`
    gives a fresh probe (a warm one: `stdin=PIPE, stdout=PIPE, stderr=log`): its own session, log,
    folder and environment, its nonce on a pipe, confined as a fresh probe is (its own namespaces,
    only its scratch folder writable, no capability); it dies with this server."""
    os.setsid()  # signal dispositions stay the server's: those of a fresh interpreter, which it is
    given = dict(zip(request.get("fds") or [], fds, strict=True))
    if "log" in given:
        log = given.pop("log")
    else:  # a server given no socket: the host sent no descriptors (nor confines its children)
        mode = os.O_APPEND if "stdin" in given else os.O_TRUNC
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | mode, 0o644)
    if "stdin" in given:
        os.dup2(given["stdin"], 0)
        os.dup2(given["stdout"], 1)
        os.dup2(log, 2)
        for fd in (log, given.pop("stdin"), given.pop("stdout")):
            os.close(fd)
    else:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
    if request.get("confine"):
        confine.confine_forked_child(request["scratch"], request["scratch_root"], server)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # The server's temporary folder, if a library asked for it, is not the child's to write: its
    # own (`TMPDIR`, in its scratch folder) is found again, as a fresh interpreter finds it.
    tempfile.tempdir = None
    if "nonce" in given:
        # read and closed by `protocol.take_nonce`
        os.environ[protocol.NONCE_FD_ENV] = str(given["nonce"])
    if "records" in given:
        os.environ[protocol.RECORDS_FD_ENV] = str(given["records"])
    if request.get("confine"):
        # in a pid namespace of its own, it dies with its init, which dies with this server
        os.environ.pop(protocol.HOST_PID_ENV, None)
    else:  # `main` asks to die with this server, which dies with the host
        os.environ[protocol.HOST_PID_ENV] = str(server)


def _run_probe(request: dict[str, Any], modules: list[str]) -> int:
    """Switch to the branch interpreter's own import path and probe package, then run the probe
    entry."""
    python = request["python"]
    env = {k: v for k, v in request["env"].items() if k != protocol.NONCE_ENV}
    query = subprocess.run(
        [python, "-c", _PATH_QUERY], env=env, cwd=request["cwd"], capture_output=True, text=True
    )
    if query.returncode != 0:
        print(
            f"difftest.probe.forkserver: cannot ask {python} for its sys.path: "
            f"{query.stderr.strip()}",
            file=sys.stderr,  # the log (a warm probe's stdout is its answers' pipe)
        )
        return 3
    path, prefix, exec_prefix = json.loads(query.stdout)
    sys.path[:] = [os.getcwd(), *path]
    sys.prefix, sys.exec_prefix, sys.executable = prefix, exec_prefix, python
    sys.argv = [python, *request["argv"]]
    for name in [n for n in sys.modules if n == "difftest" or n.startswith("difftest.")]:
        del sys.modules[
            name
        ]  # the branch's own copy of the probe, as a fresh interpreter would import it
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    elsewhere = _not_shareable(modules)
    if elsewhere:
        print(f"{protocol.NOT_SHAREABLE_PREFIX}{elsewhere}", file=sys.stderr, flush=True)
        return protocol.EXIT_NOT_SHAREABLE
    entry = importlib.import_module("difftest.probe.__main__")
    importlib.import_module("difftest.probe.protocol").AFTER_VLLM_IMPORT.append(
        lambda: _check_import_env(request["env"])
    )
    return int(entry.main(list(request["argv"])))


def _check_import_env(given: dict[str, str]) -> None:
    """Right after the branch's vLLM was imported: refuse to go on if that import set a variable the
    shared libraries read at import to another value than they were imported with."""
    changed = _import_env_changed(given)
    if changed:
        print(f"{protocol.NOT_SHAREABLE_PREFIX}{changed}", file=sys.stderr, flush=True)
        raise SystemExit(protocol.EXIT_NOT_SHAREABLE)


def _import_env_changed(given: dict[str, str]) -> str | None:
    """A variable the shared libraries read at import that this probe's branch set to a value the
    server did not import them with (`IMPORT_TIME_ENV`); None when there is none."""
    for key in sorted(set(os.environ) | set(given)):
        now = os.environ.get(key)
        if (
            key.startswith(IMPORT_TIME_ENV)
            and now != given.get(key)
            and now != _SERVER_ENV.get(key)
        ):
            return (
                f"this branch sets {key}={now!r}, but the shared libraries were imported with "
                f"{_SERVER_ENV.get(key)!r}"
            )
    return None


def _not_shareable(modules: list[str]) -> str | None:
    """A shared module this branch's path would find in another file than the one already
    imported. Top-level names are what the path decides (`functorch.compile` comes with
    `functorch`), so each shared module's top-level package is checked."""
    from importlib.machinery import PathFinder

    for name in sorted({m.split(".")[0] for m in modules}):
        loaded = getattr(sys.modules.get(name), "__file__", None)
        spec = PathFinder.find_spec(name, sys.path)
        found = spec.origin if spec is not None else None
        if loaded is None or found is None or os.path.realpath(loaded) != os.path.realpath(found):
            return (
                f"{name} would come from {found} on this branch, but the warm process imported "
                f"{loaded}"
            )
    return None


if __name__ == "__main__":
    sys.exit(main())

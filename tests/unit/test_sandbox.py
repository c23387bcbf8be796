"""A probe writes its own scratch folder and nothing else (`run.probes.sandbox`, `probe.confine`):
real processes, real user and mount namespaces, started as difftest starts every probe
(`start_probe_process`), with a DIFFTEST_HOME, a home, a config and a clone of the test's own. The
fault kit's `escape` branch (tests/faults) does the same from a real branch's vLLM import."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from difftest.core.host_tools import SYSTEM_PATH
from difftest.probe import confine
from difftest.run.probes import sandbox
from difftest.run.probes.runner import probe_process_ended, start_probe_process
from difftest.run.probes.scratch import Scratch


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "difftest-home"
    monkeypatch.setenv("DIFFTEST_HOME", str(home))
    shared = home / "envs" / "base-x" / "vllm"
    shared.mkdir(parents=True)
    (shared / "metrics.py").write_text("num_drafts += 1\n")
    return home


def needs_namespaces() -> None:
    guard = sandbox.protection()
    if not guard.active:
        pytest.skip(f"this machine cannot confine probes: {guard.why_not}")


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("this case is about difftest running as root (as in many CI containers)")


def probe_shell(script: str, cwd: Path, **kwargs) -> tuple[int, str]:
    """Run `script` as a probe process is run (`start_probe_process`): (exit code, its output)."""
    proc = start_probe_process(
        ["sh", "-c", script],
        cwd=cwd,
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        probe_process_ended(proc)
    return proc.returncode, out


def test_a_probe_writes_its_scratch_folder_and_nothing_else(home, tmp_path):
    """The places the hostile sweep of #47 wrote from a branch: the user's home (a git config,
    a `git` on PATH, pip's and uv's config), the config and its patches, the configured clone, the
    models, a result cache outside difftest's home, the lock files, `--out`, difftest's
    environments; and the probe's own working folder. Only its HOME and TMPDIR take a write."""
    needs_namespaces()
    user_home = tmp_path / "user-home"
    targets = {
        "gitconfig": user_home / ".gitconfig",
        "planted git": user_home / ".local" / "bin" / "git",
        "pip.conf": user_home / ".config" / "pip" / "pip.conf",
        "uv.toml": user_home / ".config" / "uv" / "uv.toml",
        "config": tmp_path / "project" / "branches.yaml",
        "patch": tmp_path / "project" / "patches" / "main.patch",
        "clone ref": tmp_path / "vllm-clone" / ".git" / "refs" / "heads" / "main",
        "tokenizer": home / "models" / "model-x" / "tokenizer.json",
        "result cache": tmp_path / "results-elsewhere" / "ab" / "abcd.json",
        "lock": home / "locks" / "branch-x.lock",
        "out manifest": tmp_path / "out" / ".difftest-wrote.json",
        "shared vllm": home / "envs" / "base-x" / "vllm" / "metrics.py",
    }
    for path in targets.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("original\n")
    script = "".join(
        f'(echo tampered > "{path}") 2>/dev/null && echo "WROTE {name}"; '
        for name, path in targets.items()
    )
    script += (
        'echo mine > "$HOME/x" && echo home-ok; echo mine > "$TMPDIR/x" && echo tmp-ok; '
        '(echo x > ./here) 2>/dev/null && echo "WROTE cwd"; echo "home=$HOME"'
    )
    code, out = probe_shell(script, tmp_path / "out")
    assert code == 0, out
    assert "WROTE" not in out and "home-ok" in out and "tmp-ok" in out, out
    assert all(path.read_text() == "original\n" for path in targets.values())
    assert f"home={user_home}" not in out and "difftest-probe-" in out


def test_a_mount_below_a_read_only_folder_is_read_only_too(home, tmp_path):
    """#47 case 13: a bind mount below a folder (as a container's /etc/hosts) stayed writable when
    only the top mount was made read-only. Every mount is checked, one by one."""
    needs_namespaces()
    needs_root()
    below = tmp_path / "shared" / "mounted"
    source = tmp_path / "source"
    below.mkdir(parents=True)
    source.mkdir()
    (source / "hosts").write_text("original\n")
    subprocess.run(["mount", "--bind", str(source), str(below)], check=True)
    try:
        _code, out = probe_shell(
            f'echo tampered > "{below}/hosts" || echo refused; '
            f"grep ' {below} ' /proc/self/mountinfo",
            tmp_path,
        )
    finally:
        subprocess.run(["umount", str(below)], check=True)
    assert "refused" in out and "Read-only file system" in out, out
    assert (source / "hosts").read_text() == "original\n"
    options = out.strip().splitlines()[-1].split(" ")[5].split(",")
    assert "ro" in options, out


def test_a_probe_can_neither_mount_nor_lift_the_protection_as_root(home, tmp_path):
    """#47 cases 6 and 7 start here: a probe of a difftest running as root is an unprivileged
    uid in its namespace, with no capability to mount; in a namespace of its own making the
    mounts it inherited are locked (no remount, no unmount), and the host's view through /proc is
    closed."""
    needs_namespaces()
    envs = home / "envs"
    shared = envs / "base-x" / "vllm" / "metrics.py"
    decoy = tmp_path / "decoy.py"
    decoy.write_text("num_drafts += 2\n")
    script = (
        'echo "uid=$(id -u)"; '
        f'mount --bind "{decoy}" "{shared}" 2>/dev/null && echo MOUNTED; '
        f'mount -o remount,bind,rw "{envs}" 2>/dev/null && echo REMOUNTED; '
        f"unshare -Urm sh -c 'mount -o remount,bind,rw {envs} 2>/dev/null && echo LIFTED; "
        f"umount {envs} 2>/dev/null && echo UNMOUNTED; echo x > {shared}' 2>/dev/null; "
        f'echo x > "/proc/{os.getpid()}/root{shared}" 2>/dev/null && echo VIA-PROC; '
        f'echo x > "/proc/1/root{shared}" 2>/dev/null && echo VIA-INIT; true'
    )
    _code, out = probe_shell(script, tmp_path)
    assert "uid=0" not in out, out
    for done in ("MOUNTED", "REMOUNTED", "LIFTED", "UNMOUNTED", "VIA-PROC", "VIA-INIT"):
        assert done not in out, out
    assert shared.read_text() == "num_drafts += 1\n"


#: A fork server in miniature: confined as one, it makes itself non-dumpable as `forkserver.main`
#: does, then forks two children, each confined as `forkserver._become_probe` confines them; the
#: first tries what a hostile branch would, against its sibling and the server.
#: What a hostile payload below tries, each attempt printed as done or refused (and why).
_ATTEMPT = """
def attempt(calls):
    for what, call in calls:
        try:
            call()
            print("DID", what, flush=True)
        except Exception as exc:
            print("REFUSED", what, type(exc).__name__, flush=True)
"""

_FORKED = (
    _ATTEMPT
    + """
import os, signal, sys, time
from difftest.probe import confine
root, mine, sibling = sys.argv[1:4]
confine.hide_memory()
server = os.getpid()
def child(scratch, act):
    pid = os.fork()
    if pid:
        return pid
    confine.confine_forked_child(scratch, root, server)
    if act:
        signal.signal(signal.SIGUSR2, lambda *_: print("GOT SIGUSR2", flush=True))
        attempt([
            ("own", lambda: open(os.path.join(mine, "x"), "w").close()),
            ("sibling", lambda: open(os.path.join(sibling, "x"), "w").close()),
            ("root", lambda: open(os.path.join(root, "x"), "w").close()),
            ("server memory", lambda: open(f"/proc/{server}/mem", "rb").close()),
            ("server environ", lambda: open(f"/proc/{server}/environ", "rb").read()),
            ("mount", lambda: os.system(f"mount --bind {mine} {sibling} 2>/dev/null") == 0 or 1/0),
            ("signal server", lambda: os.kill(server, 0)),
            ("signal sibling", lambda: os.kill(quiet, 0)),
            ("list processes", lambda: print("SEES", sorted(
                int(n) for n in os.listdir("/proc") if n.isdigit()), flush=True)),
            ("signal group", lambda: os.kill(0, signal.SIGUSR2)),
        ])
    else:
        time.sleep(3)
    os._exit(0)
quiet = child(sibling, False)
time.sleep(0.3)
_, status = os.waitpid(child(mine, True), 0)
print("ACTOR", "ended well" if status == 0 else f"ended by {status}", flush=True)
_, status = os.waitpid(quiet, 0)
print("SIBLING", "ended well" if status == 0 else f"ended by {status}", flush=True)
"""
)


def test_a_forked_child_writes_only_its_own_scratch_and_reaches_no_other_process(home, tmp_path):
    """#47 cases 6 and 7: forked probes once shared the fork server's mount namespace (and, as
    root, could bind-mount a file over another branch's). Each child now has namespaces of its
    own, only its scratch folder writable, no capability, and neither its sibling's folder nor the
    server's memory in reach."""
    needs_namespaces()
    scratch = Scratch.create()
    children = scratch.root / "children"
    mine, sibling = children / "a", children / "b"
    for folder in (mine, sibling):
        folder.mkdir(parents=True)
    proc = start_probe_process(
        [sys.executable, "-c", _FORKED, str(scratch.root), str(mine), str(sibling)],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        scratch=scratch,
        own_pids=False,  # as a fork server is started (`start_helper`)
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        probe_process_ended(proc)
    assert "DID own" in out, out
    for refused in ("sibling", "root", "server memory", "server environ", "mount"):
        assert f"REFUSED {refused}" in out, out
    # its own pid namespace: the server and the sibling are not there to signal; its process
    # group is its init's, which passes the signal back to it (the child the server forked, in
    # the group before, would have died of it)
    for unseen in ("signal server", "signal sibling"):
        assert f"REFUSED {unseen} ProcessLookupError" in out, out
    assert "SEES [1, 2]" in out, out  # a /proc of its own: its init and itself
    assert "DID signal group" in out and "GOT SIGUSR2" in out, out
    assert "ACTOR ended well" in out and "SIBLING ended well" in out, out
    assert not scratch.root.exists(), "the scratch folder outlived its probe"


#: A hostile probe against the processes around it: the host that started it, everything else
#: visible in /proc, its own process group; then a daemon that leaves its session, clears its
#: death signal and outlives the probe if it can.
_SIGNALLER = (
    _ATTEMPT
    + """
import ctypes, os, signal, sys, time
host, marker = int(sys.argv[1]), sys.argv[2]
signal.signal(signal.SIGUSR2, lambda *_: print("GOT SIGUSR2", flush=True))
print("PID", os.getpid(), flush=True)
others = [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, os.getpid())]
print("SEES", len(others), "other processes", flush=True)
attempt([
    ("signal host", lambda: os.kill(host, 0)),
    ("kill init", lambda: os.kill(1, signal.SIGKILL)),
    ("signal group", lambda: os.kill(0, signal.SIGUSR2)),
])
if os.fork() == 0:
    os.setsid()
    ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)
    time.sleep(2)
    open(marker, "w").close()
    os._exit(0)
sys.exit(5)
"""
)


def test_a_probe_cannot_signal_or_outlive_anything_outside_its_own_pid_namespace(home, tmp_path):
    """#47's "left open": probes signalling one another or the host (a SIGSTOP of the host hung a
    run past every time limit) and a descendant that leaves its session and outlives its probe.
    A probe is its namespace's second process, below an init of difftest's: the host's pid does
    not exist there, every other process is out of sight, the init ignores its signals, and
    when the probe ends its init ends and takes every process in the namespace with it. Its
    exit code comes back unchanged through the wrapper."""
    needs_namespaces()
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = outside / "daemon-survived"
    proc = start_probe_process(
        [sys.executable, "-c", _SIGNALLER, str(os.getpid()), str(marker)],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        writable=[outside],
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        probe_process_ended(proc)
    assert proc.returncode == 5, out
    assert "PID 2" in out and "SEES 0 other processes" in out, out
    assert "REFUSED signal host ProcessLookupError" in out, out
    # sent, and ignored by the init, or passed back to the probe (the wrapper, in the group
    # before, would have died of it, and the exit code would not be the probe's)
    assert "DID kill init" in out and "DID signal group" in out and "GOT SIGUSR2" in out, out
    time.sleep(3)
    assert not marker.exists(), "a daemon outlived its probe"


def test_probes_cannot_read_each_others_memory(home, tmp_path):
    """Two probes run as the same user: the real probe entry makes itself non-dumpable before any
    branch code, so another probe can neither open its memory nor read its environment."""
    needs_namespaces()
    waiting = start_probe_process(
        [sys.executable, "-m", "difftest.probe", "--serve"],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while "difftest.probe" not in Path(f"/proc/{waiting.pid}/cmdline").read_text(
            errors="replace"
        ):
            assert time.monotonic() < deadline, "the probe never started"
            time.sleep(0.05)
        time.sleep(1.0)  # past its start: it made itself non-dumpable
        _code, out = probe_shell(
            f"cat /proc/{waiting.pid}/environ >/dev/null 2>&1 && echo READ-ENVIRON; "
            f"head -c1 /proc/{waiting.pid}/mem >/dev/null 2>&1 && echo READ-MEMORY; true",
            tmp_path,
        )
    finally:
        waiting.send_signal(signal.SIGKILL)
        waiting.wait()
        probe_process_ended(waiting)
    assert "READ-ENVIRON" not in out and "READ-MEMORY" not in out, out


def test_records_reach_the_host_through_the_descriptor_it_opened(home, tmp_path):
    """`--out` is read-only to a probe: its records go to the descriptor the host opened, and a
    link planted where the records file goes is removed, never followed."""
    needs_namespaces()
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("the user's\n")
    records = out / "main-scheduler-runs.jsonl"
    records.symlink_to(victim)
    code, said = probe_shell(
        f"{sys.executable} -c \"import os; os.write(int(os.environ['DIFFTEST_RECORDS_FD']), "
        "b'record\\n')\" && echo sent; (echo x > other) 2>/dev/null && echo WROTE; true",
        out,
        records=records,
    )
    assert code == 0 and "WROTE" not in said, said
    assert records.read_text() == "record\n" and not records.is_symlink()
    assert victim.read_text() == "the user's\n"


def test_a_probes_scratch_folder_is_its_home_and_goes_when_it_ends(home, tmp_path):
    scratch = Scratch.create(parent=tmp_path)
    _code, out = probe_shell('echo "$HOME $TMPDIR $VLLM_CACHE_ROOT"', tmp_path, scratch=scratch)
    assert out.split() == [str(scratch.root / f) for f in ("home", "tmp", "vllm-cache")]
    assert not scratch.root.exists()


def test_the_seeded_cache_is_a_copy_never_a_link(tmp_path):
    """A hard link into a writable scratch folder would reach the shared file through it."""
    seed = tmp_path / "seed" / "modelinfos"
    seed.mkdir(parents=True)
    (seed / "llama.json").write_text("{}")
    scratch = Scratch.create(seed.parent, parent=tmp_path)
    copied = scratch.root / "vllm-cache" / "modelinfos" / "llama.json"
    assert copied.read_text() == "{}"
    assert copied.stat().st_ino != (seed / "llama.json").stat().st_ino
    scratch.remove()


def test_the_protection_can_be_turned_off_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("DIFFTEST_HOME", str(tmp_path))  # the home an unconfined probe marks
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "off")
    guard = sandbox.protection()
    assert not guard.active and guard.label == "unconfined"
    assert "DIFFTEST_SANDBOX=off" in guard.describe()
    assert sandbox.wrap(["python", "-V"], []) == ["python", "-V"]


def test_the_wrapper_is_difftests_own_interpreter_not_the_callers_path(tmp_path, monkeypatch):
    """A `python`, `unshare` or `mount` planted first on PATH (a folder a probe could once write)
    is never what confines a probe."""
    planted = tmp_path / "bin"
    planted.mkdir()
    for tool in ("python", "python3", "unshare", "mount", "sh"):
        (planted / tool).write_text("#!/bin/sh\nexec true\n")
        (planted / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted}:{os.environ['PATH']}")
    needs_namespaces()
    argv = sandbox.wrap(["true"], [tmp_path])
    assert argv[:4] == [sys.executable, "-I", "-S", str(sandbox.CONFINE_SCRIPT)]
    assert not any(str(planted) in part for part in argv)


def test_a_mount_left_writable_fails_the_confinement_naming_it(monkeypatch):
    """The per-mount check is what catches a mount the read-only pass missed: it names the mount
    and the wrapper exits with its own code, never the probe's."""
    monkeypatch.setattr(confine, "mounts", lambda: [("/", "ro"), ("/data", "rw,relatime")])
    assert confine.writable_mounts(["/tmp/scratch"]) == ["/data"]
    assert confine.writable_mounts(["/data"]) == []


def test_a_wrapper_that_cannot_confine_exits_with_its_own_code(tmp_path):
    if shutil.which("true") is None:
        pytest.skip("no `true` program")
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(sandbox.CONFINE_SCRIPT), "{}", "true"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == sandbox.MOUNT_FAILED
    assert done.stderr.startswith(confine.FAILED_PREFIX)


def test_a_normal_users_probe_is_confined_the_same(request):
    """The cases of #47 that differ for a normal user: the wrapper maps them to their own uid (not
    an unprivileged stand-in), and a folder they could write (mode 777) is read-only all the same.
    Run as `nobody` through util-linux's `setpriv`, from root."""
    needs_namespaces()
    needs_root()
    setpriv = shutil.which("setpriv", path=SYSTEM_PATH)
    if setpriv is None:
        pytest.skip("util-linux's setpriv is not installed")
    # A folder of the test's own that `nobody` can reach (pytest's are root's alone).
    reachable = Path(tempfile.mkdtemp(prefix="difftest-nobody-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(reachable, ignore_errors=True))
    reachable.chmod(0o755)
    scratch, open_to_all = reachable / "scratch", reachable / "open"
    scratch.mkdir()
    open_to_all.mkdir()
    os.chown(scratch, 65534, 65534)
    open_to_all.chmod(0o777)
    python = os.path.realpath(sys.executable)
    argv = sandbox.wrap(
        [
            "sh",
            "-c",
            'id -u; echo x > "$1/a" && echo own-ok; echo x > "$2/b"; true',
            "sh",
            str(scratch),
            str(open_to_all),
        ],
        [scratch],
    )
    argv[0] = python
    done = subprocess.run(
        [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    if done.returncode == sandbox.MOUNT_FAILED or "Permission denied" in done.stderr[:200]:
        pytest.skip(f"nobody cannot run the wrapper here: {done.stderr.strip()[:200]}")
    assert done.stdout.split()[:2] == ["65534", "own-ok"], (done.stdout, done.stderr)
    assert "Read-only file system" in done.stderr and not (open_to_all / "b").exists()


def test_kernel_settings_devices_and_services_are_out_of_reach(home, tmp_path):
    """Review of #47: as root's, a probe could set `kernel/core_pattern` (a program run as root on
    the host at the next crash), write the kernel log or a disk, and connect to root's service
    sockets (Docker's, systemd's) and to anything listening on loopback. Kernel settings are
    read-only, `/dev` holds only the harmless devices, `/run` is empty, and the probe has a
    network of its own."""
    needs_namespaces()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        _code, out = probe_shell(
            'p=/proc/sys/kernel/hostname; cat $p > "$TMPDIR/h"; '
            '(cat "$TMPDIR/h" > $p) 2>/dev/null && echo WROTE-SYSCTL; '
            "(echo x > /dev/kmsg) 2>/dev/null && echo WROTE-KMSG; "
            'echo "dev: $(ls /dev | tr "\\n" " ")"; echo "run: $(ls -A /run | wc -l)"; '
            f'{sys.executable} -c "import socket; '
            f"socket.create_connection(('127.0.0.1', {port}), 2)\" "
            "2>/dev/null && echo CONNECTED; echo x > /dev/null && echo null-ok; true",
            tmp_path,
        )
    finally:
        listener.close()
    assert "WROTE" not in out and "CONNECTED" not in out and "null-ok" in out, out
    devices = set(out.split("dev: ")[1].splitlines()[0].split())
    assert devices <= {*confine.DEVICES, "fd", "stdin", "stdout", "stderr", "shm"}, devices
    assert "run: 0" in out, out


def test_a_folder_whose_name_is_not_ascii_is_confined_like_any_other(tmp_path, monkeypatch):
    """Review of #47: mountinfo's escapes were decoded as text, so a scratch folder named `ü`
    looked like a writable mount left over and turned confinement off for every probe."""
    needs_namespaces()
    folder = tmp_path / "scratch ü\tx"
    folder.mkdir()
    done = subprocess.run(
        sandbox.wrap(["sh", "-c", 'echo ok > "$1/a"', "sh", str(folder)], [folder]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (folder / "a").read_text() == "ok\n"


#: Waits for the host's SIGUSR1 (how the host asks a probe for its stacks), then ends by SIGTERM.
_WAITER = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
print("READY", flush=True)
deadline = time.monotonic() + 30
while not got and time.monotonic() < deadline:
    time.sleep(0.02)
print("GOT SIGUSR1" if got else "NOTHING", flush=True)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
os.kill(os.getpid(), signal.SIGTERM)
"""


def test_the_hosts_signals_reach_the_probe_and_its_end_comes_back_unchanged(home, tmp_path):
    """Between the host and the probe stand the wrapper and the namespace's init: the host's
    SIGUSR1 (its request for stacks) is passed on through both, and a probe killed by a signal
    reads as killed by that signal (-15), not as an exit code of the wrapper's."""
    needs_namespaces()
    proc = start_probe_process(
        [sys.executable, "-c", _WAITER],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        os.kill(proc.pid, signal.SIGUSR1)
        out, _ = proc.communicate(timeout=60)
    finally:
        probe_process_ended(proc)
    assert "GOT SIGUSR1" in out, out
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, out)

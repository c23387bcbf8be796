"""Confining a probe: everything it can see read-only but its own scratch folder, no capabilities.

A branch's code runs inside its probe with the caller's rights. This module takes those rights
away before that code runs, with Linux user and mount namespaces (user_namespaces(7),
mount_namespaces(7)), in two places:

* `python -I -S confine.py SPEC -- ARGV...` (the host's wrapper around every fresh probe, fork
  server and test session, `run.probes.sandbox`): a user and mount namespace mapping the caller
  to root, every mount made read-only at once (`mount_setattr(2)` with `AT_RECURSIVE`), the
  folders SPEC names bound writable on top, a private `/dev/shm`, every mount checked read-only
  in `/proc/self/mountinfo`, then a second, nested user and mount namespace mapping the caller
  to an unprivileged uid, in which the kernel locks every mount (a locked read-only mount cannot
  be made writable again, nor unmounted to reveal what is below); then `exec ARGV`, which drops
  every capability (an unprivileged uid keeps none across `execve`). By default (`own_pids`) the
  wrapper also makes a pid namespace and stays outside it (`stand_between`): its first process is
  an init of this module's (`be_init`, never branch code), which does the mounts, then forks the
  probe as the namespace's second process. The probe cannot see or signal difftest or any other
  probe, the init ignores its signals, and when the probe ends, the init ends and the kernel kills
  whatever is left in the namespace. A fork server runs without (the host finds its children by
  pid): the wrapper `exec`s it.
* `confine_forked_child(scratch, scratch_root, server)` (a child of the fork server, which forks
  rather than execs): a user and mount namespace of the child's own, its scratch folder bound
  writable and the fork server's scratch root made read-only (the other children's folders below
  it included), a private `/dev/shm`, and a pid namespace with an init of its own, the child
  staying between the server and that init; then, in the probe, every capability dropped
  (`capset(2)`) and no new privileges.

Every confined process is also made non-dumpable, so a probe cannot ptrace or read the memory of
another probe or of the fork server (they share a uid, but not a user namespace: attaching to a
non-dumpable process needs CAP_SYS_PTRACE in the target's namespace).

Standard library only: it runs in the host's interpreter with `-I -S` (nothing of the caller's or
a branch's on its path) and inside branch environments.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import platform
import re
import select
import signal
import socket
import struct
import sys
import tempfile
from collections.abc import Iterable, Sequence
from typing import NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
#: `mount_setattr(2)`: the same number on every architecture (Linux 5.12+).
SYS_MOUNT_SETATTR = 442
#: `capset(2)`, by machine (glibc exports no wrapper).
SYS_CAPSET = {
    "x86_64": 126,
    "aarch64": 91,
    "arm64": 91,
    "riscv64": 91,
    "loongarch64": 91,
    "ppc64le": 184,
    "ppc64": 184,
    "s390x": 185,
}
LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
#: The uid and gid a confined process has inside its namespace when the caller is root: never 0,
#: so that `execve` leaves it no capability.
UNPRIVILEGED_ID = 1000
#: The wrapper's own exit code when it could not confine (never the probe's): the host reads it as
#: "the sandbox failed", not as the branch's fault.
CONFINE_FAILED = 121
#: What the wrapper prints before that exit code.
FAILED_PREFIX = "difftest.confine: "
#: The host's pid, for a probe to die with (`protocol.HOST_PID_ENV`; a test holds them equal). The
#: wrapper takes it: the probe, in a pid namespace of its own, cannot see the host's pid.
HOST_PID_ENV = "DIFFTEST_HOST_PID"
#: Signals a process standing between the host and a probe passes on to it (the host asks for
#: stacks with SIGUSR1 and interrupts a test session with SIGINT).
RELAYED = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
#: Mounts a confined process may write besides its own folders: its private `/dev/shm` (a tmpfs
#: of its own) and `/proc` (its own entries, and its id maps, which the nested namespace needs);
#: what `/proc` holds of the machine is made read-only again below (`PROC_MACHINE`).
OWN_MOUNTS = ("/dev/shm", "/proc")
#: What `/proc` holds of the machine rather than of a process: read-only to a confined process.
#: (Kernel settings are guarded by owner, not by capability: as root's, a probe of a difftest run
#: as root could otherwise set `kernel/core_pattern` and run a program as root on the host.)
PROC_MACHINE = (
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
    "/proc/acpi",
)
#: The devices a confined process gets: a `/dev` of its own holding only these (no disk, no
#: kernel log, whatever uid the probe has outside).
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: Where sockets of the machine's services live (systemd's, Docker's, a session bus): hidden
#: behind an empty read-only folder (a read-only mount does not stop `connect`).
SERVICE_SOCKETS = ("/run", "/var/run")


class ConfineError(OSError):
    """A step of the confinement failed (the kernel refused, a mount stayed writable)."""


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_LIBC = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise ConfineError(errno, f"{what}: {os.strerror(errno)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_namespaces(inside_uid: int, inside_gid: int, also: int = 0) -> None:
    """A new user and mount namespace (and `also`'s) in which this process has uid `inside_uid`
    (the caller's own uid outside). Needs a single-threaded process."""
    outside_uid, outside_gid = os.geteuid(), os.getegid()
    _check(_LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNS | also), "unshare(CLONE_NEWUSER | ...)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside_uid} {outside_uid} 1\n")
    _write("/proc/self/gid_map", f"{inside_gid} {outside_gid} 1\n")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    result = _LIBC.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(result, f"mount {source or fstype or ''} on {target}")


def _set_read_only(path: str, read_only: bool, recursive: bool) -> None:
    attr = _MountAttr(
        attr_set=MOUNT_ATTR_RDONLY if read_only else 0,
        attr_clr=0 if read_only else MOUNT_ATTR_RDONLY,
    )
    flags = AT_RECURSIVE if recursive else 0
    result = _LIBC.syscall(
        SYS_MOUNT_SETATTR,
        ctypes.c_int(AT_FDCWD),
        path.encode(),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(result, f"mount_setattr {path} {'ro' if read_only else 'rw'}")


def bind_writable(folder: str) -> None:
    """`folder` as a writable mount of its own (the mounts below it stay as they are)."""
    _mount(folder, folder, None, MS_BIND | MS_REC)
    _set_read_only(folder, read_only=False, recursive=False)


def private_shm() -> None:
    """A `/dev/shm` of this process's own: shared memory and POSIX semaphores work, and nobody
    else's are reachable."""
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1g")


def _unescape(field: bytes) -> str:
    """A mountinfo path: the kernel writes space, tab, newline and backslash as octal escapes."""
    raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), field)
    return os.fsdecode(raw)


def mounts() -> list[tuple[str, str]]:
    """(mount point, per-mount options) of every mount this process sees."""
    found = []
    with open("/proc/self/mountinfo", "rb") as table:
        for line in table:
            fields = line.split(b" ")
            found.append((_unescape(fields[4]), fields[5].decode()))
    return found


def loopback_up() -> None:
    """The new network namespace's loopback, up: the engine's torch.distributed (gloo) binds to
    127.0.0.1, which then reaches nothing outside the probe."""
    iff_up, get_flags, set_flags = 0x1, 0x8913, 0x8914
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, get_flags, request))[1]
        fcntl.ioctl(sock, set_flags, struct.pack("16sH22x", b"lo", flags | iff_up))


def hide_proc_machine() -> None:
    """What `/proc` holds of the machine (`PROC_MACHINE`), read-only."""
    for path in PROC_MACHINE:
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _set_read_only(path, read_only=True, recursive=True)


def hide_machine(proc: bool = True, staging: str = "") -> None:
    """What a probe must not reach even read-only or by `connect`: kernel settings (read-only;
    left to the children of a fork server, `proc=False`, whose own `/proc` the kernel refuses
    while a mount hides part of this one), the machine's devices (a `/dev` of its own), its
    services' sockets (an empty folder), and, by the namespaces `confine` adds, the network and
    the IPC objects of other processes."""
    if proc:
        hide_proc_machine()
    _own_dev(staging)
    for folder in SERVICE_SOCKETS:
        if os.path.isdir(folder) and not os.path.islink(folder):
            _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=64k")
            _set_read_only(folder, read_only=True, recursive=False)


def _own_dev(staging: str = "") -> None:
    """A tmpfs `/dev` holding `DEVICES` (each bound from the machine's), `/dev/fd` and the standard
    streams as links, and a private `/dev/shm`; built aside in a folder of its own below
    `staging` (the probe's scratch folder; else `TMPDIR`), then moved into place."""
    built = tempfile.mkdtemp(prefix=".difftest-dev-", dir=staging or None)
    _mount("tmpfs", built, "tmpfs", MS_NOSUID, "mode=755,size=64k")
    for name in DEVICES:
        source = f"/dev/{name}"
        if os.path.exists(source):
            open(os.path.join(built, name), "w").close()
            _mount(source, os.path.join(built, name), None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, os.path.join(built, name))
    os.mkdir(os.path.join(built, "shm"))
    _mount(built, "/dev", None, MS_MOVE)
    os.rmdir(built)
    private_shm()
    _set_read_only("/dev", read_only=True, recursive=False)


def writable_mounts(allowed: Iterable[str]) -> list[str]:
    """The mount points still writable other than `allowed` (and below an allowed one's own
    mounts nothing is exempt: a mount below a writable folder must be read-only too)."""
    exempt = {os.path.realpath(path) for path in allowed}
    return [
        point
        for point, options in mounts()
        if "ro" not in options.split(",") and os.path.realpath(point) not in exempt
    ]


def hide_memory() -> None:
    """Non-dumpable: no other probe may ptrace this process or open its memory (Linux only)."""
    prctl = getattr(_LIBC, "prctl", None)
    if prctl is not None and sys.platform.startswith("linux"):
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def drop_capabilities() -> None:
    """Every capability gone from this process (it forks, never execs), and none to be regained by
    executing a set-uid program."""
    _check(_LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    number = SYS_CAPSET.get(platform.machine())
    if number is None:
        raise ConfineError(0, f"capset is not known on {platform.machine()}")
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_LIBC.syscall(number, ctypes.byref(header), ctypes.byref(data)), "capset")


def inside_ids() -> tuple[int, int]:
    """The uid and gid a confined process gets: the caller's own, or `UNPRIVILEGED_ID` for root."""
    uid, gid = os.geteuid(), os.getegid()
    return (uid or UNPRIVILEGED_ID, gid or UNPRIVILEGED_ID)


def own_proc() -> bool:
    """A `/proc` of this process's pid namespace (other namespaces' processes unlisted), where the
    kernel allows it: it refuses while part of the machine's `/proc` is hidden by a mount (a
    container's masked paths, an outer confinement), and then the one seen stays. Whether it
    was mounted."""
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except ConfineError:
        return False
    return True


def read_only_but(writable: Sequence[str], proc: bool = True) -> None:
    """Every mount read-only but `writable` (bound writable on top) and this process's own
    `/dev/shm` and `/proc`, the machine hidden (`hide_machine`), checked mount by mount."""
    hide_machine(proc, writable[0] if writable else "")
    _set_read_only("/", read_only=True, recursive=True)
    for folder in writable:
        bind_writable(folder)
    _set_read_only("/dev/shm", read_only=False, recursive=False)
    if os.path.isdir("/proc"):
        _set_read_only("/proc", read_only=False, recursive=False)
    left = writable_mounts([*writable, *OWN_MOUNTS])
    if left:
        raise ConfineError(0, f"mounts still writable after the read-only pass: {', '.join(left)}")


def confine(writable: Sequence[str], proc: bool = True) -> None:
    """This process, from here on: everything read-only but `writable`, its own `/dev/shm`,
    checked; then in a nested namespace as an unprivileged uid, where those mounts are locked.
    (No pid namespace of its own: a fork server's, whose children's pids the host must see; its
    children, each in a pid namespace of its own, hide `/proc`'s machine parts, `proc=False`.)"""
    uid, gid = inside_ids()
    enter_namespaces(0, 0, CLONE_NEWNET | CLONE_NEWIPC)
    loopback_up()
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    read_only_but(writable, proc)
    enter_namespaces(uid, gid)
    _check(_LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies, however the parent dies."""
    _check(_LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def _forward(child: int, number: int) -> None:
    try:
        os.kill(child, number)
    except ProcessLookupError:
        pass


def block_relayed() -> None:
    """Hold `RELAYED` back until `relay` can pass them on (a signal sent to a namespace's init
    before it has a handler would be lost: the kernel drops it)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, RELAYED)


def unblock_relayed() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)


def relay(child: int) -> int:
    """Pass each of `RELAYED` on to `child` (those held back by `block_relayed` first) and reap
    whatever is re-parented here, until `child` has ended (exited or been killed; a stop is not an
    end): its wait status. Nothing is passed on afterwards (its pid may be another's by then)."""
    for number in RELAYED:
        signal.signal(number, lambda received, _frame: _forward(child, received))
    unblock_relayed()
    try:
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child and (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
                return status
    finally:
        for number in RELAYED:
            signal.signal(number, signal.SIG_IGN)


def end_as(status: int) -> NoReturn:
    """End this process as the wait `status` says its child ended: the same exit code, or killed by
    the same signal (so that the host reads the probe's own end)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        except (OSError, ValueError):
            pass  # SIGKILL: no handler to reset
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _keep_only(*fds: int) -> None:
    """Standard input and output on /dev/null and every other descriptor closed but standard error
    and `fds`: a process between the host and a probe holds none of the probe's pipes or records
    open (a pipe's reader sees its end when the probe ends)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    last = 3
    for fd in sorted(fds):
        os.closerange(last, fd)
        last = fd + 1
    os.closerange(last, max(os.sysconf("SC_OPEN_MAX"), 65536))


def _read_status(reader: int) -> int | None:
    text = b""
    while chunk := os.read(reader, 64):
        text += chunk
    return int(text) if text.strip().isdigit() else None


def split_off_init() -> int:
    """Fork the first process of the pid namespace this process made (`CLONE_NEWPID`); this
    process stays between (`stand_between`) and never returns. In the init: the write end of the
    pipe for the probe's wait status, once the init dies with its parent (`outlive_no_parent`).
    `RELAYED` stay blocked in the init until it relays them."""
    block_relayed()
    reader, writer = os.pipe()
    init = os.fork()
    if init:
        os.close(writer)
        stand_between(init, reader)
    os.close(reader)
    outlive_no_parent(writer)
    return writer


def stand_between(child: int, reader: int) -> NoReturn:
    """The process between the host (or fork server) and a pid namespace's init: it holds none of
    the probe's descriptors, passes the host's signals on, and ends as the probe ended (the init
    writes the probe's wait status to `reader`'s pipe; it cannot end by a signal itself)."""
    _keep_only(reader)
    hide_memory()
    status = relay(child)
    reported = _read_status(reader)
    end_as(status if reported is None else reported)


def outlive_no_parent(writer: int) -> None:
    """First thing in a namespace's init: die with the process that forked it, and end now if
    that one is already gone (the read end of `writer`'s pipe closed: a parent-death signal set
    after the parent died never comes)."""
    die_with_parent()
    watch = select.poll()
    watch.register(writer, select.POLLOUT)
    if any(events & select.POLLERR for _fd, events in watch.poll(0)):
        os._exit(CONFINE_FAILED)


def be_init(writer: int) -> int:
    """In a new pid namespace's first process (never branch code: it cannot be signalled from
    inside the namespace, and when it dies every process in the namespace dies): a session of
    its own, then fork the probe, which leads a process group of its own (its `kill(0, ...)`
    reaches neither this init nor anything outside). Returns 0 in the probe; in the init, relays
    to the probe and exits once it has ended. `RELAYED` are blocked (`block_relayed`) on entry."""
    os.setsid()
    hide_memory()
    probe = os.fork()
    if probe == 0:
        os.close(writer)
        os.setpgid(0, 0)
        unblock_relayed()
        return 0
    _keep_only(writer)
    status = relay(probe)
    os.write(writer, str(status).encode())
    os._exit(0)


def _fail(message: str) -> NoReturn:
    print(f"{FAILED_PREFIX}{message}", file=sys.stderr, flush=True)
    os._exit(CONFINE_FAILED)


def confine_in_own_pids(writable: Sequence[str], argv: Sequence[str]) -> NoReturn:
    """The wrapper of a fresh probe (or test session): confined as `confine` does, and in a pid
    namespace of its own under an init of difftest's (`be_init`), where it cannot see, signal or
    outlive the host or any other probe; this process stays between (`stand_between`)."""
    uid, gid = inside_ids()
    host = os.environ.pop(HOST_PID_ENV, "")
    try:
        enter_namespaces(0, 0, CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID)
        die_with_parent()
    except OSError as exc:
        _fail(str(exc))
    if host.isdigit() and os.getppid() != int(host):  # the host died before the request was made
        os._exit(3)
    try:
        writer = split_off_init()
        loopback_up()
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        own_proc()
        read_only_but(writable)
        in_probe = be_init(writer) == 0
    except BaseException as exc:  # noqa: BLE001 - the sandbox's failure, never the branch's
        _fail(f"{exc}" if isinstance(exc, OSError) else f"{exc!r}")
    if in_probe:
        try:
            _LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc files, to write its id maps
            enter_namespaces(uid, gid)
            _check(_LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        except OSError as exc:
            _fail(str(exc))
        try:
            os.execvp(argv[0], list(argv))
        except OSError as exc:
            _fail(f"cannot start {argv[0]}: {exc}")
    os._exit(CONFINE_FAILED)  # never reached: be_init returns in the probe only


def confine_forked_child(scratch: str, scratch_root: str, server: int) -> None:
    """In a child of the fork server, before any branch code: its own user, mount, IPC and pid
    namespaces, only `scratch` writable of the server's `scratch_root`, its own `/dev/shm`, no
    capability. The child stays between the server and the namespace's init (`stand_between`);
    this returns in the probe, the init's only child, which cannot see, signal or outlive the
    server, its siblings or the host."""
    uid, gid = os.geteuid(), os.getegid()
    os.makedirs(scratch, exist_ok=True)
    _LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc files, to write its id maps
    enter_namespaces(uid, gid, CLONE_NEWIPC | CLONE_NEWPID)
    die_with_parent()
    if os.getppid() != server:  # the server died before the request was made
        os._exit(3)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    bind_writable(scratch)
    _set_read_only(scratch_root, read_only=True, recursive=False)
    private_shm()
    try:
        writer = split_off_init()
        own_proc()
        hide_proc_machine()  # the server left it to its children (`confine(proc=False)`)
        in_probe = be_init(writer) == 0
    except BaseException as exc:  # noqa: BLE001 - the sandbox's failure, never the branch's
        _fail(f"{exc}" if isinstance(exc, OSError) else f"{exc!r}")
    if not in_probe:
        os._exit(CONFINE_FAILED)  # never reached: be_init returns in the probe only
    drop_capabilities()
    hide_memory()


def main(argv: list[str]) -> int:
    """`confine.py SPEC -- ARGV...`: confine as SPEC (JSON: {"writable": [...], "own_pids": bool})
    says, run ARGV (with `own_pids`, the default, in a pid namespace of its own; without, by
    `exec`, as the same process: a fork server, whose children each take a pid namespace and
    hide `/proc`'s machine parts themselves)."""
    if len(argv) < 3 or argv[1] != "--":
        print(f"{FAILED_PREFIX}usage: confine.py SPEC -- ARGV...", file=sys.stderr)
        return CONFINE_FAILED
    spec = json.loads(argv[0])
    writable = [str(folder) for folder in spec.get("writable", [])]
    own_pids = bool(spec.get("own_pids", True))
    if own_pids:
        confine_in_own_pids(writable, argv[2:])
    try:
        confine(writable, proc=own_pids)
    except (OSError, ValueError) as exc:
        print(f"{FAILED_PREFIX}{exc}", file=sys.stderr, flush=True)
        return CONFINE_FAILED
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as exc:
        print(f"{FAILED_PREFIX}cannot start {argv[2]}: {exc}", file=sys.stderr, flush=True)
    return CONFINE_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""How a confined probe tells a test something: a mailbox the test process keeps.

A probe can write nothing outside its scratch folder (`run.probes.sandbox`), so branch code in the
tests cannot leave a marker file where the test looks. It can still send a datagram to a Unix
socket (sending needs no write access to the folder the socket lies in): `mailbox(path)` binds one
(in a short folder of the temporary root), and a thread of the test process appends every message
it receives to `path`, replacing the file whole each time (a reader never sees half a message).
`post(path, expression)` is the one line of Python a payload runs to send `expression` (a str)
there.

A confined probe runs in a pid namespace of its own, so the pids it knows are not the test's. The
mailbox asks the kernel for each sender's credentials, whose pid is the sender as the test sees it,
and writes that pid where a message says `<sender>`, and where it says `<starter>`, the process
that started the probe (`processes.starter`: the Ray worker, the runner's host, the fork server).
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import tempfile
import threading
from pathlib import Path

from tests.processes import starter

_OPEN: dict[str, socket.socket] = {}
_LOCK = threading.Lock()


def mailbox(path: Path) -> Path:
    """The socket whose messages are appended to `path` (bound on first use, kept for the
    process)."""
    address = socket_path(path, ".sock")
    with _LOCK:
        if str(address) not in _OPEN:
            box = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            box.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            address.unlink(missing_ok=True)
            box.bind(str(address))
            threading.Thread(target=_keep, args=(box, path), daemon=True).start()
            _OPEN[str(address)] = box
    return address


def socket_path(path: Path, suffix: str) -> Path:
    """Where the socket standing for `path` lies: short, whatever the test's folder (a socket's
    path holds at most 107 bytes), in this process's folder of the temporary root."""
    folder = Path(tempfile.gettempdir()) / f"mbox-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    return folder / (hashlib.sha256(str(path).encode()).hexdigest()[:16] + suffix)


def _sender(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            return int(struct.unpack("3i", data[:12])[0])
    return None


def _keep(box: socket.socket, path: Path) -> None:
    while True:
        message, ancillary, _flags, _address = box.recvmsg(1 << 20, socket.CMSG_SPACE(12))
        sender = _sender(ancillary)
        if sender is not None:
            message = message.replace(b"<sender>", str(sender).encode())
            if b"<starter>" in message:
                message = message.replace(b"<starter>", str(starter(sender)).encode())
        kept = path.read_bytes() if path.exists() else b""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(kept + message)
        tmp.replace(path)


def post(path: Path, expression: str) -> str:
    """One Python statement that sends `expression` (a str) to `path`'s mailbox."""
    address = str(mailbox(path))
    return (
        "__import__('socket').socket(__import__('socket').AF_UNIX, "
        f"__import__('socket').SOCK_DGRAM).sendto(({expression}).encode(), {address!r})"
    )

"""The fork server takes each request's descriptors (the nonce's pipe, a warm probe's stdin and
stdout, the log and records the host opened) from its Unix socket, and refuses any that are not
that request's: a stray or missing datagram costs that request, never the server and every probe
forked from it."""

from __future__ import annotations

import os
import socket

import pytest

from difftest.probe import forkserver


def _pipe_ends(count: int) -> list[int]:
    ends = []
    for _ in range(count):
        read_end, write_end = os.pipe()
        os.close(write_end)
        ends.append(read_end)
    return ends


def test_a_requests_descriptors_are_taken_in_order_and_only_for_it(monkeypatch) -> None:
    host, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with host, server:
        sent = _pipe_ends(3)
        socket.send_fds(host, [b"7"], sent)
        got = forkserver._received_fds(server, {"id": 7, "fds": ["nonce", "log", "records"]})
        assert len(got) == 3
        assert [os.fstat(fd).st_ino for fd in got] == [os.fstat(fd).st_ino for fd in sent]
        assert forkserver._received_fds(server, {"id": 8}) == []  # none asked, none taken
        # Another request's datagram is refused and its descriptors closed.
        socket.send_fds(host, [b"9"], sent[:2])
        with pytest.raises(RuntimeError, match="descriptors for request b'9' came with request 10"):
            forkserver._received_fds(server, {"id": 10, "fds": ["nonce", "log"]})
        # None at all: the request is refused once the wait is over.
        monkeypatch.setattr(forkserver, "FDS_WAIT_S", 0.05)
        with pytest.raises(RuntimeError, match="the descriptors of request 11 never came"):
            forkserver._received_fds(server, {"id": 11, "fds": ["nonce"]})
        for fd in [*sent, *got]:
            os.close(fd)
    with pytest.raises(RuntimeError, match="no socket"):
        forkserver._received_fds(None, {"id": 1, "fds": ["nonce"]})

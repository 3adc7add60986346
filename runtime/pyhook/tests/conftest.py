"""Shared pytest setup: kvcanary importable from this tree, and a small test
collector (unix socket or loopback tcp) that records the JSON lines it gets.

The collector here is a test double, not kvcanary's collector: it checks
framing (one JSON object per line) and leaves the event model to the Go side
(the golden files are validated by a Go test).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import time

import pytest

PYHOOK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYHOOK not in sys.path:
    sys.path.insert(0, PYHOOK)

REPO = os.path.dirname(os.path.dirname(PYHOOK))


def accept_each(sock: socket.socket, on_conn) -> None:
    """Accept connections on sock until it is closed, handing each to on_conn."""
    while True:
        try:
            c, _ = sock.accept()
        except OSError:
            return
        on_conn(c)


def recv_lines(recv, on_lines, errors=(OSError,)):
    """Read with recv() until the peer closes, handing each batch of complete
    lines to on_lines; returns the exception (one of errors) that ended the
    reading early, or None."""
    buf = b""
    while True:
        try:
            b = recv(1 << 16)
        except errors as e:
            return e
        if not b:
            return None
        buf += b
        *whole, buf = buf.split(b"\n")
        on_lines(whole)


class Collector:
    """Accepts connections and parses the JSON lines they send.

    read=False makes a stalled collector: it accepts and never reads (with a
    tiny receive buffer), so a producer's socket fills up.
    """

    def __init__(self, kind: str = "unix", read: bool = True, rcvbuf: int | None = None):
        self.kind = kind
        self.read = read
        self.lines: list[bytes] = []
        self.events: list[dict] = []
        self.errors: list[str] = []
        self.conns: list[socket.socket] = []
        self.accepted = 0
        self._cv = threading.Condition()
        self._closing = False
        if kind == "unix":
            self._dir = tempfile.mkdtemp(prefix="kvc-test-")
            path = os.path.join(self._dir, "c.sock")
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if rcvbuf:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.bind(path)
            self.addr = "unix://" + path
            self.path = path
        else:
            self._dir = None
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if rcvbuf:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.bind(("127.0.0.1", 0))
            self.addr = "tcp://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.sock.listen(16)
        self._thr = threading.Thread(target=self._accept, daemon=True)
        self._thr.start()

    def _accept(self):
        accept_each(self.sock, self._accepted)

    def _accepted(self, c: socket.socket):
        with self._cv:
            self.conns.append(c)
            self.accepted += 1
            self._cv.notify_all()
        if self.read:
            threading.Thread(target=recv_lines, args=(c.recv, self._got), daemon=True).start()

    def _got(self, whole):
        with self._cv:
            for line in whole:
                if not line.strip():
                    continue
                self.lines.append(line)
                try:
                    self.events.append(json.loads(line))
                except ValueError as e:
                    self.errors.append("line %d: %s" % (len(self.lines), e))
            self._cv.notify_all()

    def wait(self, pred, timeout: float = 30.0) -> bool:
        """Wait until pred(self) holds (a hang guard, not a timing assertion)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not pred(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def kinds(self) -> list[str]:
        with self._cv:
            return [e.get("kind") for e in self.events]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        with self._cv:
            for c in self.conns:
                try:
                    c.close()
                except OSError:
                    pass
        if self._dir:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            try:
                os.rmdir(self._dir)
            except OSError:
                pass


@pytest.fixture
def unix_collector():
    c = Collector("unix")
    yield c
    c.close()


@pytest.fixture
def tcp_collector():
    c = Collector("tcp")
    yield c
    c.close()


@pytest.fixture(params=["unix", "tcp"])
def collector(request):
    c = Collector(request.param)
    yield c
    c.close()


@pytest.fixture
def repo_root():
    return REPO

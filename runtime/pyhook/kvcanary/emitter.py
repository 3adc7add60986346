"""Emitter: kvcanary events as JSON lines (runtime/hook/WIRE.md) to a collector.

The engine's step thread calls `emit`, which only appends to a bounded queue
(no I/O, no encoding, no exception): a daemon writer thread encodes the events
and writes them to the collector. When the queue is full — the collector is
slow, stalled or absent — the event is dropped and counted by kind, and
`close()` reports the count in a `run.end` event, as the Go emitter's users do.

The queue is bounded in bytes (`queue_bytes`, 64 MiB per process by default)
as well as in events (`queue_size`): a body's size is estimated when it is
queued (string lengths, list lengths times their sampled elements' size, the
Python objects included, so a list of floats counts what it holds in memory)
and replaced by its exact encoded length once the writer encoded it; the
writer's batch is counted until written. A count alone let 4096 bodies of
1 MiB hold 4.4 GB inside the engine against a collector that stopped reading.

Decisions (documented in README.md, "Emitter"):
- No collector at start: one warning, then the writer keeps redialling with
  exponential backoff (50 ms doubling to 2 s) for the life of the process, so
  a collector started later still gets events. Meanwhile events wait in the
  queue until it is full; after that `emit` is a cheap drop (a length check).
- The body is encoded on the writer thread, so `emit` costs the same for a
  4-byte and a 4-MB body. The emitter owns `body` after `emit`: the caller must
  not mutate it. A body `json` cannot encode (NaN/Inf, a tensor, a lone
  surrogate) is counted `invalid` by the writer and skipped: `emit` has already
  returned True for it. An unknown kind or a non-dict body is refused at once.
- A write blocked for `write_timeout` (5 s) on a collector that stopped reading
  drops the connection and redials (the lines not written are dropped); a
  broken pipe or a peer that closed does the same.
- A new connection counts only once the collector has not refused it within
  `confirm_wait` (0.25 s with TLS, 10 ms otherwise; WIRE.md "TLS"): in TLS 1.3
  a refused client certificate arrives as an alert after the client's
  handshake completed. A refused connection sends nothing, is not counted in
  `connects`, puts the alert in `last_error` and backs off like a failed dial.
- After `os.fork` the child starts fresh: empty queue, zero counters, its own
  pid, no connection (the parent's socket is left to the parent) and a writer
  thread started on the first `emit`.
"""

from __future__ import annotations

import atexit
import base64
import collections
import json
import logging
import os
import select
import socket
import struct
import sys
import threading
import time
import weakref

from .config import Settings, SettingError, parse_addr

log = logging.getLogger("kvcanary")

VERSION = 1
KINDS = frozenset({"run.start", "run.end", "room.checksum", "replay", "canary.pages",
                   "graphdiff.sample", "session", "sched", "gpu", "cuda", "finding"})
_M64 = (1 << 64) - 1
_BATCH = 256  # events encoded and written per send
_CHUNK = 2048  # list elements per json.dumps call (keeps one C call, and the GIL, short)
# (logits travel as base64 strings, see f32s; long lists are e.g. canary page lists)
_YIELD_BYTES = 16 << 10  # encoded bytes between two voluntary GIL releases of the writer
_RUN_END = object()  # queue sentinel: close() asks for run.end here
QUEUE_BYTES = 64 << 20  # default byte bound of a process's queue (bodies estimated, then encoded lines)
_BATCH_BYTES = 1 << 20  # encoded bytes per send: a batch never holds 256 large lines at once
_SAMPLE = 8  # elements of a long list whose size stands for the rest


def body_size(v, depth: int = 0) -> int:
    """An estimate of the memory `v` holds and of its JSON, whichever is
    larger, in bytes: what queueing it costs. Cheap for any size: a long list
    is measured on _SAMPLE elements spread over it."""
    t = type(v)
    if t is str:
        return 49 + len(v)  # a str object and its JSON (ASCII; escapes are caught exactly after encoding)
    if t is float or t is int:
        return 32  # the object (24-28 B) and the list slot pointing to it; JSON of a float is <= 24 chars
    if v is None or t is bool:
        return 8
    if t is bytes or t is bytearray:
        return 33 + 2 * len(v)
    if t is dict:
        if depth > 8:
            return 64 + 64 * len(v)
        return 64 + sum(body_size(k, depth + 1) + body_size(x, depth + 1) for k, x in v.items())
    if t is list or t is tuple:
        n = len(v)
        if n == 0 or depth > 8:
            return 56 + 8 * n
        if n <= 2 * _SAMPLE:
            return 56 + 8 * n + sum(body_size(x, depth + 1) for x in v)
        step = n // _SAMPLE
        sampled = sum(body_size(v[i * step], depth + 1) for i in range(_SAMPLE))
        return 56 + 8 * n + sampled * n // _SAMPLE
    nbytes = getattr(v, "nbytes", None)  # a tensor or array (not encodable, but held until the writer says so)
    if isinstance(nbytes, int):
        return 64 + nbytes
    return 64


def hex64(v: int) -> str:
    """`0x` + 16 hex digits of v mod 2^64 (a digest on the wire)."""
    return "0x%016x" % (int(v) & _M64)


def dec64(v: int) -> str:
    """Decimal string of v mod 2^64 (a 64-bit id such as `room` on the wire)."""
    return str(int(v) & _M64)


def f32s(values) -> str:
    """A float32 vector in its JSON form (WIRE/event.go `Float32s`): base64 of
    the little-endian float32 bytes. NaN and ±Inf are allowed (logits).
    `values`: a CPU torch tensor (any float dtype) or a sequence of floats."""
    if hasattr(values, "detach"):  # a torch tensor: no per-element Python work
        import torch  # already loaded: the caller holds a tensor

        t = values.detach().reshape(-1).to("cpu", dtype=torch.float32).contiguous()
        try:
            raw = t.numpy().tobytes()
        except Exception:  # noqa: BLE001 - torch without numpy
            raw = struct.pack("<%df" % t.numel(), *t.tolist())
        if sys.byteorder != "little":
            raw = struct.pack("<%df" % t.numel(), *struct.unpack("=%df" % t.numel(), raw))
    else:
        raw = struct.pack("<%df" % len(values), *values)
    return base64.b64encode(raw).decode("ascii")


def _dumps(v) -> str:
    return json.dumps(v, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def _dumps_body(body: dict) -> str:
    """JSON of a body; long top-level lists (logits) go in chunks so no single
    C call holds the GIL for long while the step thread waits for it."""
    if not any(isinstance(v, (list, tuple)) and len(v) > _CHUNK for v in body.values()):
        return _dumps(body)
    parts = []
    for k, v in body.items():
        if not isinstance(k, str):
            raise TypeError("body key %r is not a string" % (k,))
        if isinstance(v, (list, tuple)) and len(v) > _CHUNK:
            items = []
            for i in range(0, len(v), _CHUNK):
                items.append(_dumps(list(v[i:i + _CHUNK]))[1:-1])
                time.sleep(0)  # let a waiting step thread have the GIL between chunks
            parts.append(_dumps(k) + ":[" + ",".join(items) + "]")
        else:
            parts.append(_dumps(k) + ":" + _dumps(v))
    return "{" + ",".join(parts) + "}"


def encode_event(kind: str, body: dict, ts_ns: int, proc: str = "", pid: int = 0, run: str = "",
                 role: str = "", rank: int = 0) -> bytes:
    """One JSON line (with its newline) in the form of WIRE.md:
    {"v":1,"kind":K,"ts_ns":N,"src":{"proc":P,"pid":PID,"role":R,"rank":N},"run":R,"body":{…}}.
    Empty src fields and an empty run are omitted (the collector fills them);
    rank is written only with a role (prefill|decode).
    Raises ValueError/TypeError for what JSON cannot carry (NaN, other types,
    invalid UTF-8); the emitter counts those as invalid.
    """
    if kind not in KINDS:
        raise ValueError("unknown kind %r" % (kind,))
    if type(ts_ns) is not int:
        raise TypeError("ts_ns %r is not an int" % (ts_ns,))
    src = {}
    if proc:
        src["proc"] = proc
    if pid:
        src["pid"] = pid
    if role:
        src["role"] = role
        if rank:
            src["rank"] = rank
    head = '{"v":1,"kind":%s,"ts_ns":%d' % (_dumps(kind), ts_ns)
    if src:
        head += ',"src":' + _dumps(src)
    if run:
        head += ',"run":' + _dumps(run)
    return (head + ',"body":' + _dumps_body(body) + "}\n").encode("utf-8")


def _default_proc() -> str:
    try:
        with open("/proc/self/comm", "rb") as f:
            name = f.read().decode("utf-8", "replace").strip()
            if name:
                return name
    except OSError:
        pass
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


def tls_context(cert: str, key: str, ca: str):
    """A client SSLContext for a kvcanary collector with mTLS: TLS 1.3 only,
    the collector's certificate checked against `ca` (and its host name),
    `cert`/`key` presented as this producer's identity (its subject CN
    becomes src.node at the collector). Raises OSError/ValueError naming the
    file that does not load."""
    import ssl

    missing = [n for n, v in (("KVCANARY_TLS_CERT", cert), ("KVCANARY_TLS_KEY", key), ("KVCANARY_TLS_CA", ca)) if not v]
    if missing:
        raise ValueError("TLS needs KVCANARY_TLS_CERT, _KEY and _CA; missing %s" % ", ".join(missing))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        ctx.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as e:
        raise ValueError("KVCANARY_TLS_CA %s: %s" % (ca, e)) from None
    try:
        ctx.load_cert_chain(certfile=cert, keyfile=key)
    except (OSError, ssl.SSLError) as e:
        raise ValueError("KVCANARY_TLS_CERT %s / KVCANARY_TLS_KEY %s: %s" % (cert, key, e)) from None
    return ctx


_live: "weakref.WeakSet[Emitter]" = weakref.WeakSet()


class Emitter:
    """See the module doc. `addr` None (or unparsable) makes a no-op emitter
    whose `emit` returns False; nothing here raises into the caller."""

    def __init__(self, addr: str | None, run: str = "", proc: str = "", queue_size: int = 4096, *,
                 queue_bytes: int = QUEUE_BYTES,
                 write_timeout: float = 5.0, connect_timeout: float = 1.0,
                 min_backoff: float = 0.05, max_backoff: float = 2.0,
                 role: str = "", rank: int = 0, tls: tuple | None = None,
                 confirm_wait: float | None = None):
        self.run = run or ""
        self.proc = proc or ""
        self.role, self.rank = "", 0
        self.set_source(role, rank)
        self._tls_files = tls  # (cert, key, ca) PEM paths for tcp://, or None
        self._ssl = None
        self.queue_size = max(1, int(queue_size))
        self.queue_bytes = max(1, int(queue_bytes))
        self.write_timeout = write_timeout
        self.connect_timeout = connect_timeout
        self.min_backoff = min_backoff
        # How long a new connection waits for the collector's verdict (WIRE.md
        # "TLS"): TLS 1.3 finishes the client's handshake before the collector
        # checks the client certificate, and a capped collector closes right
        # after accepting. Default 0.25 s with TLS, 10 ms otherwise.
        self.confirm_wait = confirm_wait if confirm_wait and confirm_wait > 0 else (0.25 if tls is not None else 0.01)
        self.max_backoff = max(max_backoff, min_backoff)
        self.addr = None
        self.noop = addr is None
        if addr is not None:
            try:
                self.addr = parse_addr(addr)
            except SettingError as e:
                log.warning("kvcanary: %s; events are not sent", e)
                self.noop = True
        if tls is not None and not self.noop:
            try:
                self._ssl = tls_context(*tls)
            except (OSError, ValueError) as e:
                log.warning("kvcanary: TLS settings: %s; events are not sent", e)
                self.noop = True
        self._fresh()
        if not self.noop:
            _live.add(self)

    def set_source(self, role: str, rank: int = 0) -> bool:
        """Name this process's place in a PD deployment: role "prefill" or
        "decode" (or "" for none) and its TP rank, written in every event's
        src from now on. A value outside the model is refused (False)."""
        if role not in ("", "prefill", "decode") or type(rank) is not int or rank < 0 or (rank and not role):
            log.warning("kvcanary: src role %r rank %r is not prefill|decode with a rank >= 0; not set", role, rank)
            return False
        self.role, self.rank = role, rank
        return True

    # --- state -----------------------------------------------------------------

    def _fresh(self) -> None:
        """(Re)initialise per-process state: at construction and in a forked child."""
        self._pid = os.getpid()
        self._t0 = time.monotonic_ns()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._q: collections.deque = collections.deque()
        self._qbytes = 0  # queued bodies (estimated) + encoded lines not yet written (exact)
        self._inflight = 0  # events in the batch being written
        self._dropped_kinds: dict = {}  # kind -> events of it dropped (queue full, close, write failed)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._idle = False
        self._sending = False  # the writer is inside a socket write (tests, bench)
        self._abandon = False
        self._warned: set = set()
        self._sent = self._dropped = self._invalid = self._connects = 0
        self._invalid_kinds: dict = {}  # kind -> events of it refused or not encodable (run.end names them)
        self._invalid_why = ""  # the last reason, for run.end
        self._last_error = ""
        self._run_end_sent = False
        if not hasattr(self, "_run_end_sources"):
            self._run_end_sources: list = []  # survive a fork's reset: the binding registered once

    def _after_fork_child(self) -> None:
        old = self._sock
        self._fresh()
        if old is not None:
            try:
                old.close()  # the child's copy of the parent's fd; close, never shutdown (that would cut the parent off)
            except OSError:
                pass

    @property
    def stats(self) -> dict:
        """{"sent", "dropped", "invalid", "connects"} so far."""
        with self._lock:
            return {"sent": self._sent, "dropped": self._dropped,
                    "invalid": self._invalid, "connects": self._connects}

    @property
    def last_error(self) -> str:
        return self._last_error

    @property
    def pid(self) -> int:
        return self._pid

    # --- the step thread's side ------------------------------------------------

    def emit(self, kind: str, body: dict, ts_ns: int | None = None) -> bool:
        """Queue one event; False when it is dropped (queue full, closed, no-op
        emitter) or refused (unknown kind, body not a dict). Never raises, never
        does I/O. The emitter owns `body` afterwards (do not mutate it)."""
        try:
            if ts_ns is None:
                ts_ns = time.time_ns()
            if self._pid != os.getpid():  # forked without Python's at-fork hooks
                self._after_fork_child()
            with self._lock:
                if kind not in KINDS or type(body) is not dict:
                    self._invalid += 1
                    k = kind if kind in KINDS else "unknown kind"
                    self._invalid_kinds[k] = self._invalid_kinds.get(k, 0) + 1
                    self._last_error = self._invalid_why = "emit: kind %r with a %s body refused" % (
                        kind, type(body).__name__)
                    return False
                if self._closed or self.noop or len(self._q) >= self.queue_size:
                    self._drop_locked(kind)
                    return False
            size = body_size(body)  # outside the lock: the writer may need it meanwhile
            with self._lock:
                if self._closed or self._qbytes + size > self.queue_bytes:
                    self._drop_locked(kind)
                    return False
                self._qbytes += size
                self._q.append((kind, body, ts_ns, size))
                start = self._thread is None
                if start:
                    self._thread = threading.Thread(target=self._run, name="kvcanary-emitter", daemon=True)
            if start:
                self._thread.start()
            elif self._idle:
                self._wake.set()
            return True
        except Exception:  # noqa: BLE001 - never into the engine
            return False

    def _drop_locked(self, kind: str, n: int = 1) -> None:
        self._dropped += n
        self._dropped_kinds[kind] = self._dropped_kinds.get(kind, 0) + n

    @property
    def dropped_kinds(self) -> dict:
        """{kind: events of it dropped} so far."""
        with self._lock:
            return dict(self._dropped_kinds)

    # --- shutdown --------------------------------------------------------------

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued, then send `run.end` {"wall_ns", "dropped", "sent"}
        and disconnect, all within about `timeout` seconds: after 3/4 of it
        the writer is cut off (its socket shut down) and given the rest to
        stop. Events still queued then are counted as dropped. Idempotent;
        never raises."""
        try:
            deadline = time.monotonic() + max(0.0, timeout)
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                self._q.append(_RUN_END)
                thread = self._thread
                if thread is None and not self.noop:
                    thread = self._thread = threading.Thread(target=self._run, name="kvcanary-emitter",
                                                             daemon=True)
                    thread.start()
            if thread is None:
                return
            self._stop.set()
            self._wake.set()
            thread.join(0.75 * max(0.0, timeout))
            if thread.is_alive():
                with self._lock:
                    left = sum(1 for it in self._q if it is not _RUN_END) + self._inflight
                if left:
                    log.warning("kvcanary: the collector at %s took no more events within %gs of close; "
                                "dropping the %d events still queued or being written", self.addr, timeout, left)
                else:
                    log.warning("kvcanary: the collector at %s did not take run.end within %gs of close; "
                                "it will not know this producer's drops", self.addr, timeout)
                self._abandon = True
                s = self._sock
                if s is not None:
                    try:
                        s.shutdown(socket.SHUT_RDWR)  # unblocks a write stuck on a stalled collector
                    except OSError:
                        pass
                thread.join(max(0.05, deadline - time.monotonic()))
            self._drop_queued()
        except Exception:  # noqa: BLE001
            pass

    def _drop_queued(self) -> None:
        with self._lock:
            for it in self._q:
                if it is not _RUN_END:
                    self._drop_locked(it[0])
                    self._qbytes -= it[3]
            self._q.clear()

    # --- the writer thread -----------------------------------------------------

    def _warn_once(self, key: str, msg: str, *args) -> None:
        if key in self._warned:
            log.debug(msg, *args)
            return
        self._warned.add(key)
        log.warning(msg, *args)

    def _connect(self, timeout: float) -> bool:
        a = self.addr
        try:
            if a.scheme == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.settimeout(timeout)
                    s.connect(a.path)
                except BaseException:
                    s.close()
                    raise
            else:
                s = socket.create_connection((a.host, a.port), timeout=timeout)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._ssl is not None:
                    try:
                        s = self._ssl.wrap_socket(s, server_hostname=a.host)  # handshakes, within timeout
                    except BaseException:
                        s.close()
                        raise
        except OSError as e:
            self._last_error = "connect %s: %s" % (a, e)
            self._warn_once("connect", "kvcanary: no collector at %s (%s); events are dropped until one "
                            "answers (retrying every <= %gs)", a, e, self.max_backoff)
            return False
        why = self._confirm(s)
        if why:
            try:
                s.close()
            except OSError:
                pass
            self._last_error = "connect %s: %s" % (a, why)
            self._warn_once("refused", "kvcanary: the collector at %s refused this producer (%s); events are "
                            "dropped (retrying every <= %gs)", a, why, self.max_backoff)
            return False
        self._sock = s
        with self._lock:
            self._connects += 1
        if "connect" in self._warned:
            log.info("kvcanary: connected to %s", a)
        return True

    def _confirm(self, s) -> str:
        """Wait confirm_wait for the collector's verdict on a new connection:
        "" when it is accepted (the read times out: the collector never
        writes), else why not (a TLS alert such as a refused client
        certificate, EOF, or bytes a collector never sends). Leaves s with
        the write timeout."""
        try:
            s.settimeout(self.confirm_wait)
            try:
                data = s.recv(1)
            except socket.timeout:
                return ""
            except OSError as e:  # ssl.SSLError included: the collector's alert
                return "the collector refused the connection: %s" % e
            if not data:
                return "the collector closed the connection (refused; see its refused_by)"
            return "the collector sent bytes, which it never does: not a kvcanary collector?"
        finally:
            try:
                s.settimeout(self.write_timeout)
            except OSError:
                pass

    def _disconnect(self) -> None:
        s, self._sock = self._sock, None
        if s is not None:
            try:
                s.close()
            except OSError:
                pass

    def _peer_closed(self) -> bool:
        """True when the collector closed its end (a write would be lost or fail)."""
        try:
            p = select.poll()
            p.register(self._sock, select.POLLIN | select.POLLHUP)
            if not p.poll(0):
                return False  # nothing to read: the connection is alive
            if self._ssl is not None and self.addr.scheme == "tcp":
                # TLS: recv takes no flags; the collector sends no application
                # data (nor session tickets), so a readable record is its
                # close_notify or EOF. Read it without waiting.
                import ssl

                self._sock.setblocking(False)
                try:
                    return self._sock.recv(1) == b""
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    return False
                finally:
                    self._sock.settimeout(self.write_timeout)
            # readable: EOF (closed) or bytes a collector never sends; the socket
            # has a timeout, but poll said readable, so this recv does not wait
            return self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError, socket.timeout):
            return False
        except OSError:
            return True

    def _encode(self, kind, body, ts_ns):
        try:
            return encode_event(kind, body, ts_ns, self.proc, self._pid, self.run, self.role, self.rank)
        except Exception as e:  # noqa: BLE001 - NaN, a tensor, bad UTF-8: count, never raise
            with self._lock:
                self._invalid += 1
                self._invalid_kinds[kind] = self._invalid_kinds.get(kind, 0) + 1
                self._last_error = self._invalid_why = "encode %s: %s" % (kind, e)
            self._warn_once("invalid", "kvcanary: %s event not sent: %s", kind, e)
            return None

    def add_run_end_source(self, fn) -> None:
        """Register fn() -> (dropped: int, error: str), asked when run.end is
        built: evidence lost before the emitter (work dropped or failed on the
        way to an event, instruments switched off) is reported with the
        emitter's own drops, so a collector never shows a partial run as
        whole."""
        self._run_end_sources.append(fn)

    def _run_end_line(self) -> bytes:
        """run.end: dropped counts the events dropped and those refused or
        not encodable (a NaN, a lone surrogate: evidence lost all the same),
        and error names the latter by kind, then the run_end sources' notes;
        sent counts the events written to a collector over every connection
        (run.end aside), so a reader holding fewer knows some were lost on
        the way (WIRE.md, "run.end's sent")."""
        with self._lock:
            dropped = self._dropped + self._invalid
            sent = self._sent  # every connection's; the queue ahead of run.end is written
            invalid, kinds, why = self._invalid, dict(self._invalid_kinds), self._invalid_why
            dkinds = dict(self._dropped_kinds)
        errors = []
        if dkinds:
            errors.append("%d event%s dropped (queue full at %d events or %d MiB, a lost connection, or close): %s" % (
                sum(dkinds.values()), "" if sum(dkinds.values()) == 1 else "s", self.queue_size, self.queue_bytes >> 20,
                ", ".join("%s %d" % kv for kv in sorted(dkinds.items()))))
        if invalid:
            errors.append("%d event%s not sent: refused or not encodable (%s, last: %s)" % (
                invalid, "" if invalid == 1 else "s", ", ".join("%s %d" % kv for kv in sorted(kinds.items())), why[:200]))
        for fn in list(self._run_end_sources):
            try:
                d, err = fn()
                dropped += max(0, int(d))
                if err:
                    errors.append(str(err))
            except Exception as e:  # noqa: BLE001 - a report must not stop run.end
                errors.append("run.end report failed: %s" % e)
        body = {"wall_ns": max(0, time.monotonic_ns() - self._t0)}
        if dropped:
            body["dropped"] = dropped
        if sent:
            body["sent"] = sent
        if errors:
            body["error"] = "; ".join(errors)
        return encode_event("run.end", body, time.time_ns(), self.proc, self._pid, self.run, self.role, self.rank)

    def _write(self, data: bytes, n: int, kinds=None) -> bool:
        """Write n encoded lines (of kinds, when given); on failure count the
        lines not written completely as dropped and disconnect."""
        view = memoryview(data)
        off = 0
        deadline = time.monotonic() + self.write_timeout
        self._sending = True
        try:
            while off < len(data):
                if self._abandon:
                    raise OSError("close timed out")
                try:
                    off += self._sock.send(view[off:])
                except socket.timeout:
                    if time.monotonic() >= deadline:
                        raise OSError("write blocked for %gs: collector not reading" % self.write_timeout)
            with self._lock:
                self._sent += n
            return True
        except OSError as e:
            whole = data.count(b"\n", 0, off)
            with self._lock:
                self._sent += whole
                if kinds is not None:
                    for k in kinds[whole:]:
                        self._drop_locked(k)
                else:
                    self._dropped += n - whole
            self._last_error = "write to %s: %s" % (self.addr, e)
            if not self._abandon:  # close() gave up on a stalled collector: it said so already
                self._warn_once("write", "kvcanary: lost the collector at %s (%s); reconnecting", self.addr, e)
            self._disconnect()
            return False
        finally:
            self._sending = False

    def _run(self) -> None:
        backoff = self.min_backoff
        try:
            while True:
                if self._abandon:
                    break
                stopping = self._stop.is_set()
                if self._sock is not None and self._peer_closed():
                    self._warn_once("write", "kvcanary: the collector at %s closed the connection; "
                                    "reconnecting", self.addr)
                    self._disconnect()
                if self._sock is None:
                    if not self._connect(self.connect_timeout):
                        if stopping:
                            break
                        self._stop.wait(backoff)  # close() cuts the wait short
                        backoff = min(2 * backoff, self.max_backoff)
                        continue
                    backoff = self.min_backoff
                lines, kinds, n, end, since_yield, nbytes = [], [], 0, False, 0, 0
                while n < _BATCH and nbytes < _BATCH_BYTES:
                    try:
                        item = self._q.popleft()
                    except IndexError:
                        break
                    if item is _RUN_END:
                        end = True
                        break
                    kind, body, ts_ns, size = item
                    line = self._encode(kind, body, ts_ns)
                    del item, body  # the body's memory goes now, not with the batch
                    exact = len(line) if line is not None else 0
                    with self._lock:
                        self._qbytes += exact - size  # the estimate becomes the exact size
                    if line is not None:
                        lines.append(line)
                        kinds.append(kind)
                        n += 1
                        nbytes += exact
                        since_yield += exact
                        if since_yield > _YIELD_BYTES:
                            # hand the GIL back now and then, so a step thread waiting
                            # for it waits one event's encoding, not a switch interval
                            time.sleep(0)
                            since_yield = 0
                ok = True
                if n:
                    self._inflight = n
                    data = b"".join(lines)
                    lines = None
                    ok = self._write(data, n, kinds)
                    data = None
                    self._inflight = 0
                    with self._lock:
                        self._qbytes -= nbytes
                if not ok:
                    continue  # redial; the failed lines are counted dropped
                if end:
                    line = self._run_end_line()
                    if self._write(line, 1):
                        self._run_end_sent = True
                    break
                if n:
                    continue
                self._idle = True
                if not self._q:
                    self._wake.wait()
                    self._wake.clear()
                self._idle = False
        except Exception as e:  # noqa: BLE001 - the writer dies quietly, emit keeps dropping
            self._last_error = "writer: %s" % e
            log.warning("kvcanary: emitter writer stopped: %s", e)
            with self._lock:
                self.noop = True
        finally:
            self._disconnect()


def _after_fork_in_child() -> None:
    for em in list(_live):
        try:
            em._after_fork_child()
        except Exception:  # noqa: BLE001
            pass


def _close_all_at_exit() -> None:
    for em in list(_live):
        em.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)

_default: Emitter | None = None
_default_lock = threading.Lock()


def get_emitter(proc: str | None = None) -> Emitter:
    """The process-wide emitter, built on first use from `Settings.from_env()`;
    a no-op emitter when KVCANARY_ADDR is unset. `proc` names the process in
    `src` (default: /proc/self/comm). A forked child gets the same object,
    reset for the child."""
    global _default
    em = _default
    if em is not None:
        return em
    with _default_lock:
        if _default is None:
            s = Settings.from_env()
            s.apply_logging()
            tls = (s.tls_cert, s.tls_key, s.tls_ca) if (s.tls_cert or s.tls_key or s.tls_ca) else None
            _default = Emitter(s.addr, run=s.run, proc=proc if proc is not None else _default_proc(),
                               queue_size=s.queue, tls=tls)
        return _default

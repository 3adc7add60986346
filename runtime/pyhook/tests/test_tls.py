"""The emitter over mutual TLS (WIRE.md "TLS"): TLS 1.3 with a client
certificate from KVCANARY_TLS_CERT/_KEY/_CA, src role and rank on every line.

The certificates in tls/ are test fixtures made with kvcanary's internal/pki
(a CA, a collector certificate for 127.0.0.1/localhost, a client certificate
"py-prefill-host", and a client certificate from another CA), valid 2026-2126.
The server here is a test double with the collector's TLS settings.
"""

import json
import os
import socket
import ssl
import threading

import pytest

from conftest import accept_each, recv_lines
from kvcanary import emitter as emitter_mod
from kvcanary.config import Settings
from kvcanary.emitter import Emitter, tls_context

TLS = os.path.join(os.path.dirname(__file__), "tls")
HANG = 30.0  # hang guard, never a timing assertion


def fx(name):
    return os.path.join(TLS, name)


class TLSCollector:
    """Accepts TLS 1.3 connections that present a client certificate of the
    fixture CA; records each connection's peer CN and JSON lines, or the
    handshake error."""

    def __init__(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_cert_chain(fx("server.pem"), fx("server-key.pem"))
        ctx.load_verify_locations(fx("ca.pem"))
        ctx.num_tickets = 0  # like the Go collector: no session tickets
        self.ctx = ctx
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = "tcp://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.events, self.peers, self.refused = [], [], []
        self.cv = threading.Condition()
        threading.Thread(target=accept_each, args=(self.sock, self._serve_in_thread), daemon=True).start()

    def _serve_in_thread(self, raw):
        threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw):
        try:
            conn = self.ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError) as e:
            self._refuse(e)
            raw.close()
            return
        cn = dict(x[0] for x in conn.getpeercert()["subject"])["commonName"]
        with self.cv:
            self.peers.append((cn, conn.version()))
            self.cv.notify_all()
        with conn:
            err = recv_lines(conn.recv, self._got, errors=(ssl.SSLError, OSError))
            if err is not None:
                self._refuse(err)

    def _refuse(self, e):
        with self.cv:
            self.refused.append(str(e))
            self.cv.notify_all()

    def _got(self, lines):
        with self.cv:
            self.events.extend(json.loads(l) for l in lines if l.strip())
            self.cv.notify_all()

    def wait(self, cond):
        with self.cv:
            return self.cv.wait_for(lambda: cond(self), timeout=HANG)

    def close(self):
        self.sock.close()


@pytest.fixture
def tls_collector():
    c = TLSCollector()
    yield c
    c.close()


def test_emitter_sends_over_mtls_with_role_and_rank(tls_collector):
    em = Emitter(tls_collector.addr, run="r", proc="sglang", role="prefill", rank=3,
                 tls=(fx("client.pem"), fx("client-key.pem"), fx("ca.pem")))
    for i in range(50):
        assert em.emit("replay", {"step": i, "bs": 1, "bucket": 1, "mode": "graph", "dur_ns": 1})
    em.close()
    assert tls_collector.wait(lambda c: len(c.events) == 51), (tls_collector.events[-2:], tls_collector.refused)
    assert tls_collector.peers == [("py-prefill-host", "TLSv1.3")]
    for ev in tls_collector.events:
        assert ev["src"]["role"] == "prefill" and ev["src"]["rank"] == 3, ev["src"]
    assert tls_collector.events[-1]["kind"] == "run.end"
    assert em.stats["sent"] == 51 and em.stats["dropped"] == 0


def test_emitter_with_a_foreign_certificate_is_refused(tls_collector):
    em = Emitter(tls_collector.addr, tls=(fx("other-client.pem"), fx("other-client-key.pem"), fx("ca.pem")),
                 min_backoff=0.01, max_backoff=0.05)
    em.emit("replay", {"step": 1, "bs": 1, "bucket": 1, "mode": "graph", "dur_ns": 1})
    assert tls_collector.wait(lambda c: len(c.refused) >= 1)
    em.close(timeout=0.5)
    assert tls_collector.events == [] and tls_collector.peers == []
    assert "certificate" in tls_collector.refused[0].lower(), tls_collector.refused


def test_refused_emitter_counts_nothing_sent_and_backs_off(tls_collector):
    # TLS 1.3: the client's handshake completes before the collector checks
    # the client certificate. The emitter waits for the verdict: a refused
    # producer counts every event dropped, no connection, the alert in
    # last_error, and backs off (a one-hour backoff: it dials on the first
    # event and once more at close, never in a loop).
    em = Emitter(tls_collector.addr, tls=(fx("other-client.pem"), fx("other-client-key.pem"), fx("ca.pem")),
                 min_backoff=3600, max_backoff=3600)
    for i in range(30):
        assert em.emit("replay", {"step": i, "bs": 1, "bucket": 1, "mode": "graph", "dur_ns": 1})
    assert tls_collector.wait(lambda c: len(c.refused) >= 1)
    em.close(timeout=HANG)
    st = em.stats
    assert st["sent"] == 0 and st["connects"] == 0 and st["dropped"] == 30, st
    assert "unknown ca" in em.last_error.lower() or "unknown_ca" in em.last_error.lower(), em.last_error
    assert tls_collector.events == []
    assert len(tls_collector.refused) <= 2, tls_collector.refused


def test_plain_emitter_cannot_talk_to_a_tls_collector(tls_collector):
    em = Emitter(tls_collector.addr, min_backoff=0.01, max_backoff=0.05)
    em.emit("replay", {"step": 1, "bs": 1, "bucket": 1, "mode": "graph", "dur_ns": 1})
    assert tls_collector.wait(lambda c: len(c.refused) >= 1)
    em.close(timeout=0.5)
    assert tls_collector.events == []


def test_tls_settings_from_env_and_errors(monkeypatch, caplog):
    env = {"KVCANARY_ADDR": "tcp://127.0.0.1:1", "KVCANARY_TLS_CERT": fx("client.pem"),
           "KVCANARY_TLS_KEY": fx("client-key.pem"), "KVCANARY_TLS_CA": fx("ca.pem")}
    s = Settings.from_env(env)
    assert (s.tls_cert, s.tls_key, s.tls_ca) == (fx("client.pem"), fx("client-key.pem"), fx("ca.pem"))
    ctx = tls_context(s.tls_cert, s.tls_key, s.tls_ca)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3 and ctx.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ValueError, match="KVCANARY_TLS_KEY"):
        tls_context(fx("client.pem"), "", fx("ca.pem"))
    with pytest.raises(ValueError, match="nonexistent"):
        tls_context(fx("client.pem"), fx("client-key.pem"), "/nonexistent/ca.pem")
    # A partial or broken TLS setting makes a no-op emitter (one warning),
    # never a plain-text fallback.
    em = Emitter("tcp://127.0.0.1:1", tls=(fx("client.pem"), "", fx("ca.pem")))
    assert em.noop and not em.emit("replay", {"mode": "graph"})
    assert any("TLS settings" in r.getMessage() for r in caplog.records)


def test_set_source_refuses_values_outside_the_model():
    em = Emitter(None)
    assert not em.set_source("Prefill", 0)
    assert not em.set_source("", 2)
    assert not em.set_source("decode", -1)
    assert em.set_source("decode", 1) and (em.role, em.rank) == ("decode", 1)
    line = emitter_mod.encode_event("replay", {"mode": "graph"}, 5, role="decode", rank=0)
    assert json.loads(line)["src"] == {"role": "decode"}


def test_role_of_reads_disaggregation_mode():
    import enum
    import types

    from kvcanary.sglang import access as A

    class DisaggregationMode(enum.Enum):
        NULL = "null"
        PREFILL = "prefill"
        DECODE = "decode"

    assert A.role_of(types.SimpleNamespace(disaggregation_mode=DisaggregationMode.PREFILL)) == "prefill"
    queue = types.SimpleNamespace(scheduler=types.SimpleNamespace(disaggregation_mode=DisaggregationMode.DECODE))
    assert A.role_of(queue) == "decode"
    sa = types.SimpleNamespace(server_args=types.SimpleNamespace(disaggregation_mode="decode"))
    assert A.role_of(sa) == "decode"
    assert A.role_of(types.SimpleNamespace(disaggregation_mode=DisaggregationMode.NULL)) == ""
    assert A.role_of(object()) == ""

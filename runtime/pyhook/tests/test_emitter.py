import glob
import json
import logging
import multiprocessing
import os
import socket
import tempfile
import time

import pytest
import torch

from conftest import Collector, REPO
from kvcanary import emitter as emitter_mod
from kvcanary.emitter import Emitter, KINDS, dec64, encode_event, f32s, get_emitter, hex64

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "python_events.jsonl")
HANG = 30.0  # hang guard for waits on another thread; never a timing assertion
NOT_BLOCKED = 5.0  # an emit that blocked on a stalled writer waits its 60 s write_timeout


def replay_body(step):
    return {"step": step, "bs": 8, "bucket": 8, "mode": "graph", "dur_ns": 41000}


def test_hex64_dec64():
    assert hex64(0) == "0x0000000000000000"
    assert hex64(-1) == "0xffffffffffffffff"
    assert hex64(1 << 64 | 5) == "0x0000000000000005"
    assert dec64(-1) == "18446744073709551615"
    assert dec64(9223372036854775813) == "9223372036854775813"


def test_events_arrive_with_envelope(collector):
    em = Emitter(collector.addr, run="r1", proc="sglang-decode")
    for i in range(100):
        assert em.emit("replay", replay_body(i), ts_ns=1_700_000_000_000_000_000 + i)
    em.close()
    assert collector.wait(lambda c: len(c.events) == 101), collector.kinds()[-3:]
    assert collector.errors == []
    evs = collector.events
    for i, ev in enumerate(evs[:100]):
        assert list(ev) == ["v", "kind", "ts_ns", "src", "run", "body"]
        assert ev["v"] == 1 and ev["kind"] == "replay" and ev["run"] == "r1"
        assert ev["ts_ns"] == 1_700_000_000_000_000_000 + i
        assert ev["src"] == {"proc": "sglang-decode", "pid": os.getpid()}
        assert ev["body"] == replay_body(i)
    end = evs[100]
    assert end["kind"] == "run.end" and end["body"]["wall_ns"] > 0
    assert "dropped" not in end["body"]  # nothing dropped (Go: omitempty)
    assert em.stats == {"sent": 101, "dropped": 0, "invalid": 0, "connects": 1}  # run.end included
    # every line is one JSON object; no NaN spellings
    assert all(line.startswith(b'{"v":1,') for line in collector.lines)


def test_default_ts_and_empty_src_fields(unix_collector):
    em = Emitter(unix_collector.addr)  # no run, no proc: omitted, the collector fills them
    before = time.time_ns()
    em.emit("replay", replay_body(1))
    em.close()
    assert unix_collector.wait(lambda c: len(c.events) == 2)
    ev = unix_collector.events[0]
    assert "run" not in ev and ev["src"] == {"pid": os.getpid()}
    assert before <= ev["ts_ns"] <= time.time_ns()


def test_64bit_values_are_strings(unix_collector):
    em = Emitter(unix_collector.addr, proc="p")
    room = (1 << 63) + 5
    em.emit("room.checksum", {"room": dec64(room), "side": "decode", "seq_len": 1, "pages": 1,
                              "bsum": hex64(-2), "xxh3": hex64(0)})
    em.close()
    assert unix_collector.wait(lambda c: len(c.events) == 2)
    body = unix_collector.events[0]["body"]
    assert body["room"] == str(room) and int(body["room"]) == room
    assert body["bsum"] == "0xfffffffffffffffe"


def test_invalid_bodies_counted_never_raised(unix_collector, caplog):
    em = Emitter(unix_collector.addr)
    with caplog.at_level(logging.WARNING, logger="kvcanary"):
        assert em.emit("no.such.kind", {}) is False
        assert em.emit("replay", ["not", "a", "dict"]) is False
        assert em.emit("sched", {"token_usage": float("nan")})  # found by the writer
        assert em.emit("gpu", {"x": object()})
        assert em.emit("finding", {"summary": "lone \ud800 surrogate"})
        assert em.emit("replay", replay_body(7))
        em.close()
    assert unix_collector.wait(lambda c: len(c.events) == 2)
    assert [e["kind"] for e in unix_collector.events] == ["replay", "run.end"]
    assert em.stats["invalid"] == 5 and em.stats["sent"] == 2  # replay + run.end
    assert b"NaN" not in b"".join(unix_collector.lines)
    # one warning for the encoding failures, not one per event
    assert sum("not sent" in r.getMessage() for r in caplog.records) == 1


def test_run_end_counts_events_it_could_not_encode(unix_collector):
    # a divergent sample lost to a lone surrogate (or a NaN) is evidence lost:
    # run.end counts it in dropped and names it, never "dropped 0"
    em = Emitter(unix_collector.addr)
    ok = {"step": 1, "request": "r0", "seq_len": 900, "source": "next_token_logits", "k": 3,
          "topk_graph": [1, 2, 3], "topk_eager": [1, 2, 3]}
    bad = dict(ok, step=2, request="r1\udc80", topk_graph=[7, 8, 9])
    assert em.emit("graphdiff.sample", ok) and em.emit("graphdiff.sample", bad)
    assert em.emit("replay", ["not", "a", "dict"]) is False
    em.close()
    assert unix_collector.wait(lambda c: c.kinds()[-1:] == ["run.end"])
    end = unix_collector.events[-1]["body"]
    assert end["dropped"] == 2, end
    assert end["error"].startswith("2 events not sent: refused or not encodable (graphdiff.sample 1, replay 1, last: "), end
    assert em.stats["invalid"] == 2 and em.stats["dropped"] == 0


def test_f32s_is_base64_of_little_endian_float32():
    import base64
    import struct
    assert f32s([]) == ""
    raw = base64.b64decode(f32s([1.0, -2.5, float("inf")]))
    assert struct.unpack("<3f", raw) == (1.0, -2.5, float("inf"))
    t = torch.tensor([0.1, float("nan")], dtype=torch.float16)
    got = struct.unpack("<2f", base64.b64decode(f32s(t)))
    assert got[0] == struct.unpack("<f", struct.pack("<f", float(t[0])))[0] and got[1] != got[1]
    assert f32s(torch.tensor([[1.0, 2.0]])) == f32s([1.0, 2.0])


def test_long_lists_encode_in_chunks_identically():
    logits = [float(i) / 7 for i in range(3 * emitter_mod._CHUNK + 11)]
    body = {"step": 1, "request": "r", "graph": logits, "eager": logits[:5]}
    line = encode_event("graphdiff.sample", body, 5)
    assert json.loads(line)["body"] == body
    assert line == (json.dumps({"v": 1, "kind": "graphdiff.sample", "ts_ns": 5, "body": body},
                               separators=(",", ":")) + "\n").encode()
    with pytest.raises(ValueError):
        encode_event("graphdiff.sample", {"graph": logits[:-1] + [float("inf")]}, 5)


def test_stalled_collector_emit_returns_while_writer_blocked():
    """A collector that accepts and never reads: the writer blocks in a socket
    write, the queue fills, and emit keeps returning (False) at once."""
    col = Collector("unix", read=False, rcvbuf=1024)
    try:
        em = Emitter(col.addr, proc="p", queue_size=64, write_timeout=60.0)
        body = {"step": 0, "policy": "live", "pages_total": 1000, "pages_checked": 1000,
                "running": ["req-%d" % i for i in range(20)]}
        worst = 0.0
        results = []
        for i in range(10_000):
            t = time.perf_counter()
            results.append(em.emit("canary.pages", dict(body, step=i)))
            worst = max(worst, time.perf_counter() - t)
        deadline = time.monotonic() + HANG
        while not (em._sending and len(em._q) >= em.queue_size) and time.monotonic() < deadline:
            em.emit("canary.pages", body)
            time.sleep(0.01)
        assert em._sending, "writer never blocked in a write: the stall did not happen"
        assert len(em._q) >= em.queue_size
        # the writer is provably blocked in a socket write: emit still returns, dropping
        t = time.perf_counter()
        assert em.emit("canary.pages", body) is False
        # Hang bounds, not timings: an emit that waited for the blocked writer
        # would take its 60 s write_timeout; a loaded CI machine can stall any
        # call for tens of ms, so nothing tighter is asserted here (bench.py
        # has the µs figure).
        assert time.perf_counter() - t < NOT_BLOCKED
        assert worst < NOT_BLOCKED, "emit took %.1f ms with a stalled collector" % (worst * 1e3)
        assert results.count(False) > 0
        t = time.monotonic()
        em.close(timeout=0.2)  # the flush cannot finish: close gives up, never hangs
        assert time.monotonic() - t < 5.0
        st = em.stats
        assert st["invalid"] == 0
        assert st["dropped"] >= results.count(False)
        assert not em._thread.is_alive()
    finally:
        col.close()


def test_absent_collector_one_warning_then_noop(caplog):
    d = tempfile.mkdtemp()
    addr = "unix://" + os.path.join(d, "nobody.sock")
    with caplog.at_level(logging.WARNING, logger="kvcanary"):
        em = Emitter(addr, queue_size=100, min_backoff=0.001, max_backoff=0.01)
        ok = [em.emit("replay", replay_body(i)) for i in range(1000)]
        deadline = time.monotonic() + HANG
        while em.stats["connects"] == 0 and not em.last_error and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # let the writer retry several times (each retry must stay quiet)
        em.close(timeout=0.5)
    assert ok.count(True) == 100 and ok.count(False) == 900
    assert em.stats == {"sent": 0, "dropped": 1000, "invalid": 0, "connects": 0}
    warns = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warns) == 1 and "no collector at " + addr in warns[0], warns
    os.rmdir(d)


def test_collector_started_later_gets_events_and_run_end_carries_dropped():
    d = tempfile.mkdtemp()
    path = os.path.join(d, "late.sock")
    em = Emitter("unix://" + path, queue_size=10, min_backoff=0.001, max_backoff=0.02)
    ok = [em.emit("replay", replay_body(i)) for i in range(25)]
    assert ok.count(False) == 15  # the queue holds 10 while nobody answers
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    conn, _ = srv.accept()
    em.close()
    data = b""
    while True:
        b = conn.recv(65536)
        if not b:
            break
        data += b
    conn.close()
    srv.close()
    os.unlink(path)
    os.rmdir(d)
    evs = [json.loads(x) for x in data.splitlines()]
    assert [e["body"]["step"] for e in evs[:-1]] == list(range(10))
    assert evs[-1]["kind"] == "run.end" and evs[-1]["body"]["dropped"] == 15


def test_reconnects_after_collector_drops_the_connection(unix_collector):
    em = Emitter(unix_collector.addr, min_backoff=0.001, max_backoff=0.02)
    em.emit("replay", replay_body(0))
    assert unix_collector.wait(lambda c: len(c.events) == 1)
    with unix_collector._cv:
        for c in unix_collector.conns:
            c.shutdown(socket.SHUT_RDWR)
            c.close()
    deadline = time.monotonic() + HANG
    i = 1
    while em.stats["connects"] < 2 and time.monotonic() < deadline:
        em.emit("replay", replay_body(i))
        i += 1
        time.sleep(0.005)
    em.emit("replay", replay_body(9999))
    em.close()
    assert em.stats["connects"] >= 2
    assert unix_collector.wait(lambda c: c.kinds()[-1:] == ["run.end"])
    steps = [e["body"]["step"] for e in unix_collector.events if e["kind"] == "replay"]
    assert steps[0] == 0 and steps[-1] == 9999
    st = em.stats
    assert st["sent"] + st["dropped"] == i + 2  # every event (and run.end) accounted for


def test_concurrent_emitters_account_for_every_event(unix_collector):
    import threading
    em = Emitter(unix_collector.addr, queue_size=256)
    results = [[] for _ in range(4)]

    def worker(k):
        for i in range(2000):
            results[k].append(em.emit("replay", replay_body(k * 10_000 + i)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(HANG)
    em.close(timeout=HANG)
    ok = sum(r.count(True) for r in results)
    st = em.stats
    assert st["dropped"] == 8000 - ok and st["sent"] == ok + 1  # + run.end
    assert unix_collector.wait(lambda c: len(c.events) == ok + 1)
    steps = [e["body"]["step"] for e in unix_collector.events[:-1]]
    assert len(set(steps)) == ok
    for k in range(4):  # each thread's events arrive in its order
        mine = [s for s in steps if s // 10_000 == k]
        assert mine == sorted(mine)


def test_noop_emitter_and_close_idempotent():
    em = Emitter(None)
    assert em.emit("replay", replay_body(0)) is False
    em.close()
    em.close()
    assert em.stats["dropped"] == 1 and em._thread is None
    bad = Emitter("http://nope")  # bad address: a warning, then no-op
    assert bad.emit("replay", replay_body(0)) is False


def test_emit_after_close_is_dropped(unix_collector):
    em = Emitter(unix_collector.addr)
    em.close()
    assert em.emit("replay", replay_body(0)) is False
    assert em.stats["dropped"] == 1


def test_get_emitter_from_env(monkeypatch, unix_collector):
    monkeypatch.setattr(emitter_mod, "_default", None)
    monkeypatch.delenv("KVCANARY_ADDR", raising=False)
    em = get_emitter()
    assert em.noop and get_emitter() is em
    monkeypatch.setattr(emitter_mod, "_default", None)
    monkeypatch.setenv("KVCANARY_ADDR", unix_collector.addr)
    monkeypatch.setenv("KVCANARY_RUN", "run-env")
    monkeypatch.setenv("KVCANARY_QUEUE", "17")
    em = get_emitter(proc="tester")
    try:
        assert not em.noop and em.queue_size == 17
        em.emit("replay", replay_body(3))
        em.close()
        assert unix_collector.wait(lambda c: len(c.events) == 2)
        ev = unix_collector.events[0]
        assert ev["run"] == "run-env" and ev["src"]["proc"] == "tester"
    finally:
        emitter_mod._default = None


def _spawn_child(n):
    # runs in a fresh interpreter: the emitter comes from the inherited environment
    from kvcanary.emitter import get_emitter as ge
    em = ge(proc="child")
    for i in range(n):
        em.emit("replay", {"step": i, "bs": 1, "bucket": 1, "mode": "eager", "dur_ns": 1})
    # no close(): atexit flushes and sends run.end


def test_spawned_process_emits(monkeypatch, unix_collector):
    monkeypatch.setenv("KVCANARY_ADDR", unix_collector.addr)
    monkeypatch.setenv("KVCANARY_RUN", "spawned")
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_spawn_child, args=(5,))
    p.start()
    p.join(HANG)
    assert p.exitcode == 0
    assert unix_collector.wait(lambda c: len(c.events) == 6)
    evs = unix_collector.events
    assert {e["src"]["pid"] for e in evs} == {p.pid}
    assert [e["kind"] for e in evs] == ["replay"] * 5 + ["run.end"]
    assert all(e["run"] == "spawned" and e["src"]["proc"] == "child" for e in evs)


def _fork_child(em):
    st = em.stats  # fresh: nothing of the parent's counters or queue
    fresh = st == {"sent": 0, "dropped": 0, "invalid": 0, "connects": 0} and len(em._q) == 0
    ok = em.emit("replay", {"step": 100, "bs": 1, "bucket": 1, "mode": "eager", "dur_ns": 1})
    em.close()
    os._exit(0 if ok and fresh and em.pid == os.getpid() else 3)


def test_forked_child_starts_fresh(unix_collector):
    em = Emitter(unix_collector.addr, proc="parent")
    for i in range(3):
        em.emit("replay", replay_body(i))
    assert unix_collector.wait(lambda c: len(c.events) == 3)
    em._dropped = 7  # the child must not inherit counters
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_fork_child, args=(em,))
    p.start()
    p.join(HANG)
    assert p.exitcode == 0
    em.emit("replay", replay_body(3))  # the parent's connection still works after the child closed
    em._dropped = 0
    em.close()
    assert unix_collector.wait(lambda c: c.kinds().count("run.end") == 2)
    by_pid = {}
    for e in unix_collector.events:
        by_pid.setdefault(e["src"]["pid"], []).append(e)
    assert set(by_pid) == {os.getpid(), p.pid}
    assert [e["body"].get("step") for e in by_pid[p.pid]] == [100, None]
    assert [e["body"].get("step") for e in by_pid[os.getpid()]] == [0, 1, 2, 3, None]
    assert unix_collector.accepted == 2


def test_run_end_sent_counts_every_connection(unix_collector):
    """run.end's sent is what the process wrote over all its connections
    (run.end aside): a reader holding fewer of its events knows some were
    lost on the way (WIRE.md, "run.end's sent")."""
    em = Emitter(unix_collector.addr, min_backoff=0.001, max_backoff=0.02)
    for i in range(7):
        em.emit("replay", replay_body(i))
    assert unix_collector.wait(lambda c: len(c.events) == 7)
    with unix_collector._cv:  # the collector drops the connection: the emitter redials
        for c in unix_collector.conns:
            c.shutdown(socket.SHUT_RDWR)
            c.close()
    deadline = time.monotonic() + HANG
    i = 7
    while em.stats["connects"] < 2 and time.monotonic() < deadline:
        em.emit("replay", replay_body(i))
        i += 1
        time.sleep(0.005)
    for j in range(5):
        em.emit("replay", replay_body(10000 + j))
    em.close()
    assert em.stats["connects"] >= 2
    assert unix_collector.wait(lambda c: c.kinds()[-1:] == ["run.end"])
    end = unix_collector.events[-1]
    held = sum(1 for e in unix_collector.events if e["kind"] == "replay")
    assert end["body"]["sent"] == em.stats["sent"] - 1  # run.end itself is not in it
    assert end["body"]["sent"] == held >= 12, (end["body"], held)


# --- cross-language golden files ---------------------------------------------

GOLDEN_TS = 1_767_225_600_000_000_000
GOLDEN_SRC = {"proc": "sglang-decode", "pid": 4242}
GOLDEN_RUN = "golden-py"


def golden_events():
    """One event of each kind the package sends, with the fields issue 12 added."""
    return [
        ("run.start", {"tool": "kvcanary-py 0.2.0", "config": {"engine": "sglang", "index_k_dtype": "fp8",
                                                           "cuda_graph": True, "multi_stream_overlap": False,
                                                           "disaggregation": "pd", "seed": 0},
                       "host": {"hostname": "gpu-7"}}),
        ("room.checksum", {"room": dec64(9223372036854775813), "side": "decode", "seq_len": 130, "pages": 3,
                           "bsum": hex64(0x9E3779B97F4A7C15), "xxh3": hex64(0), "dtype": "fp8",
                           "request": "req-1", "rank": 1, "stage": "transferred", "layers": [0, 2, 60],
                           "layer_bsum": [hex64(1), hex64(0xFFFFFFFFFFFFFFFF), hex64(0x8000000000000000)],
                           "page_bsum": [hex64(0x0123456789ABCDEF), hex64(42), hex64(0xE220A8397B1DCDAF)]}),
        ("canary.pages", {"step": 17, "policy": "live", "pages_total": 4096, "pages_checked": 12,
                          "changed": [{"page": 9, "owner": "req-2", "before": hex64(1), "after": hex64(-1)}],
                          "expected": [3, 9], "transfer": [40], "running": ["req-1", "req-2"], "padding": [0],
                          "expected_owner": ["req-1", "req-2"], "live_pages": 10, "live_checked": 10,
                          "phase": "between"}),
        ("graphdiff.sample", {"step": 256, "request": "req-1", "dtype": "bf16", "topk_graph": [5, 3, -1],
                              "topk_eager": [5, 4, -1], "k": 3, "seq_len": 130, "source": "indexer_topk.7"}),
        ("graphdiff.sample", {"step": 256, "request": "req-1", "dtype": "fp32",
                              "graph": f32s([0.5, -1.25, 3e38, float("nan")]),
                              "eager": f32s(torch.tensor([0.5, -1.0, 3e38, float("-inf")], dtype=torch.bfloat16)),
                              "topk_graph": [2, 0], "topk_eager": [2, 0], "k": 2, "source": "next_token_logits"}),
        ("replay", {"step": 17, "bs": 2, "bucket": 4, "mode": "graph", "dur_ns": 41000}),
        ("run.end", {"wall_ns": 123456789, "dropped": 3}),
    ]


def golden_lines() -> bytes:
    return b"".join(encode_event(k, b, GOLDEN_TS + i, GOLDEN_SRC["proc"], GOLDEN_SRC["pid"], GOLDEN_RUN)
                    for i, (k, b) in enumerate(golden_events()))


def test_python_golden_file_current():
    """tests/golden/python_events.jsonl is what the encoder writes; a Go test
    decodes and validates it. KVCANARY_UPDATE_GOLDEN=1 rewrites it."""
    want = golden_lines()
    if os.environ.get("KVCANARY_UPDATE_GOLDEN") == "1":
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        with open(GOLDEN, "wb") as f:
            f.write(want)
    with open(GOLDEN, "rb") as f:
        got = f.read()
    assert got == want, "golden file stale: rerun with KVCANARY_UPDATE_GOLDEN=1 and review the diff"
    kinds = [json.loads(x)["kind"] for x in got.splitlines()]
    for k in ("room.checksum", "canary.pages", "graphdiff.sample", "run.end"):
        assert k in kinds


DIGEST_FIELDS = {"bsum", "xxh3", "before", "after", "stream", "graph_exec", "arg"}


def _check_strings(v, where):
    if isinstance(v, dict):
        for k, x in v.items():
            if k in DIGEST_FIELDS or k == "room":
                assert isinstance(x, str) or x is None, "%s.%s is %r, want a string" % (where, k, x)
            _check_strings(x, where + "." + k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _check_strings(x, "%s[%d]" % (where, i))


def test_go_golden_lines_parse_the_same():
    """Go-produced JSON lines (runtime/hook/testdata/golden/go_events.jsonl,
    written by the Go encoder, kept current by TestGoldenGoEvents) read here as
    the Python side writes them: same envelope, 64-bit values as strings, and
    re-encoding with the Python encoder gives the same JSON."""
    files = sorted(glob.glob(os.path.join(REPO, "runtime", "hook", "testdata", "golden", "*.jsonl")))
    assert files, "runtime/hook/testdata/golden/*.jsonl is missing: the Go side's half of the contract"
    n = 0
    for path in files:
        with open(path, "rb") as f:
            for no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = "%s:%d" % (os.path.basename(path), no)
                ev = json.loads(line)
                assert ev["v"] == 1 and ev["kind"] in KINDS, where
                _check_strings(ev["body"], where)
                src = ev.get("src", {})
                again = encode_event(ev["kind"], ev["body"], ev.get("ts_ns", 0), src.get("proc", ""),
                                     src.get("pid", 0), ev.get("run", ""), src.get("role", ""), src.get("rank", 0))
                want = dict(ev)
                if "src" in want:
                    want["src"] = {k: v for k, v in want["src"].items() if k != "node"}
                    if not want["src"]:
                        del want["src"]
                assert json.loads(again) == want, where
                for field in ("bsum", "xxh3"):
                    if isinstance(ev["body"].get(field), str) and ev["body"][field].startswith("0x"):
                        assert hex64(int(ev["body"][field], 16)) == ev["body"][field], where
                n += 1
    assert n > 0

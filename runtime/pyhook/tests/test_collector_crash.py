"""Issue 27 D6 end to end: a collector killed (SIGKILL) mid-run loses the
events it accepted but had not written; the producer's run.end says how many
it sent, so `kvcanary trace merge` over the two bundles (before and after the
restart) is partial, naming the producer and the shortfall, and `kvcanary
report` on the merged bundle turns the layer that looked clean partial. Runs
when KVCANARY_BIN names a kvcanary binary."""
import json
import os
import signal
import subprocess
import time

import pytest

from kvcanary.emitter import Emitter

HANG = 30.0


def kvcanary_bin():
    b = os.environ.get("KVCANARY_BIN")
    if not b:
        pytest.skip("KVCANARY_BIN is not set (a kvcanary binary collects and merges the bundles)")
    if not os.access(b, os.X_OK):
        pytest.skip("KVCANARY_BIN=%s is not executable" % b)
    return b


def start_collect(b, sock, bundle):
    if os.path.exists(sock):
        os.unlink(sock)  # the killed collector's, left behind
    col = subprocess.Popen([b, "collect", "--listen", "unix://" + sock, "--record", bundle, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + HANG
    while not os.path.exists(sock) and col.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.path.exists(sock), "kvcanary collect did not listen: %s" % col.stderr.read()
    return col


def emit_step(em, step):
    em.emit("replay", {"step": step, "bs": 1, "bucket": 1, "mode": "graph", "dur_ns": 1})
    em.emit("graphdiff.sample", {"step": step, "request": "req-1", "dtype": "bf16", "topk_graph": [5, 3, 1],
                                 "topk_eager": [5, 3, 1], "k": 3, "seq_len": 130, "source": "indexer_topk.7"})


def test_collector_killed_mid_run_makes_merge_partial(tmp_path):
    b = kvcanary_bin()
    sock = os.path.join(str(tmp_path), "c.sock")
    a_bundle, b_bundle = os.path.join(str(tmp_path), "a.kvtrace"), os.path.join(str(tmp_path), "b.kvtrace")
    col = start_collect(b, sock, a_bundle)
    em = Emitter("unix://" + sock, min_backoff=0.005, max_backoff=0.05)
    step = 0
    try:
        for _ in range(100):
            emit_step(em, step)
            step += 1
        deadline = time.monotonic() + HANG
        while em.stats["sent"] < 200 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert em.stats["sent"] == 200
        # Accepted (or still in the socket), not yet written: the bundle's
        # writer flushes about once a second.
        col.send_signal(signal.SIGKILL)
        col.wait(timeout=HANG)
        col = start_collect(b, sock, b_bundle)
        deadline = time.monotonic() + HANG
        while em.stats["connects"] < 2 and time.monotonic() < deadline:
            emit_step(em, step)
            step += 1
            time.sleep(0.005)
        for _ in range(25):
            emit_step(em, step)
            step += 1
        em.close()
        assert em.stats["connects"] >= 2
    finally:
        col.send_signal(signal.SIGINT)
        col.communicate(timeout=HANG)
    sent = em.stats["sent"] - 1  # run.end aside
    r = subprocess.run([b, "trace", "merge", "--json", "-o", os.path.join(str(tmp_path), "m.kvtrace"), a_bundle, b_bundle],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    mine = [p for p in rep["producers"] if p["src"].get("pid") == os.getpid()]
    assert len(mine) == 1 and mine[0]["sent"] == sent, (mine, sent)
    held = mine[0]["held"]
    assert held < sent, "the killed collector wrote every event it accepted: %d of %d" % (held, sent)
    assert rep["status"] == "partial"
    want = "sent %d events, the bundles hold %d (%d missing)" % (sent, held, sent - held)
    assert len(rep["partial"]) == 1 and "pid %d" % os.getpid() in rep["partial"][0] and rep["partial"][0].endswith(want), rep["partial"]
    # The analyzers judge the merged bundle the same way: the layer that
    # saw all its samples agree is partial, not clean.
    r = subprocess.run([b, "report", "--format", "md", os.path.join(str(tmp_path), "m.kvtrace")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    line = [x for x in r.stdout.splitlines() if "compute " in x and "samples diverge" in x]
    assert len(line) == 1 and "compute partial: graph = eager: 0 of" in line[0] and want in line[0], line

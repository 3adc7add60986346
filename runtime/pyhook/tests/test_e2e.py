"""End to end on the SGLang stand-in (tests/standin/engine.py).

The engine runs prefill -> PD transfer -> decode in processes started with
multiprocessing spawn. kvcanary gets in by the sitecustomize route (PYTHONPATH)
or the plugin route (an entry point in a .dist-info on PYTHONPATH and
SGLANG_PLUGINS), and its events go to the test collector of conftest.py. The
engine's --truth file says what happened; each fault test asserts the events
show exactly that, and the clean run that they show nothing.

The Go-side judging (`checksum compare`, `canary report`, `graphdiff report`
on a recorded bundle) runs when KVCANARY_BIN names a kvcanary binary: through
`kvcanary wrap --record` when it has `wrap`, else through `kvcanary collect
--record` with the sitecustomize route set up by the test. Without
KVCANARY_BIN those tests skip with the reason.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

PYHOOK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = os.path.join(PYHOOK, "sitecustomize")
STANDIN = os.path.join(PYHOOK, "tests", "standin")
ENGINE = os.path.join(STANDIN, "engine.py")

pytestmark = pytest.mark.skipif(not os.path.isfile(ENGINE), reason="the stand-in engine is not in this tree yet")


def run_engine(tmp_path, addr, args, route="site", env=None, timeout=300):
    truth = os.path.join(str(tmp_path), "truth.json")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KVCANARY_", "SGLANG_"))}
    paths = [PYHOOK, STANDIN]
    if route == "site":
        paths = [SITE] + paths
    elif route == "plugin":
        from test_binding import dist_info

        paths.append(dist_info(os.path.join(str(tmp_path), "ep")))
        e["SGLANG_PLUGINS"] = "kvcanary"
    e["PYTHONPATH"] = os.pathsep.join(paths)
    e["KVCANARY_ADDR"] = addr
    e["KVCANARY_GRAPHDIFF_EVERY"] = "1"
    e["KVCANARY_CANARY_EVERY"] = "1"
    e.update(env or {})
    r = subprocess.run([sys.executable, ENGINE, "--truth", truth, "--quiet"] + list(args), env=e,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(truth) as f:
        return json.load(f), r


def events(col, procs):
    """Once the engine exited: wait until every process that sent events also
    sent its run.end (emitters flush at exit; a process with nothing to send
    never connects), at least `procs` of them; return bodies by kind."""

    def done(c):
        sent = {e.get("src", {}).get("pid") for e in c.events}
        ended = {e.get("src", {}).get("pid") for e in c.events if e.get("kind") == "run.end"}
        return len(ended) >= procs and sent <= ended

    assert col.wait(done, 60), "collector got %s" % collections.Counter(col.kinds())
    out = collections.defaultdict(list)
    for e in col.events:
        out[e["kind"]].append(dict(e["body"], _pid=e.get("src", {}).get("pid")))
    assert not col.errors
    return out


def rooms(ev):
    by = collections.defaultdict(list)
    for b in ev["room.checksum"]:
        by[b["room"]].append(b)
    return by


def unexpected_live(b):
    exp = set(b.get("expected", [])) | set(b.get("padding", []))
    return [c for c in b.get("changed", []) if c["page"] not in exp and c.get("owner") in b["running"]]


# --- routes --------------------------------------------------------------------------------


@pytest.mark.parametrize("route,variant", [("site", "base"), ("plugin", "new")])
def test_clean_run_every_instrument_reports_and_nothing_differs(tmp_path, unix_collector, route, variant):
    truth, _ = run_engine(tmp_path, unix_collector.addr,
                          ["--requests", "4", "--decode-steps", "3", "--req-kv-variant", variant], route,
                          {"KVCANARY_GRAPHDIFF_LAYERS": "all"})
    ev = events(unix_collector, 2)
    # Every step was rerun eagerly and its rows restored: outputs are untouched.
    assert all(r["match"] for r in truth["requests"]), [r["rid"] for r in truth["requests"] if not r["match"]]
    # Events come from the spawned scheduler processes, not the launcher.
    pids = {b["_pid"] for k in ("room.checksum", "canary.pages") for b in ev[k]}
    assert truth["prefill_pid"] in pids and truth["ranks"][0]["pid"] in pids and os.getpid() not in pids
    # Checksums: every room at all three stages, all equal.
    by = rooms(ev)
    assert set(by) == {r["room"] for r in truth["requests"]}
    for room, recs in by.items():
        assert sorted(r["stage"] for r in recs) == ["admitted", "sent", "transferred"], room
        assert len({(r["bsum"], tuple(r["page_bsum"]), tuple(r["layer_bsum"])) for r in recs}) == 1, room
    # Canary: one replay-phase record per replayed step, no unexpected live change.
    replayed = truth["ranks"][0]["replayed_forward_pass_ids"]
    assert sorted(b["step"] for b in ev["canary.pages"] if b["phase"] == "replay") == replayed
    assert [b for b in ev["canary.pages"] if unexpected_live(b)] == []
    # Between forwards only PD transfers write (the late request's pages): every
    # change there is on a page of a request still receiving, not running.
    for b in ev["canary.pages"]:
        if b["phase"] == "between":
            for c in b.get("changed", []):
                assert c["page"] in b["transfer"] and c["owner"] not in b["running"], (b["step"], c)
    # Graphdiff: samples on every replayed step, graph == eager everywhere.
    srcs = {b["source"] for b in ev["graphdiff.sample"]}
    assert "next_token_logits" in srcs and any(s.startswith("indexer_topk.") for s in srcs)
    assert {b["step"] for b in ev["graphdiff.sample"]} == set(replayed)
    assert all(b["topk_graph"] == b["topk_eager"] for b in ev["graphdiff.sample"])
    assert sorted(b["step"] for b in ev["replay"]) == replayed


def test_tp2_ranks_agree_and_are_told_apart(tmp_path, unix_collector):
    truth, _ = run_engine(tmp_path, unix_collector.addr, ["--requests", "3", "--decode-steps", "2", "--tp", "2"],
                          env={"KVCANARY_GRAPHDIFF_EVERY": "2"})
    ev = events(unix_collector, 3)
    assert all(r["match"] for r in truth["requests"])
    for room, recs in rooms(ev).items():
        dec = sorted((r["stage"], r["rank"]) for r in recs if r["side"] == "decode")
        assert dec == [("admitted", 0), ("admitted", 1), ("transferred", 0), ("transferred", 1)], room
        assert len({r["bsum"] for r in recs}) == 1
    # Sampling is rank-synchronous: both decode ranks rerun exactly the same steps.
    pids = [r["pid"] for r in truth["ranks"]]
    steps = [sorted({b["step"] for b in ev["graphdiff.sample"] if b["_pid"] == p}) for p in pids]
    assert steps[0] == steps[1] and steps[0] and all(s % 2 == 0 for s in steps[0])
    checked = [sorted(b["step"] for b in ev["canary.pages"] if b["_pid"] == p and b["phase"] == "replay") for p in pids]
    assert checked[0] == checked[1] == truth["ranks"][0]["replayed_forward_pass_ids"]


# --- faults --------------------------------------------------------------------------------


def test_transfer_corrupt_differs_at_exactly_the_truths_layer_and_page(tmp_path, unix_collector):
    truth, _ = run_engine(tmp_path, unix_collector.addr, ["--requests", "4", "--decode-steps", "2",
                                                          "--fault", "transfer-corrupt"],
                          env={"KVCANARY_INSTRUMENTS": "checksum"})
    ev = events(unix_collector, 2)
    tc = truth["transfer_corrupt"]
    assert tc is not None
    by = rooms(ev)
    for room, recs in by.items():
        sent = next(r for r in recs if r["stage"] == "sent")
        for r in recs:
            layers = [l for l, a, b in zip(sent["layers"], sent["layer_bsum"], r["layer_bsum"]) if a != b]
            pages = [i for i, (a, b) in enumerate(zip(sent["page_bsum"], r["page_bsum"])) if a != b]
            if room == str(tc["room"]) and r["side"] == "decode":
                assert (layers, pages) == ([tc["layer"]], [tc["entry"]]), r["stage"]
                assert r["bsum"] != sent["bsum"]
            else:
                assert (layers, pages) == ([], []), (room, r["stage"])


def test_spec_move_between_phase_names_the_victim_pages(tmp_path, unix_collector):
    truth, _ = run_engine(tmp_path, unix_collector.addr,
                          ["--requests", "8", "--decode-steps", "3", "--cuda-graph-max-bs", "8",
                           "--spec", "--fault", "spec-move"], env={"KVCANARY_INSTRUMENTS": "canary"})
    ev = events(unix_collector, 1)
    between = {b["step"]: b for b in ev["canary.pages"] if b["phase"] == "between"}
    victims = 0
    for m in truth["ranks"][0]["moves"]:
        assert m["faulty"]
        b = between.get(m["forward_pass_id"] + 1)
        assert b is not None, "no between-phase record after move at step %d" % m["forward_pass_id"]
        # The move's correct target pages, when still compared (the mover may have finished).
        assert set(b.get("expected", [])) <= {t // 64 for t in m["tgt_loc"]}
        if m["rid"] in b["running"]:
            assert sorted(set(b.get("expected", []))) == sorted({t // 64 for t in m["tgt_loc"]}), (m, b)
        changed = {c["page"]: c["owner"] for c in b.get("changed", [])}
        for w in m["written_pages"]:
            running = [o["rid"] for o in w["owners"] if o["state"] == "running"]
            if not w["changed_layers"] or not running:
                continue
            victims += 1
            assert w["page"] in changed and changed[w["page"]] in running
            assert w["page"] not in b.get("expected", [])
    assert victims >= 1
    # Nothing else: no changed page outside the moves' windows; replay phases clean.
    move_steps = {m["forward_pass_id"] + 1 for m in truth["ranks"][0]["moves"]}
    assert [s for s, b in between.items() if b.get("changed") and s not in move_steps] == []
    assert [b for b in ev["canary.pages"] if b["phase"] == "replay" and unexpected_live(b)] == []


def test_spec_without_the_bug_moves_only_expected_pages(tmp_path, unix_collector):
    truth, _ = run_engine(tmp_path, unix_collector.addr,
                          ["--requests", "8", "--decode-steps", "3", "--cuda-graph-max-bs", "8", "--spec"],
                          env={"KVCANARY_INSTRUMENTS": "canary"})
    ev = events(unix_collector, 1)
    moved = 0
    for b in ev["canary.pages"]:
        if b["phase"] != "between":
            continue
        changed = {c["page"] for c in b.get("changed", [])}
        assert changed <= set(b.get("expected", [])) | set(b.get("transfer", [])), b["step"]
        # every expected page was compared and changed: no missing store to report
        assert set(b.get("expected", [])) <= changed, b["step"]
        moved += len(b.get("expected", []))
    assert moved >= 1 and truth["ranks"][0]["moves"]


def test_replay_alias_graphdiff_differs_only_on_replayed_steps(tmp_path, unix_collector):
    # 6 requests on graph buckets up to 4: the first steps run eagerly (not
    # replayed, no sample), the later ones replay.
    truth, _ = run_engine(tmp_path, unix_collector.addr,
                          ["--requests", "6", "--decode-steps", "2", "--fault", "replay-alias"],
                          env={"KVCANARY_INSTRUMENTS": "graphdiff", "KVCANARY_GRAPHDIFF_LAYERS": "all"})
    ev = events(unix_collector, 1)
    steps = truth["ranks"][0]["steps"]
    replayed = {s["forward_pass_id"] for s in steps if s["graph"]}
    eager = {s["forward_pass_id"] for s in steps if not s["graph"]}
    assert replayed and eager
    diff = {b["step"] for b in ev["graphdiff.sample"] if b["topk_graph"] != b["topk_eager"]}
    assert diff and diff <= replayed
    assert {b["step"] for b in ev["graphdiff.sample"]} <= replayed


def test_an_instrument_that_raises_does_not_disturb_the_engine(tmp_path, unix_collector):
    # A sabotaged digest (raises inside every instrument's device work): the
    # engine still produces every expected output and exits 0.
    probe = os.path.join(str(tmp_path), "sab")
    os.makedirs(probe)
    with open(os.path.join(probe, "kvcanary_sabotage.py"), "w") as f:
        f.write("import kvcanary.digest as D\n"
                "def _boom(*a, **k):\n    raise RuntimeError('sabotaged digest')\n"
                "D.room_digest = _boom\nD.page_bsums = _boom\n")
    env = {"PYTHONPATH": os.pathsep.join([SITE, PYHOOK, STANDIN, probe])}
    truth = os.path.join(str(tmp_path), "truth.json")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KVCANARY_", "SGLANG_"))}
    e.update(env, KVCANARY_ADDR=unix_collector.addr, KVCANARY_GRAPHDIFF_EVERY="1", KVCANARY_CANARY_EVERY="1")
    # kvcanary's sitecustomize runs the next sitecustomize on the path: this one.
    with open(os.path.join(probe, "sitecustomize.py"), "w") as f:
        f.write("import kvcanary_sabotage\n")
    r = subprocess.run([sys.executable, ENGINE, "--truth", truth, "--quiet", "--requests", "4",
                        "--decode-steps", "3"], env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    t = json.load(open(truth))
    assert all(q["match"] for q in t["requests"])
    assert "sabotaged digest" in r.stderr  # logged (once per site), never raised
    ev = events(unix_collector, 1)
    assert ev["room.checksum"] == [] and ev["canary.pages"] == []
    assert ev["replay"]  # the rest keeps working


# --- the Go side ----------------------------------------------------------------------------


def kvcanary_bin():
    b = os.environ.get("KVCANARY_BIN")
    if not b:
        pytest.skip("KVCANARY_BIN is not set (a kvcanary binary judges the bundles)")
    if not os.access(b, os.X_OK):
        pytest.skip("KVCANARY_BIN=%s is not executable" % b)
    return b


def has_wrap(b):
    # An unknown command with --help prints the root help and exits 0: look
    # for wrap's own usage line.
    r = subprocess.run([b, "wrap", "--help"], capture_output=True, text=True)
    return r.returncode == 0 and "kvcanary wrap" in r.stdout


def record_engine(tmp_path, args, env=None):
    """Run the engine with its events recorded by kvcanary: `kvcanary wrap
    --record` when the binary has wrap, else `kvcanary collect --record` and
    the sitecustomize route set up here. Returns (binary, bundle)."""
    b = kvcanary_bin()
    bundle = os.path.join(str(tmp_path), "run.kvtrace")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KVCANARY_", "SGLANG_"))}
    e.update({"KVCANARY_CANARY_EVERY": "1", "KVCANARY_GRAPHDIFF_EVERY": "1"}, **(env or {}))
    cmd = [sys.executable, ENGINE, "--quiet"] + list(args)
    if has_wrap(b):
        e["PYTHONPATH"] = STANDIN
        r = subprocess.run([b, "wrap", "--record", bundle, "--"] + cmd, env=e, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        return b, bundle
    sock = os.path.join(str(tmp_path), "c.sock")
    col = subprocess.Popen([b, "collect", "--listen", "unix://" + sock, "--record", bundle, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):  # hang guard: up to 60 s for the socket
            if os.path.exists(sock) or col.poll() is not None:
                break
            time.sleep(0.1)
        assert os.path.exists(sock), "kvcanary collect did not listen: %s" % col.stderr.read()
        e["PYTHONPATH"] = os.pathsep.join([SITE, PYHOOK, STANDIN])
        e["KVCANARY_ADDR"] = "unix://" + sock
        r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        col.send_signal(signal.SIGINT)
        out, err = col.communicate(timeout=60)
    rep = json.loads(out)
    assert rep["rejected"] == 0, rep["rejected_by"]  # every event the hooks sent is valid to Go
    assert rep["recorded"] == rep["events"] > 0
    return b, bundle


def judge(b, *args):
    return subprocess.run([b] + list(args), capture_output=True, text=True, timeout=120)


def test_go_clean_run_has_no_findings(tmp_path):
    b, bundle = record_engine(tmp_path, ["--requests", "4", "--decode-steps", "3"],
                              {"KVCANARY_GRAPHDIFF_LAYERS": "all"})
    for cmd in (["checksum", "compare", bundle], ["canary", "report", bundle], ["graphdiff", "report", bundle]):
        r = judge(b, *cmd)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])


def test_go_transfer_corrupt_fails_checksum_compare_only(tmp_path):
    b, bundle = record_engine(tmp_path, ["--requests", "4", "--decode-steps", "2", "--fault", "transfer-corrupt"])
    assert judge(b, "checksum", "compare", bundle).returncode == 1
    assert judge(b, "canary", "report", bundle).returncode == 0
    assert judge(b, "graphdiff", "report", bundle).returncode == 0


@pytest.mark.parametrize("max_bs", ["8", "4"])  # 4: the first steps run eager (8 rows), the rest replay
def test_go_spec_move_is_a_live_page_overwrite(tmp_path, max_bs):
    b, bundle = record_engine(tmp_path, ["--requests", "8", "--decode-steps", "3", "--cuda-graph-max-bs", max_bs,
                                         "--spec", "--fault", "spec-move"])
    r = judge(b, "canary", "report", "--json", bundle)
    assert r.returncode == 1, r.stdout[-2000:]
    rep = json.loads(r.stdout)["canary"]
    # The move runs between forwards: its overwrites are the between phase's;
    # no replay writes a live page.
    assert rep["between"]["live_page_overwrites"] >= 1 and rep["live_page_overwrites"] == 0
    assert judge(b, "checksum", "compare", bundle).returncode == 0
    assert judge(b, "graphdiff", "report", bundle).returncode == 0


def test_go_spec_without_the_bug_is_clean(tmp_path):
    b, bundle = record_engine(tmp_path, ["--requests", "8", "--decode-steps", "3", "--cuda-graph-max-bs", "8",
                                         "--spec"])
    r = judge(b, "canary", "report", "--json", bundle)
    assert r.returncode == 0, r.stdout[-2000:]
    rep = json.loads(r.stdout)["canary"]
    assert rep["live_page_overwrites"] == 0 and rep["missing_stores"] == 0 and rep["expected_writes"] > 0


def test_go_replay_alias_is_a_graphdiff_divergence_only(tmp_path):
    b, bundle = record_engine(tmp_path, ["--requests", "4", "--decode-steps", "2", "--fault", "replay-alias"])
    assert judge(b, "graphdiff", "report", bundle).returncode == 1
    assert judge(b, "checksum", "compare", bundle).returncode == 0
    assert judge(b, "canary", "report", bundle).returncode == 0

"""Deployments real SGLang has and the first stand-in did not, through
`kvcanary wrap` (reference sglang-hooks.md D1-D3, sglang-dsv4.md "Engine
settings a hook can read" and "Other deployments the hooks must survive"):

- decode host receive: a request holds a device row before its index-K is
  copied back; no false room mismatch (D1);
- priority scheduling: "admitted" is the exact admitted set, after the
  reorder (D2);
- a speculative draft ModelRunner in the same process: no overwrite, no
  divergence, the target's capturer kept (D3);
- a TP rank that never loads the hook: partial, naming the rank;
- the engine's own settings (provenance "engine"): `ab` names
  SGLANG_OPT_USE_MULTI_STREAM_OVERLAP without any --config, and a --config
  the engine contradicts is shown as a contradiction.

Needs KVCANARY_BIN (a kvcanary binary with `wrap`); skips without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from test_e2e import ENGINE, STANDIN, kvcanary_bin

pytestmark = pytest.mark.skipif(not os.path.isfile(ENGINE), reason="the stand-in engine is not in this tree yet")


def wrap_json(tmp_path, args, env=None, config=(), name="run"):
    """Run the stand-in under `kvcanary wrap --json --record`; return
    (summary, bundle path, truth)."""
    b = kvcanary_bin()
    bundle = os.path.join(str(tmp_path), name + ".kvtrace")
    truth = os.path.join(str(tmp_path), name + ".truth.json")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KVCANARY_", "SGLANG_"))}
    e.update({"KVCANARY_CANARY_EVERY": "1", "KVCANARY_GRAPHDIFF_EVERY": "1", "PYTHONPATH": STANDIN}, **(env or {}))
    cmd = [b, "wrap", "--json", "--record", bundle]
    for c in config:
        cmd += ["--config", c]
    cmd += ["--", sys.executable, ENGINE, "--quiet", "--truth", truth, "--log-level", "warning"] + list(args)
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(truth) as f:
        return json.loads(r.stdout), bundle, json.load(f)


def layer(summary, name):
    return next(l for l in summary["layers"] if l["layer"] == name)


def room_checksums(bundle):
    r = subprocess.run([kvcanary_bin(), "trace", "cat", "--kind", "room.checksum", bundle],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(l)["body"] for l in r.stdout.splitlines() if l.strip()]


def assert_clean(summary, truth):
    assert all(r["match"] for r in truth["requests"]), "the engine's own outputs differ: not a clean run"
    t = layer(summary, "transfer")
    rooms = len(truth["requests"])
    warm = t["summary"]["warmup"]
    assert t["status"] == "ok", t
    assert t["summary"]["mismatched"] == 0 and t["summary"]["matched"] == rooms - warm, t
    buf = layer(summary, "buffer")
    assert buf["status"] == "ok", buf
    assert buf["summary"]["live_page_overwrites"] == 0 and buf["summary"]["replays"] > 0, buf
    comp = layer(summary, "compute")
    assert comp["status"] == "ok" and comp["summary"]["divergent"] == 0 and comp["summary"]["samples"] > 0, comp


def test_host_receive_clean_no_false_mismatch(tmp_path):
    # Every prompt but request 0's (4 tokens) lands in host memory first; the
    # device row exists (holds_kv True) with stale pages until the restore.
    summary, bundle, truth = wrap_json(tmp_path, ["--requests", "4", "--decode-steps", "2", "--req-kv-variant", "new",
                                                  "--host-receive", "64"])
    assert_clean(summary, truth)
    recs = room_checksums(bundle)
    staged = [r for r in truth["requests"] if r["prompt_len"] >= 64]
    assert staged, "no request was host-received"
    for r in staged:
        stages = sorted(c["stage"] for c in recs if c["room"] == r["room"])
        # no digest of the stale device pages; the room is digested once admitted (after the restore)
        assert stages == ["admitted", "sent"], (r["rid"], stages)
    # nothing was lost: the layer is ok, not partial, and no producer note says a checksum was skipped
    assert not any("skipped" in n for n in summary.get("producer_notes") or []), summary.get("producer_notes")


def test_priority_scheduling_admitted_is_the_admitted_set(tmp_path):
    summary, bundle, truth = wrap_json(tmp_path, ["--requests", "6", "--decode-steps", "2", "--priority",
                                                  "--max-running", "2"])
    assert_clean(summary, truth)
    order = [rid for batch in truth["admitted_order"]["0"] for rid in batch]
    arrival = [r["rid"] for r in truth["requests"]]
    assert sorted(order) == sorted(arrival) and order != arrival, "the queue was not reordered: %s" % order
    recs = room_checksums(bundle)
    for r in truth["requests"]:
        admitted = [c for c in recs if c["room"] == r["room"] and c.get("stage") == "admitted"]
        assert len(admitted) == 1, (r["rid"], admitted)


def test_draft_runner_clean(tmp_path):
    summary, _, truth = wrap_json(tmp_path, ["--requests", "4", "--decode-steps", "3", "--draft"],
                                  {"KVCANARY_GRAPHDIFF_LAYERS": "all"})
    assert_clean(summary, truth)
    cfg = summary["config"]
    assert cfg["extra"]["speculative_algorithm"] == "EAGLE" and cfg["provenance"]["extra.speculative_algorithm"] == "engine"
    # the draft's forwards are not the target's steps: replays counted are the target's decode steps only
    steps = len(truth["ranks"][0]["steps"])
    assert summary["by_kind"]["replay"] == steps, (summary["by_kind"], steps)


def test_silent_rank_reads_partial_and_is_named(tmp_path):
    summary, bundle, truth = wrap_json(tmp_path, ["--requests", "4", "--decode-steps", "2", "--tp", "2",
                                                  "--unhooked-rank", "1"])
    assert all(r["match"] for r in truth["requests"])
    assert summary["silent_ranks"] == ["decode rank 1 of 2 never reported"]
    for name in ("transfer", "buffer"):
        l = layer(summary, name)
        assert l["status"] == "partial" and "decode rank 1 of 2 never reported" in l["detail"], l
    r = subprocess.run([kvcanary_bin(), "checksum", "compare", bundle], capture_output=True, text=True, timeout=120)
    assert r.returncode == 4 and "decode rank 1 of 2 never reported" in r.stdout + r.stderr, r.stdout[-2000:]


def test_all_ranks_hooked_is_not_partial(tmp_path):
    summary, _, truth = wrap_json(tmp_path, ["--requests", "4", "--decode-steps", "2", "--tp", "2"])
    assert "silent_ranks" not in summary
    assert layer(summary, "transfer")["status"] == "ok"


def test_engine_settings_and_contradiction(tmp_path):
    summary, _, _ = wrap_json(tmp_path, ["--requests", "3", "--decode-steps", "2"],
                              config=["multi_stream_overlap=off", "cuda_graph=on"])
    cfg = summary["config"]
    for k in ("cuda_graph", "cuda_graph_max_bs", "multi_stream_overlap", "index_k_dtype", "disaggregation", "tp_size"):
        assert cfg["provenance"][k] == "engine", (k, cfg["provenance"])
    assert cfg["cuda_graph"] is True and cfg["index_k_dtype"] == "fp8" and cfg["cuda_graph_max_bs"] == 4
    # the environment does not set the variable: SGLang's default (on) is what ran, against the label
    assert cfg["multi_stream_overlap"] is True
    assert summary["contradictions"] == [{"setting": "multi_stream_overlap", "stated": "false",
                                          "stated_by": "label (--config)", "engine": "true",
                                          "reporter": summary["contradictions"][0]["reporter"], "used": "true"}]


@pytest.mark.parametrize("model", [[], ["--model", "v4", "--index-k-dtype", "bf16"]], ids=["dsa", "v4-bf16"])
def test_ab_names_multi_stream_overlap_from_the_engine(tmp_path, model):
    runs = []
    for v in ("1", "0"):
        summary, bundle, _ = wrap_json(tmp_path, ["--requests", "3", "--decode-steps", "2"] + model,
                                       {"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": v}, name="ov" + v)
        assert summary["config"]["multi_stream_overlap"] is (v == "1")
        runs.append(bundle)
    r = subprocess.run([kvcanary_bin(), "ab", "--json"] + runs, capture_output=True, text=True, timeout=120)
    rep = json.loads(r.stdout)
    assert rep["flag_under_test"] == {"name": "multi_stream_overlap", "a": True, "b": False}, rep
    assert [d["name"] for d in rep["differing_flags"]] == ["multi_stream_overlap"], rep["differing_flags"]
    assert rep["a"]["config"]["provenance"]["multi_stream_overlap"] == "engine"
    txt = subprocess.run([kvcanary_bin(), "ab"] + runs, capture_output=True, text=True, timeout=120).stdout
    assert "flag under test: multi_stream_overlap  true -> false  (reported by the engine)" in txt, txt

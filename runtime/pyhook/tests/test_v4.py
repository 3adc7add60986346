"""DeepSeek-V4 (C4 indexer index-K) and the hybrid pool: the binding's pool
detection, layouts and C4 slots against the stand-in's pools and the Go
vectors (checksum/SPEC.md §10), then end to end on the V4 stand-in engine
with each layout: clean runs, a transfer corruption localized to its room,
model layer and page-table entry, and the multi-stream overlap race seen by
graph-vs-eager only (and gone with SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from test_e2e import STANDIN, events, judge, record_engine, rooms, run_engine, unexpected_live

if STANDIN not in sys.path:
    sys.path.insert(0, STANDIN)

from kvcanary import digest as D  # noqa: E402
from kvcanary.sglang import access as A  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VECTORS_V4 = os.path.join(REPO, "checksum", "testdata", "vectors_v4.json")
LAYOUTS = ("fp8", "fp4", "bf16")


def v4_pool(layout, hisparse=False, pages=6):
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
    from sglang.srt.models import v4_standin

    return DeepSeekV4TokenToKVPool(pages * 256, 256, v4_standin.COMPRESS_RATIOS, layout, hisparse=hisparse)


# --- detection --------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("hisparse", [False, True])
def test_v4_pool_found_with_model_layer_ids_and_layout(layout, hisparse):
    pool = v4_pool(layout, hisparse)
    assert not hasattr(pool, "index_k_with_scale_buffer") and not hasattr(pool, "move_kv_cache")
    ik = A.find_index_k(pool)
    assert (ik.kind, ik.layout, ik.layers, ik.ratio, ik.page_tokens, ik.has_move) == \
        ("v4", layout, [2, 4], 4, 256, False), ik.describe()
    assert ik.capture_ids == {0: 2, 1: 4}
    width = {"fp8": 8448, "fp4": 4352, "bf16": 16384}[layout]
    for L, b in ik.buffers:
        assert b.dtype == torch.uint8 and tuple(b.shape[1:]) == (width,)
        # a view of the pool's own memory (writes through), not a copy
        assert b.data_ptr() == pool.get_index_k_with_scale_buffer(L).data_ptr()


def test_bf16_width_from_bytes_in_2d_and_3d_views():
    three = torch.zeros((3, 64, 128), dtype=torch.bfloat16)
    two = torch.zeros((3, 8192), dtype=torch.bfloat16)  # DSA use_bf16_indexer: 8192 elements, 16384 bytes

    class P:
        index_k_with_scale_buffer = [two]

    assert A.find_index_k(P()).layout == "bf16"
    assert A.layout_name([(0, three)]) == "bf16" and A.layout_name([(0, two)]) == "bf16"
    v = A._rows(three)
    assert v.shape == (3, 16384) and v.data_ptr() == three.data_ptr()


def test_unknown_width_and_hip_fp4_say_why():
    class P:
        index_k_with_scale_buffer = [torch.zeros((2, 64 * 100), dtype=torch.uint8)]

    ik = A.find_index_k(P())
    assert not ik.buffers and "6400" in ik.reason

    class IP:
        page_size = 64
        index_k_with_scale_buffer = None
        index_k_payload_buffer = [torch.zeros(1)]

    class V4:
        index_pools = {4: IP()}
        layer_mapping = []

    ik = A.find_index_k(V4())
    assert ik.kind == "v4" and not ik.buffers and "HIP" in ik.reason


def test_hybrid_pool_unwrapped_with_model_layer_ids():
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, HybridLinearKVPool

    inner = DSATokenToKVPool(4 * 64, 64, 3, torch.float32, 1, 3, "cpu")
    for i, b in enumerate(inner.index_k_with_scale_buffer):
        b.copy_(torch.randint(0, 256, b.shape, generator=torch.Generator().manual_seed(i), dtype=torch.uint8))
    pool = HybridLinearKVPool([1, 3, 5], inner)  # model layers 1, 3, 5 are full attention
    assert not hasattr(pool, "index_k_with_scale_buffer")
    ik = A.find_index_k(pool)
    assert (ik.kind, ik.layers, ik.layout, ik.has_move) == ("hybrid", [1, 3, 5], "fp8", True), ik.describe()
    for L, b in ik.buffers:
        assert b.data_ptr() == pool.get_index_k_with_scale_buffer(L).data_ptr()
    slots = torch.arange(64, 64 + 100)
    rd = D.room_digest(ik.buffers, slots, "fp8")
    assert rd.layers == [1, 3, 5]
    dense = D.room_digest([(i, b) for i, b in enumerate(inner.index_k_with_scale_buffer)], slots, "fp8")
    assert rd.layer_bsum.tolist() == dense.layer_bsum.tolist()  # same bytes, model ids in the combination
    assert int(rd.bsum) != int(dense.bsum)


def test_index_key_cache_buffer_fallback():
    class IKC:
        def __init__(self):
            self.buffer = [torch.zeros((2, 8448), dtype=torch.uint8)]

        def move(self, tgt, src):
            pass

    class P:
        index_key_cache = IKC()

    ik = A.find_index_k(P())
    assert ik.kind == "dsa" and ik.layers == [0] and ik.has_move


# --- C4 slots and the Go vectors ----------------------------------------------------


def _v4_vectors():
    if not os.path.isfile(VECTORS_V4):
        pytest.skip("checksum/testdata/vectors_v4.json is missing")
    with open(VECTORS_V4) as f:
        return json.load(f)


def gen_arena(page_bytes, seed, npages):
    """SPEC §5's generator (splitmix64 stream), bytes little-endian."""
    m = (1 << 64) - 1
    x, out = seed, bytearray()
    for _ in range(npages * page_bytes // 8):
        x = (x + 0x9E3779B97F4A7C15) & m
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        z ^= z >> 31
        out += z.to_bytes(8, "little")
    return torch.frombuffer(out, dtype=torch.uint8).view(npages, page_bytes).clone()


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="no CUDA device (the GPU self-test runs it)"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [c["name"] for c in (json.load(open(VECTORS_V4)) if os.path.isfile(VECTORS_V4) else [])])
def test_v4_digest_matches_go_vectors(case, device):
    c = next(v for v in _v4_vectors() if v["name"] == case)
    lay = D.LAYOUTS[c["dtype"]]
    bufs = [(L, gen_arena(lay.page_bytes, c["seed"] + L, c["arena_pages"]).to(device)) for L in c["c4_layers"]]
    # the request's req_to_token row on 256-token pages, then the binding's C4 slot rule
    # (the partial last group's tokens may sit on a page the vector does not list)
    n = c["tokens"]
    p = torch.arange(min(n, 256 * len(c["pages"])))
    r2t = torch.zeros((2, max(n, 1)), dtype=torch.int32)
    r2t[1, :p.shape[0]] = (torch.tensor(c["pages"])[p // 256] * 256 + p % 256).to(torch.int32)
    ik = A.IndexK("v4", buffers=bufs, layout=c["dtype"], ratio=4)
    slots = ik.slots(r2t.to(device), 1, n)
    assert ik.entries(n) == c["seq_len"] == slots.shape[0]
    rd = D.room_digest(bufs, slots, lay)
    hx = lambda v: "0x%016x" % (int(v) & ((1 << 64) - 1))  # noqa: E731
    assert rd.bsum.device.type == device
    assert [hx(v) for v in rd.layer_bsum.tolist()] == c["layer_bsum"]
    assert hx(rd.bsum) == c["bsum"]
    assert [hx(v) for v in rd.page_bsum.tolist()] == c["page_bsum"]


def test_written_slots_and_expected_pages():
    ik = A.IndexK("v4", ratio=4)
    loc = torch.tensor([256 * 3 + 7, 256 * 5 + 11, 256 * 2 + 255, 0])
    seq = torch.tensor([8, 13, 1024, 1])  # rows 0 and 2 complete a group
    assert ik.written_slots(loc, seq).tolist() == [(256 * 3 + 7) // 4, 0, (256 * 2 + 255) // 4, 0]
    assert (ik.written_slots(loc, seq) // 64).tolist() == [3, 0, 2, 0]
    assert A.IndexK("dsa").written_slots(loc, seq).tolist() == loc.tolist()
    # positions, when they line up with out_cache_loc, say the same for decode rows
    assert ik.written_slots(loc, seq, seq - 1).tolist() == ik.written_slots(loc, seq).tolist()
    # several tokens a row (target verify): positions decide; without them it is unknown
    loc3 = torch.tensor([256 + 2, 256 + 3, 256 + 4])
    assert ik.written_slots(loc3, torch.tensor([5]), torch.tensor([2, 3, 4])).tolist() == [0, (256 + 3) // 4, 0]
    with pytest.raises(ValueError):
        ik.written_slots(loc3, torch.tensor([5]))


# --- end to end on the V4 stand-in ---------------------------------------------------------


def v4_args(layout, *more):
    return ["--model", "v4", "--index-k-dtype", layout, "--requests", "4", "--decode-steps", "3"] + list(more)


def run_end_notes(ev):
    return "; ".join(b.get("error", "") for b in ev["run.end"])


def assert_checksums_agree(ev, truth, corrupt=None):
    by = rooms(ev)
    assert set(by) == {r["room"] for r in truth["requests"]}
    for room, recs in by.items():
        assert sorted(r["stage"] for r in recs) == ["admitted", "sent", "transferred"], room
        sent = next(r for r in recs if r["stage"] == "sent")
        req = next(r for r in truth["requests"] if r["room"] == room)
        assert sent["seq_len"] == req["prompt_len"] // 4 and sent["layers"] == [2, 4]
        assert sent["dtype"] == truth["index_k_dtype"]
        for r in recs:
            layers = [l for l, a, b in zip(sent["layers"], sent["layer_bsum"], r["layer_bsum"]) if a != b]
            pages = [i for i, (a, b) in enumerate(zip(sent["page_bsum"], r["page_bsum"])) if a != b]
            if corrupt and room == str(corrupt["room"]) and r["side"] == "decode":
                assert (layers, pages) == ([corrupt["layer"]], [corrupt["entry"]]), r["stage"]
            else:
                assert (layers, pages) == ([], []), (room, r["stage"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_v4_clean_run_all_instruments(tmp_path, unix_collector, layout):
    env = {"KVCANARY_GRAPHDIFF_LAYERS": "all"}
    if layout == "bf16":
        env["SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"] = "0"  # with overlap on bf16 races (below)
    # fp8 with HiSparse's C4 attention pool: the indexer pool is found the same way
    truth, _ = run_engine(tmp_path, unix_collector.addr, v4_args(layout, *(["--hisparse"] if layout == "fp8" else [])),
                          env=env)
    ev = events(unix_collector, 2)
    assert all(r["match"] for r in truth["requests"])
    assert_checksums_agree(ev, truth)
    replayed = truth["ranks"][0]["replayed_forward_pass_ids"]
    assert replayed
    assert sorted(b["step"] for b in ev["canary.pages"] if b["phase"] == "replay") == replayed
    assert [b for b in ev["canary.pages"] if unexpected_live(b)] == []
    # some steps completed a C4 group: their pages were expected and changed
    assert any(set(c["page"] for c in b.get("changed", [])) & (set(b["expected"]) - {0})
               for b in ev["canary.pages"])
    assert not [b for b in ev["canary.pages"] if b["phase"] == "between"]
    notes = run_end_notes(ev)
    assert "canary.between off: not applicable" in notes and "graphdiff.topk on:" in notes
    srcs = {b["source"] for b in ev["graphdiff.sample"]}
    assert {"next_token_logits", "indexer_topk.2", "indexer_topk.4"} <= srcs, srcs  # model layer ids
    assert all(b["topk_graph"] == b["topk_eager"] for b in ev["graphdiff.sample"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_v4_transfer_corrupt_localized(tmp_path, unix_collector, layout):
    truth, _ = run_engine(tmp_path, unix_collector.addr, v4_args(layout, "--fault", "transfer-corrupt"),
                          env={"KVCANARY_INSTRUMENTS": "checksum"})
    ev = events(unix_collector, 2)
    tc = truth["transfer_corrupt"]
    assert tc is not None and tc["layer"] in (2, 4)
    assert_checksums_agree(ev, truth, tc)


@pytest.mark.parametrize("layout,overlap", [("bf16", None), ("bf16", "0"), ("fp8", None), ("fp4", None)])
def test_v4_overlap_race_is_graph_vs_eager_only(tmp_path, unix_collector, layout, overlap):
    env = {"KVCANARY_GRAPHDIFF_LAYERS": "all"}
    if overlap is not None:
        env["SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"] = overlap
    truth, _ = run_engine(tmp_path, unix_collector.addr, v4_args(layout), env=env)
    ev = events(unix_collector, 2)
    assert_checksums_agree(ev, truth)  # the persistent index-K and the transfer stay correct
    assert [b for b in ev["canary.pages"] if unexpected_live(b)] == []
    steps = {s["forward_pass_id"]: s for s in truth["ranks"][0]["steps"]}
    diff = {b["step"] for b in ev["graphdiff.sample"] if b.get("topk_graph") != b.get("topk_eager")}
    raced = layout == "bf16" and overlap is None
    if raced:
        assert diff, "bf16 + overlap + graph replay of 2+ rows: graph must differ from eager"
        # only replayed steps of more than one row (bucket 1 plans no alias)
        assert all(steps[s]["graph"] and steps[s]["raw_bs"] >= 2 for s in diff), [steps[s] for s in diff]
        assert not all(r["match"] for r in truth["requests"])
    else:
        assert diff == set()
        assert all(r["match"] for r in truth["requests"])


# --- the Go side through kvcanary wrap -----------------------------------------------------


def wrap_json(tmp_path, args, env=None):
    """`kvcanary wrap --json --record` around the V4 stand-in: (summary, bundle)."""
    import subprocess

    from test_e2e import ENGINE, has_wrap, kvcanary_bin

    b = kvcanary_bin()
    if not has_wrap(b):
        pytest.skip("this kvcanary has no wrap")
    bundle = os.path.join(str(tmp_path), "run.kvtrace")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KVCANARY_", "SGLANG_"))}
    e.update({"KVCANARY_CANARY_EVERY": "1", "KVCANARY_GRAPHDIFF_EVERY": "1", "PYTHONPATH": STANDIN}, **(env or {}))
    r = subprocess.run([b, "wrap", "--json", "--record", bundle, "--", sys.executable, ENGINE, "--quiet"] + list(args),
                       env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), bundle


def layer_status(summary):
    return {l["layer"]: l["status"] for l in summary["layers"]}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_go_v4_wrap_verdicts(tmp_path, layout):
    clean_env = {"SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "0"} if layout == "bf16" else {}
    for d in ("clean", "corrupt", "race"):
        (tmp_path / d).mkdir()
    # clean, top-k on: wrap's own verdict is ok on every layer (the V4 notes --
    # between not applicable, top-k on -- lose nothing), and the judges agree
    summary, bundle = wrap_json(tmp_path / "clean", v4_args(layout), dict(clean_env, KVCANARY_GRAPHDIFF_LAYERS="all"))
    assert layer_status(summary) == {"transfer": "ok", "buffer": "ok", "compute": "ok"}, summary["layers"]
    b = os.environ["KVCANARY_BIN"]
    for cmd in (["checksum", "compare", bundle], ["canary", "report", bundle], ["graphdiff", "report", bundle]):
        r = judge(b, *cmd)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
    rep = json.loads(judge(b, "checksum", "compare", "--json", bundle).stdout)
    # request 0's 4-token prompt is one C4 entry: a warm-up by length; the rest match
    assert (rep["classes"]["match"], rep["classes"]["warmup"]) == (3, 1), rep["classes"]
    # a transfer corruption: the transfer layer only, localized to room, model layer, page-table entry
    truth_file = str(tmp_path / "corrupt" / "truth.json")
    b, bundle = record_engine(tmp_path / "corrupt", v4_args(layout, "--fault", "transfer-corrupt", "--truth", truth_file),
                              clean_env)
    r = judge(b, "checksum", "compare", "--json", bundle)
    assert r.returncode == 1, r.stdout[-2000:]
    tc = json.load(open(truth_file))["transfer_corrupt"]
    (bad,) = [x for x in json.loads(r.stdout)["non_matching"] if x["class"] == "mismatch"]
    assert (str(bad["room"]), bad["mismatch_layers"], bad["mismatch_pages"]) == \
        (str(tc["room"]), [tc["layer"]], [tc["entry"]]), bad
    assert judge(b, "canary", "report", bundle).returncode == 0
    assert judge(b, "graphdiff", "report", bundle).returncode == 0
    if layout == "bf16":
        # the overlap race (default on): compute only; the same run with the variable 0 is the clean one above
        summary, bundle = wrap_json(tmp_path / "race", v4_args(layout))
        assert layer_status(summary) == {"transfer": "ok", "buffer": "ok", "compute": "finding"}, summary["layers"]
        assert judge(b, "graphdiff", "report", bundle).returncode == 1
        assert judge(b, "checksum", "compare", bundle).returncode == 0
        assert judge(b, "canary", "report", bundle).returncode == 0


# --- the hybrid pool ------------------------------------------------------------------------


def test_hybrid_clean_run_measured_and_clean(tmp_path, unix_collector):
    truth, _ = run_engine(tmp_path, unix_collector.addr, ["--model", "hybrid", "--requests", "4", "--decode-steps", "3"],
                          env={"KVCANARY_GRAPHDIFF_LAYERS": "all"})
    ev = events(unix_collector, 2)
    assert all(r["match"] for r in truth["requests"])
    by = rooms(ev)
    assert set(by) == {r["room"] for r in truth["requests"]}  # measured: every room, every stage
    for room, recs in by.items():
        assert sorted(r["stage"] for r in recs) == ["admitted", "sent", "transferred"], room
        assert {tuple(r["layers"]) for r in recs} == {(0, 2, 5)}  # model ids (3 has a 0-row buffer)
        assert len({(r["bsum"], tuple(r["page_bsum"])) for r in recs}) == 1, room
    replayed = truth["ranks"][0]["replayed_forward_pass_ids"]
    assert sorted(b["step"] for b in ev["canary.pages"] if b["phase"] == "replay") == replayed
    assert [b for b in ev["canary.pages"] if unexpected_live(b)] == []
    srcs = {b["source"] for b in ev["graphdiff.sample"]}
    assert {"indexer_topk.0", "indexer_topk.2", "indexer_topk.5"} <= srcs, srcs
    assert all(b["topk_graph"] == b["topk_eager"] for b in ev["graphdiff.sample"])
    assert "not applicable" not in run_end_notes(ev)  # the DSA pool inside has its move


def test_go_hybrid_wrap_clean(tmp_path):
    b, bundle = record_engine(tmp_path, ["--model", "hybrid", "--requests", "4", "--decode-steps", "3"])
    for cmd in (["checksum", "compare", bundle], ["canary", "report", bundle], ["graphdiff", "report", bundle]):
        r = judge(b, *cmd)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
    rep = json.loads(judge(b, "checksum", "compare", "--json", bundle).stdout)
    assert (rep["classes"]["match"], rep["classes"]["warmup"], rep["rooms"]) == (3, 1, 4), rep["classes"]


# --- check ---------------------------------------------------------------------------------


def run_check(tmp_path, *args, env=None):
    import subprocess

    from test_e2e import PYHOOK

    e = {k: v for k, v in os.environ.items() if not k.startswith(("KVCANARY_", "SGLANG_"))}
    e["PYTHONPATH"] = os.pathsep.join([PYHOOK, STANDIN])
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "kvcanary.sglang", "check"] + list(args), env=e,
                          capture_output=True, text=True, timeout=120)


def test_check_lists_pool_kinds_model_layers_and_features(tmp_path):
    from sglang.srt.models import v4_standin

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": v4_standin.NUM_LAYERS,
                               "compress_ratios": v4_standin.COMPRESS_RATIOS + [0]}))  # + the MTP placeholder
    r = run_check(tmp_path, "--json", "--model", str(tmp_path), "--fp4-indexer")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert {p["kind"] for p in rep["pools"]} == {"dsa", "v4", "hybrid"}
    m = rep["model"]
    assert (m["kind"], m["layout"], m["layers"]) == ("v4", "fp4", v4_standin.C4_LAYERS)
    feats = {f["feature"]: f for f in rep["features"]}
    assert not feats["canary.between"]["on"] and "not applicable" in feats["canary.between"]["reason"]
    assert not feats["graphdiff.topk"]["on"] and "opt-in" in feats["graphdiff.topk"]["reason"]
    assert feats["checksum.sent"]["on"] and feats["canary.replay"]["on"]
    # top-k named: on, and the reason says what it changes; an instrument left out: off, why
    r = run_check(tmp_path, "--json", env={"KVCANARY_GRAPHDIFF_LAYERS": "2,4", "KVCANARY_INSTRUMENTS": "graphdiff"})
    feats = {f["feature"]: f for f in json.loads(r.stdout)["features"]}
    assert feats["graphdiff.topk"]["on"] and "changes the captured graph" in feats["graphdiff.topk"]["reason"]
    assert feats["canary.between"]["on"] is False and "KVCANARY_INSTRUMENTS" in feats["canary.between"]["reason"]
    assert feats["canary.between"]["reason"] != feats["graphdiff.topk"]["reason"]
    # hybrid config, text output
    cfg.write_text(json.dumps({"architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 6,
                               "full_attention_layer_ids": [0, 2, 3, 5]}))
    r = run_check(tmp_path, "--model", str(cfg))
    assert r.returncode == 0 and "pool kind hybrid, layout fp8, DSA layer ids 0,2,3,5" in r.stdout, r.stdout
    assert run_check(tmp_path, "--model", str(tmp_path / "nope")).returncode == 2

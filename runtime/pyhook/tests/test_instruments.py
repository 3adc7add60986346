"""The binding's instruments on small fakes of SGLang's objects (torch CPU).

Each test builds a pool, a req_to_token table and requests, applies the hook
callables exactly as the finder does (hooks.wrap of Binding.hook_for), drives
the fake engine and checks the events an in-memory emitter received.
"""

from __future__ import annotations

import types

import pytest
import torch

from kvcanary import digest as D
from kvcanary.config import Settings
from kvcanary.sglang import hooks as H
from kvcanary.sglang import targets as T
from kvcanary.sglang.hooks import Binding

PAGE = 64
PB = 8448


class ListEmitter:
    def __init__(self):
        self.events = []

    def emit(self, kind, body, ts_ns=None):
        self.events.append((kind, body))
        return True

    def of(self, kind, **match):
        return [b for k, b in self.events if k == kind and all(b.get(a) == v for a, v in match.items())]


def settings(**kw):
    base = dict(addr="tcp://127.0.0.1:9", canary_every=1, graphdiff_every=1)
    base.update(kw)
    return Settings(**base)


@pytest.fixture(params=["cpu", "cuda"])
def dev(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (the GPU self-test runs these on one)")
    return request.param


def guard_syncs(b, dev):
    """On CUDA: run kvcanary's step-thread parts with torch's sync debug mode
    set to error, and record any synchronizing call (the hooks would swallow
    the error; this list would not)."""
    caught = []
    if dev != "cuda":
        return caught
    for obj, name in ((b.canary, "pre"), (b.canary, "post"), (b.canary, "on_move"), (b.checksum, "digest")):
        orig = getattr(obj, name)

        def guarded(*a, _orig=orig, _name=name, **k):
            torch.cuda.set_sync_debug_mode("error")
            try:
                return _orig(*a, **k)
            except RuntimeError as e:
                caught.append("%s: %s" % (_name, e))
                raise
            finally:
                torch.cuda.set_sync_debug_mode(0)

        setattr(obj, name, guarded)
    return caught


# --- fake engine ---------------------------------------------------------------------


class Pool:
    def __init__(self, num_pages=16, layers=3, skip=(), seed=1, dev="cpu"):
        g = torch.Generator().manual_seed(seed)
        self.index_k_with_scale_buffer = [
            (torch.zeros((0, PB), dtype=torch.uint8) if l in skip else
             torch.randint(0, 256, (num_pages, PB), dtype=torch.uint8, generator=g)).to(dev)
            for l in range(layers)]
        self.kv_buffer = [torch.randn((num_pages * PAGE, 1, 8), generator=g).to(dev) for _ in range(layers)]
        self.start_layer = 0

    def bufs(self):
        return [(l, b) for l, b in enumerate(self.index_k_with_scale_buffer) if b.shape[0]]


def write_slot(pool, loc, value):
    page, off = loc // PAGE, loc % PAGE
    for _, b in pool.bufs():
        b[page, off * 128:(off + 1) * 128] = value
        b[page, 8192 + off * 4:8192 + off * 4 + 4] = value


class R2T:
    def __init__(self, rows=8, ctx=512, dev="cpu"):
        self.req_to_token = torch.zeros((rows, ctx), dtype=torch.int32, device=dev)
        self.size = rows


def place(r2t, row, pages, n):
    """Row `row` holds n tokens on `pages` (64 per page, in order)."""
    slots = torch.cat([torch.arange(p * PAGE, p * PAGE + PAGE) for p in pages])[:n]
    slots = slots.to(r2t.req_to_token.device)
    r2t.req_to_token[row, :n] = slots.to(torch.int32)
    return slots


class Req:
    def __init__(self, rid, room, n, idx, new_style=True):
        self.rid = rid
        self.bootstrap_room = room
        self.origin_input_ids = list(range(n))
        if new_style:
            self.kv = types.SimpleNamespace(req_pool_idx=idx)
        else:
            self.req_pool_idx = idx


class Alloc:
    def __init__(self, pool):
        self.pool = pool

    def get_kvcache(self):
        return self.pool


class Sched:
    def __init__(self, pool, r2t, rank=0):
        self.token_to_kv_pool_allocator = Alloc(pool)
        self.req_to_token_pool = r2t
        self.ps = types.SimpleNamespace(tp_rank=rank)
        self.waiting_queue = []
        self.max_running_requests = 8

    def send_kv_chunk(self, req, last_chunk=False, end_idx=None):
        return "sent"

    def get_new_prebuilt_batch(self, running_batch):
        admitted, self.waiting_queue = self.waiting_queue, []
        return admitted


def held_and_not_held(rows, n, rids, rooms):
    """A Binding with its emitter, and a Sched whose two rows each hold n
    tokens on page row + 1, with a request on each (rid, bootstrap room): the
    first request holds its KV on the device, the second does not."""
    em = ListEmitter()
    b = Binding(settings(), em)
    pool, r2t = Pool(), R2T()
    reqs = []
    for row, rid, room, holds in zip(rows, rids, rooms, (True, False)):
        place(r2t, row, [row + 1], n)
        r = Req(rid, room, n, row)
        r.kv.holds_kv = holds
        reqs.append(r)
    return em, b, Sched(pool, r2t), reqs


def hook(binding, cls, name, target):
    t = T.by_name(target)
    setattr(cls, name, H.wrap(getattr(cls, name), binding.hook_for(t, target), T.hook_of(t, target), t.name))


SEND = "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.send_kv_chunk"
POP = "sglang.srt.disaggregation.decode.DecodeTransferQueue.pop_transferred"
PREBUILT = "sglang.srt.disaggregation.decode.SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch"
EXECUTE = "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.execute"
MOVE = "sglang.srt.mem_cache.index_key_cache.IndexKeyCache.move"
FORWARD = "sglang.srt.model_executor.model_runner.ModelRunner._forward_raw"


# --- room checksum -----------------------------------------------------------------


def make_sched_cls():
    return type("S", (Sched,), {})


@pytest.mark.parametrize("new_style", [True, False])
def test_room_checksum_prefill_and_decode_agree_across_slots(new_style, dev):
    em = ListEmitter()
    b = Binding(settings(), em)
    syncs = guard_syncs(b, dev)
    # Prefill: room on pages 1,2,3; decode: the same bytes on pages 7,4,9.
    ppool, dpool = Pool(seed=1, dev=dev), Pool(seed=2, dev=dev)
    pr2t, dr2t = R2T(dev=dev), R2T(dev=dev)
    n = 150
    ps = place(pr2t, 2, [1, 2, 3], n)
    ds = place(dr2t, 5, [7, 4, 9], n)
    for (_, pb), (_, db) in zip(ppool.bufs(), dpool.bufs()):
        D_stream = D.token_stream(pb, ps, D.LAYOUTS["fp8"])
        for t in range(n):  # copy token by token into the decode slots (test set-up only)
            s = int(ds[t])
            page, off = s // PAGE, s % PAGE
            db[page, off * 128:(off + 1) * 128] = D_stream[t, :128]
            db[page, 8192 + off * 4:8192 + off * 4 + 4] = D_stream[t, 128:]
    PS, DS = make_sched_cls(), make_sched_cls()
    hook(b, PS, "send_kv_chunk", SEND)
    hook(b, DS, "get_new_prebuilt_batch", PREBUILT)
    psched, dsched = PS(ppool, pr2t, rank=1), DS(dpool, dr2t, rank=0)
    assert psched.send_kv_chunk(Req("r1", 77, n, 2, new_style)) == "sent"  # middle chunk: no digest
    assert em.of("room.checksum") == []
    assert psched.send_kv_chunk(Req("r1", 77, n, 2, new_style), last_chunk=True) == "sent"
    dsched.waiting_queue = [Req("r1", 77, n, 5, new_style)]
    dsched.get_new_prebuilt_batch(types.SimpleNamespace(batch_size=lambda: 0))
    b.deferred.flush(60)
    assert syncs == []
    (sent,) = em.of("room.checksum", stage="sent")
    (adm,) = em.of("room.checksum", stage="admitted")
    assert sent["side"] == "prefill" and adm["side"] == "decode"
    assert sent["rank"] == 1 and adm["rank"] == 0
    assert sent["room"] == "77" and sent["request"] == "r1" and sent["seq_len"] == n and sent["pages"] == 3
    assert sent["layers"] == [0, 1, 2] and sent["xxh3"] == "0x0000000000000000" and sent["dtype"] == "fp8"
    for f in ("bsum", "layer_bsum", "page_bsum"):
        assert sent[f] == adm[f], f
    # The digest is spec v1.1's, computed independently here.
    rd = D.room_digest(ppool.bufs(), ps, D.LAYOUTS["fp8"])
    assert sent["bsum"] == "0x%016x" % D.u64(rd.bsum)


def test_room_checksum_localizes_a_corrupt_page_and_layer():
    em = ListEmitter()
    b = Binding(settings(), em)
    pool = Pool(seed=3, layers=3, skip=(1,))  # layer 1 is a 0-row buffer: skipped
    r2t = R2T()
    place(r2t, 1, [2, 5, 6], 170)
    S = make_sched_cls()
    hook(b, S, "send_kv_chunk", SEND)
    s = S(pool, r2t)
    s.send_kv_chunk(Req("a", 5, 170, 1), True)
    pool.index_k_with_scale_buffer[2][5, 64 * 128 + 10] ^= 0xFF  # a scale byte of page 5 (entry 1), layer 2
    s.send_kv_chunk(Req("a", 5, 170, 1), True)
    x, y = em.of("room.checksum")
    assert x["layers"] == [0, 2]
    assert [i for i in range(2) if x["layer_bsum"][i] != y["layer_bsum"][i]] == [1]  # layer id 2
    assert [i for i in range(3) if x["page_bsum"][i] != y["page_bsum"][i]] == [1]
    assert x["bsum"] != y["bsum"]


def test_admitted_digests_only_requests_about_to_be_admitted_and_once():
    em = ListEmitter()
    b = Binding(settings(), em)
    pool, r2t = Pool(), R2T()
    for row in range(4):
        place(r2t, row, [row + 1], 10)
    S = make_sched_cls()
    hook(b, S, "get_new_prebuilt_batch", PREBUILT)
    s = S(pool, r2t)
    s.max_running_requests = 3
    reqs = [Req("q%d" % i, 100 + i, 10, i) for i in range(4)]
    s.waiting_queue = list(reqs)
    running = types.SimpleNamespace(batch_size=lambda: 1)
    # Capacity 3 - 1 running = 2 admitted; call the BEFORE hook twice (no admit).
    hk = b.hook_for(T.by_name(PREBUILT), PREBUILT)
    hk(s, running)
    hk(s, running)
    assert sorted(e["request"] for e in em.of("room.checksum")) == ["q0", "q1"]


def test_admitted_skips_requests_whose_index_k_is_still_on_the_host():
    em, b, s, (held, restoring) = held_and_not_held((0, 1), 10, ("h", "r"), (1, 2))
    s.waiting_queue = [held, restoring]
    b.hook_for(T.by_name(PREBUILT), PREBUILT)(s, types.SimpleNamespace(batch_size=lambda: 0))
    assert [e["request"] for e in em.of("room.checksum")] == ["h"]
    assert b.checksum.skipped_not_held == 1


def test_pop_transferred_digests_returned_requests_with_queue_rank():
    em = ListEmitter()
    b = Binding(settings(), em)
    pool, r2t = Pool(), R2T()
    place(r2t, 3, [4], 20)
    sched = Sched(pool, r2t, rank=0)

    class Q:
        def __init__(self):
            self.scheduler = sched
            self.tp_rank = 2
            self.queue = []

        def pop_transferred(self, rids_to_check=None):
            return [Req("t", 9, 20, 3)]

    hook(b, Q, "pop_transferred", POP)
    out = Q().pop_transferred()
    assert [r.rid for r in out] == ["t"]
    (e,) = em.of("room.checksum")
    assert e["stage"] == "transferred" and e["side"] == "decode" and e["rank"] == 2


def test_transferred_skips_requests_received_into_host_memory():
    """pop_transferred returns a host-received request before its restore
    (newer SGLang restores inside get_new_prebuilt_batch): its device slots
    do not hold the room yet, so it is skipped and counted, not digested."""
    em, b, sched, (held, on_host) = held_and_not_held((3, 4), 20, ("d", "h"), (9, 10))
    q = types.SimpleNamespace(scheduler=sched, tp_rank=0, queue=[])
    b.hook_for(T.by_name(POP))([held, on_host], q)
    assert [e["request"] for e in em.of("room.checksum")] == ["d"] and b.checksum.skipped_not_held == 1


def test_move_with_host_lists_and_only_while_the_canary_runs():
    b = Binding(settings(instruments=frozenset({"canary"})), ListEmitter())
    b.canary.on_move(None, [4, 70, 130], [1, 2, 3])
    from kvcanary.sglang.instruments.canary import move_pages
    assert move_pages(b.canary._moves, "cpu").tolist() == [0, 1, 2]
    off = Binding(settings(instruments=frozenset({"checksum"})), ListEmitter())
    off.canary.on_move(None, torch.tensor([4]), torch.tensor([5]))
    assert off.canary._moves == []  # nothing drains it while the canary is off: nothing kept


# --- canary and graphdiff: a fake decode engine -------------------------------------------


class Decode:
    def is_decode(self):
        return True


class FB:
    def __init__(self, idx, seqs, locs, rids, dev="cpu"):
        self.forward_mode = Decode()
        self.batch_size = len(idx)
        self.req_pool_indices = torch.tensor(idx, dtype=torch.int64, device=dev)
        self.seq_lens = torch.tensor(seqs, dtype=torch.int64, device=dev)
        self.seq_lens_cpu = torch.tensor(seqs, dtype=torch.int64)
        self.out_cache_loc = torch.tensor(locs, dtype=torch.int64, device=dev)
        self.rids = list(rids)


class Out:
    def __init__(self, logits):
        self.next_token_logits = logits


class Eager:
    def __init__(self, mr):
        self.mr = mr
        self.calls = 0

    def execute(self, forward_batch, pp_proxy_tensors=None):
        self.calls += 1
        return Out(self.mr.forward(forward_batch, graph=False))


class MR:
    VOCAB = 50

    def __init__(self, pool, r2t):
        self.token_to_kv_pool = pool
        self.req_to_token_pool = r2t
        self.forward_pass_id = 0
        self.eager_runner = Eager(self)
        self.stray = None  # (loc, value): a graph-only stray store
        self.alias = False  # graph logits differ
        self.eager_byte = None  # eager stores this byte instead (restore test)
        self.decode_cuda_graph_runner = None  # set by decode_engine

    def _forward_raw(self, forward_batch, pp_proxy_tensors, reinit_attn_backend=False, split_forward_count=1):
        """Graph replay up to the bucket (4 rows), eager above, as SGLang's
        _forward_raw returns it: a ModelRunnerOutput (or, set tuple_result,
        the (output, can_run_graph) of earlier versions)."""
        graph = forward_batch.batch_size <= 4
        runner = self.decode_cuda_graph_runner if graph else self.eager_runner
        ret = runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        if getattr(self, "tuple_result", False):
            return ret, graph
        return types.SimpleNamespace(logits_output=ret, can_run_graph=graph)

    def forward(self, fb, graph):
        val = (self.forward_pass_id * 7 + 3) % 256
        if not graph and self.eager_byte is not None:
            val = self.eager_byte
        for loc in fb.out_cache_loc.tolist():
            write_slot(self.token_to_kv_pool, loc, val)
        if graph and self.stray is not None:
            write_slot(self.token_to_kv_pool, *self.stray)
        logits = torch.arange(self.VOCAB, dtype=torch.float32,
                              device=fb.out_cache_loc.device).repeat(fb.batch_size, 1)
        if graph and self.alias:
            logits[:, :5] += 100.0
        return logits


class Runner:
    """DecodeCudaGraphRunner stand-in: buckets of 4, a static logits buffer."""

    def __init__(self, mr):
        self.model_runner = mr
        self.static = torch.zeros((4, MR.VOCAB), device=mr.req_to_token_pool.req_to_token.device)

    def execute(self, forward_batch, pp_proxy_tensors=None):
        self.raw_bs = forward_batch.batch_size
        self.bs = 4
        self.static[: self.raw_bs] = self.model_runner.forward(forward_batch, graph=True)
        return Out(self.static[: self.raw_bs])


class IKC:
    def __init__(self, pool):
        self.pool = pool

    def move(self, tgt_loc, src_loc):
        for t, s in zip(tgt_loc.tolist(), src_loc.tolist()):
            for _, b in self.pool.bufs():
                b[t] = b[s]  # the bug: page rows indexed by token ids


def decode_engine(b, n_reqs=3, seq=100, dev="cpu"):
    pool, r2t = Pool(num_pages=32, seed=5, dev=dev), R2T(dev=dev)
    M = type("M", (MR,), {})
    hook(b, M, "_forward_raw", FORWARD)
    mr = M(pool, r2t)
    R = type("R", (Runner,), {})
    hook(b, R, "execute", EXECUTE)
    runner = R(mr)
    mr.decode_cuda_graph_runner = runner
    mr.binding = b
    pages = {}
    for i in range(n_reqs):
        pages[i] = [1 + 3 * i, 2 + 3 * i]
        place(r2t, i, pages[i], seq)
    return pool, r2t, mr, runner, pages


def step(mr, runner, idx, seqs, rids):
    mr.forward_pass_id += 1
    locs = [int(mr.req_to_token_pool.req_to_token[i, s - 1]) for i, s in zip(idx, seqs)]
    fb = FB(idx, seqs, locs, rids, mr.req_to_token_pool.req_to_token.device)
    res = mr._forward_raw(fb, None)
    out = res[0] if isinstance(res, tuple) else res.logits_output
    runner.model_runner.binding.deferred.flush(60)  # CUDA: events are built by the worker thread
    return out, fb


def test_canary_replay_phase_sees_stores_padding_and_a_stray_write(dev):
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary"})), em)
    syncs = guard_syncs(b, dev)
    pool, r2t, mr, runner, pages = decode_engine(b, dev=dev)
    out, fb = step(mr, runner, [0, 1, 2], [100, 100, 100], ["a", "b", "c"])
    (ev,) = em.of("canary.pages", phase="replay")
    assert ev["expected"] == [2, 5, 8]  # page of slot 99 of each row
    assert ev["padding"] == [0]  # 3 rows on a bucket of 4
    assert sorted(c["page"] for c in ev["changed"]) == [2, 5, 8]
    assert {c["page"]: c["owner"] for c in ev["changed"]} == {2: "a", 5: "b", 8: "c"}
    assert ev["running"] == ["a", "b", "c"] and ev["live_pages"] == 6 and ev["live_checked"] == 6
    assert ev["pages_total"] == 32 and ev["step"] == 1
    # A graph-only stray store on request a's first page (page 1).
    mr.stray = (1 * PAGE + 3, 0xAB)
    step(mr, runner, [0, 1, 2], [101, 101, 101], ["a", "b", "c"])
    ev = em.of("canary.pages", phase="replay")[-1]
    stray = [c for c in ev["changed"] if c["page"] not in ev["expected"]]
    assert [(c["page"], c["owner"]) for c in stray] == [(1, "a")]
    # The replay event: one per call, graph mode, bucket 4.
    reps = em.of("replay")
    assert [r["mode"] for r in reps] == ["graph", "graph"] and reps[0]["bucket"] == 4 and reps[0]["bs"] == 3
    assert syncs == []


def test_canary_between_phase_sees_a_move_and_names_expected_pages(dev):
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary"})), em)
    syncs = guard_syncs(b, dev)
    pool, r2t, mr, runner, pages = decode_engine(b, dev=dev)
    K = type("K", (IKC,), {})
    hook(b, K, "move", MOVE)
    ikc = K(pool)
    step(mr, runner, [0, 1, 2], [100, 100, 100], ["a", "b", "c"])
    # Between the forwards: move(tgt=[4 (slot on page 0)], src=[...]) with the bug:
    # it rewrites page 4 (request b's first page) instead of the slot's page 0.
    ikc.move(torch.tensor([4], device=dev), torch.tensor([20], device=dev))
    step(mr, runner, [0, 1, 2], [101, 101, 101], ["a", "b", "c"])
    (bt,) = em.of("canary.pages", phase="between")
    assert bt["expected"] == [0]  # the correct target page of slot 4
    assert [(c["page"], c["owner"]) for c in bt["changed"]] == [(4, "b")]
    assert bt["step"] == 2 and bt["running"] == ["a", "b", "c"]
    # A clean window: no changes.
    step(mr, runner, [0, 1, 2], [102, 102, 102], ["a", "b", "c"])
    assert "changed" not in em.of("canary.pages", phase="between")[-1]
    assert syncs == []


def test_canary_brackets_eager_steps_and_sees_a_move_across_them(dev):
    """A batch above the largest bucket runs eager_runner.execute: the canary
    and the replay event cover it as they cover a replay, so a move between
    an eager and a graph step is seen (before this, only graph replays were
    bracketed and every move next to an eager step went unseen)."""
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary"})), em)
    syncs = guard_syncs(b, dev)
    pool, r2t, mr, runner, pages = decode_engine(b, n_reqs=5, dev=dev)
    K = type("K", (IKC,), {})
    hook(b, K, "move", MOVE)
    ikc = K(pool)
    rows, rids = [0, 1, 2, 3, 4], ["a", "b", "c", "d", "e"]
    step(mr, runner, rows, [100] * 5, rids)  # 5 rows > bucket 4: eager
    (ev,) = em.of("canary.pages", phase="replay")
    assert ev["expected"] == [2, 5, 8, 11, 14] and "padding" not in ev
    assert sorted(c["page"] for c in ev["changed"]) == [2, 5, 8, 11, 14]
    ikc.move(torch.tensor([7], device=dev), torch.tensor([20], device=dev))  # the bug hits page 7 (c's)
    step(mr, runner, rows[:3], [101] * 3, rids[:3])  # graph, bucket 4
    (bt,) = em.of("canary.pages", phase="between")
    assert [(c["page"], c["owner"]) for c in bt["changed"]] == [(7, "c")] and bt["expected"] == [0]
    reps = em.of("replay")
    assert [(r["mode"], r["bs"], r.get("bucket")) for r in reps] == [("eager", 5, None), ("graph", 3, 4)]
    assert mr.eager_runner.calls == 1
    assert syncs == []


def test_canary_skips_forwards_that_are_not_decode():
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary"})), em)
    pool, r2t, mr, runner, pages = decode_engine(b)
    fb = FB([0], [100], [99], ["a"])
    fb.forward_mode = types.SimpleNamespace(is_decode=lambda: False)  # an extend (prefill) forward
    mr.forward_pass_id += 1
    mr._forward_raw(fb, None)
    assert em.of("canary.pages") == [] and em.of("replay") == []


def test_replay_mode_from_a_tuple_result_of_earlier_versions():
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary"})), em)
    pool, r2t, mr, runner, pages = decode_engine(b, n_reqs=5)
    mr.tuple_result = True
    step(mr, runner, [0, 1, 2, 3, 4], [100] * 5, ["a", "b", "c", "d", "e"])
    step(mr, runner, [0, 1], [101] * 2, ["a", "b"])
    assert [(r["mode"], r.get("bucket")) for r in em.of("replay")] == [("eager", None), ("graph", 4)]


def test_canary_between_is_skipped_across_unobserved_forwards_and_sampling_pairs():
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary"}), canary_every=4), em)
    pool, r2t, mr, runner, pages = decode_engine(b)
    for s in range(8):
        step(mr, runner, [0], [100 + s], ["a"])
    # fpids 1..8: checked at 1 (1%4==1), 4, 5, 8; "between" only at 5 (4 then 5).
    assert [e["step"] for e in em.of("canary.pages", phase="replay")] == [1, 4, 5, 8]
    assert [e["step"] for e in em.of("canary.pages", phase="between")] == [5]


def test_canary_owner_acquired_in_window_is_not_judged():
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary"})), em)
    pool, r2t, mr, runner, pages = decode_engine(b)
    step(mr, runner, [0, 1], [100, 100], ["a", "b"])
    # c (row 2) arrives between the forwards: its pages are written (a transfer landing).
    for _, buf in pool.bufs():
        buf[7, :10] ^= 1
        buf[8, :10] ^= 1
    step(mr, runner, [0, 1, 2], [101, 101, 100], ["a", "b", "c"])
    (bt,) = em.of("canary.pages", phase="between")
    assert "changed" not in bt


def test_canary_transfer_landing_between_forwards_is_reported_on_transfer_pages():
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary"})), em)
    pool, r2t, mr, runner, pages = decode_engine(b)
    receiving = Req("c", 3, 100, 2)  # row 2: pages 7 and 8, still in the transfer queue
    q = type("DecodeTransferQueue", (), {})()  # weak-referenceable, as the real queue is
    q.queue, q.scheduler = [types.SimpleNamespace(req=receiving)], None
    b.canary.on_pop_transferred([], q)
    step(mr, runner, [0, 1], [100, 100], ["a", "b"])
    for _, buf in pool.bufs():
        buf[8, :10] ^= 1  # its transfer lands between the forwards
    step(mr, runner, [0, 1], [101, 101], ["a", "b"])
    (bt,) = em.of("canary.pages", phase="between")
    assert [(c["page"], c["owner"]) for c in bt["changed"]] == [(8, "c")]
    assert bt["transfer"] == [7, 8] and bt["running"] == ["a", "b"]
    (r1, r2) = em.of("canary.pages", phase="replay")
    assert r1["transfer"] == [7, 8] and "changed" in r1 and all(c["page"] in r1["expected"] for c in r1["changed"])


def test_graphdiff_clean_then_alias_and_rows_restored(dev):
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"graphdiff"}), graphdiff_logits="topk:3"), em)
    pool, r2t, mr, runner, pages = decode_engine(b, dev=dev)
    mr.eager_byte = 0x5A  # the eager rerun stores other bytes: they must not stay
    out, fb = step(mr, runner, [0, 1], [100, 100], ["a", "b"])
    assert mr.eager_runner.calls == 1
    g = em.of("graphdiff.sample", source="next_token_logits")
    assert [s["request"] for s in g] == ["a", "b"]
    assert all(s["topk_graph"] == s["topk_eager"] == [49, 48, 47] and s["k"] == 3 for s in g)
    assert g[0]["seq_len"] == 100 and g[0]["step"] == 1 and g[0]["dtype"] == "fp32"
    loc = int(fb.out_cache_loc[0])
    want = (1 * 7 + 3) % 256  # the graph's store
    for _, buf in pool.bufs():
        assert int(buf[loc // PAGE, (loc % PAGE) * 128]) == want
    assert torch.equal(out.next_token_logits, runner.static[:2])  # result untouched
    mr.alias = True
    step(mr, runner, [0, 1], [101, 101], ["a", "b"])
    g = em.of("graphdiff.sample", source="next_token_logits", step=2)
    assert all(s["topk_graph"] != s["topk_eager"] for s in g)


def test_graphdiff_full_logits_are_base64_float32():
    import base64
    import struct

    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"graphdiff"}), graphdiff_logits="full"), em)
    pool, r2t, mr, runner, pages = decode_engine(b)
    step(mr, runner, [0], [100], ["a"])
    (s,) = em.of("graphdiff.sample")
    vals = struct.unpack("<%df" % MR.VOCAB, base64.b64decode(s["graph"]))
    assert list(vals) == [float(i) for i in range(MR.VOCAB)]
    assert s["graph"] == s["eager"]


def test_graphdiff_indexer_topk_capturer_chains_and_reports_per_layer():
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"graphdiff"}), graphdiff_logits="none",
                         graphdiff_layers=(1,)), em)

    class Prev:
        def __init__(self):
            self.seen = []

        def capture(self, layer_id, topk_indices):
            self.seen.append(layer_id)

    prev = Prev()
    cap = H_graphdiff_capturer(b, prev)
    pool, r2t, mr, runner, pages = decode_engine(b)

    def fwd(fb, graph, orig=mr.forward):
        out = orig(fb, graph)
        for layer in (0, 1):
            sel = torch.tensor([[0, 1, 2]] * fb.batch_size, dtype=torch.int32)
            if graph and mr.alias:
                sel[:, 2] = 7
            cap.capture(layer_id=layer, topk_indices=sel)
        return out

    mr.forward = fwd
    step(mr, runner, [0, 1], [100, 100], ["a", "b"])
    mr.alias = True
    step(mr, runner, [0, 1], [101, 101], ["a", "b"])
    s = em.of("graphdiff.sample")
    assert {x["source"] for x in s} == {"indexer_topk.1"}
    assert [x["topk_graph"] == x["topk_eager"] for x in s] == [True, True, False, False]
    assert s[2]["topk_graph"] == [0, 1, 7] and s[2]["k"] == 3
    # chained: every engine forward's calls forwarded, the eager rerun's withheld (they are kvcanary's)
    assert prev.seen.count(0) == 2 and prev.seen.count(1) == 2


def H_graphdiff_capturer(b, prev):
    from kvcanary.sglang.instruments.graphdiff import TopkCapturer

    cap = TopkCapturer(b.graphdiff, prev)
    b.graphdiff.capturer = cap
    return cap


# --- exception safety -----------------------------------------------------------------------


def test_an_instrument_that_raises_never_reaches_the_engine_and_is_disabled():
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"canary", "graphdiff"})), em)
    pool, r2t, mr, runner, pages = decode_engine(b)

    def boom(*a, **k):
        raise RuntimeError("instrument bug")

    b.canary.pre = boom
    b.graphdiff._save_rows = boom  # fails before the eager rerun
    n = H.MAX_ERRORS + 2
    for s in range(n):
        out, fb = step(mr, runner, [0], [100 + s], ["a"])
        assert out.next_token_logits.shape == (1, MR.VOCAB)
    assert not b.feature_on("canary.replay") and b.feature_on("replay.step")
    # The rerun joins the TP collectives: a failure around it never skips it
    # on this rank, and never switches it off here alone.
    assert b.feature_on("graphdiff.rerun") and mr.eager_runner.calls == n
    assert em.of("graphdiff.sample") == []
    assert b.stats["errors"] == H.MAX_ERRORS + n
    assert len(em.of("replay")) == n


def test_the_engine_exception_passes_through_unchanged():
    b = Binding(settings(), ListEmitter())

    class S(Sched):
        def send_kv_chunk(self, req, last_chunk=False, end_idx=None):
            raise KeyError("engine's own")

    hook(b, S, "send_kv_chunk", SEND)
    with pytest.raises(KeyError, match="engine's own"):
        S(Pool(), R2T()).send_kv_chunk(Req("x", 1, 5, 0), True)


def test_kvcanary_wrappers_are_recognised():
    b = Binding(settings(), ListEmitter())
    t = T.by_name(SEND)

    def f(self, req, last_chunk=False, end_idx=None):
        return 1

    w = H.wrap(f, b.hook_for(t), t.hook, t.name)
    assert H.is_kvcanary_wrapped(w) and not H.is_kvcanary_wrapped(f)

    # A HookRegistry-style wrapper around kvcanary's hook callable.
    hk = b.hook_for(t)

    def registry_wrapper(*a, **k):
        r = f(*a, **k)
        hk(r, *a, **k)
        return r

    registry_wrapper.__wrapped__ = f
    assert H.is_kvcanary_wrapped(registry_wrapper)


# --- the deferred worker (the CUDA path, with a fake event) ----------------------------------


class FakeEvent:
    def __init__(self):
        import threading

        self.done = threading.Event()

    def synchronize(self):
        assert self.done.wait(30), "fake event never completed"


class FakeDeviceDeferred:
    """Deferred with the device path forced and the copy replaced: the worker
    thread waits on events the test completes."""

    @staticmethod
    def make(emit, maxsize, **kw):
        from kvcanary.sglang.deferred import Deferred

        class D(Deferred):
            events = []

            @staticmethod
            def _is_device(t):
                return isinstance(t, torch.Tensor)  # every tensor is staged (and counted in max_bytes)

            def _stage(self, tensors):
                ev = FakeEvent()
                D.events.append(ev)
                return ev, {k: v.clone() for k, v in tensors.items()}

        return D(emit, maxsize=maxsize, **kw)


def test_deferred_builds_off_thread_in_order_drops_when_full_and_survives_a_bad_build():
    import threading

    got = []
    d = FakeDeviceDeferred.make(lambda k, b: got.append((k, b, threading.current_thread().name)), maxsize=2)
    step = threading.current_thread().name

    def build(i):
        def f(h):
            if i == 1:
                raise ValueError("bad build")
            return [("replay", {"step": i, "v": int(h["x"])})]
        return f

    assert d.submit({"x": torch.tensor(10)}, build(0), "t")
    assert d.submit({"x": torch.tensor(11)}, build(1), "t")
    # The worker holds item 0 (waiting on its event) and the queue holds item 1,
    # or the queue holds both: either way one more fits at most, then drops.
    results = [d.submit({"x": torch.tensor(12 + i)}, build(2 + i), "t") for i in range(3)]
    assert results.count(False) >= 2 and d.stats["dropped"] == results.count(False)
    assert got == []  # nothing is built before its event completed
    for ev in list(type(d).events):
        ev.done.set()
    d.flush(30)
    for ev in list(type(d).events):  # events staged after the first release
        ev.done.set()
    d.flush(30)
    steps = [b["step"] for _, b, _ in got]
    assert steps[:1] == [0] and 1 not in steps and steps == sorted(steps)
    assert all(th != step for _, _, th in got)  # built on the worker thread
    assert d.stats["errors"] == 1


def test_capturer_copies_only_while_a_sampled_step_runs_but_always_chains():
    b = Binding(settings(instruments=frozenset({"graphdiff"}), graphdiff_layers=(0,)), ListEmitter())

    class Prev:
        n = 0

        def capture(self, layer_id, topk_indices):
            Prev.n += 1

    cap = H_graphdiff_capturer(b, Prev())
    sel = torch.zeros((2, 4), dtype=torch.int32)
    cap.capture(layer_id=0, topk_indices=sel)
    assert cap.calls == 0 and cap.bufs == {} and Prev.n == 1
    cap.armed = True
    cap.capture(layer_id=0, topk_indices=sel)
    cap.capture(layer_id=1, topk_indices=sel)  # not a selected layer
    assert cap.calls == 1 and list(cap.bufs) == [(0, (2, 4))] and Prev.n == 3
    # Without a capturer to chain to, SGLang's calls to it are no-ops.
    from kvcanary.sglang.instruments.graphdiff import TopkCapturer

    alone = TopkCapturer(b.graphdiff, None)
    assert alone.on_forward_end(forward_batch=None, can_run_graph=True, cuda_graph_batch=4) is None
    assert alone.get_topk(req_pool_idx=0, seqlen=1, req_to_token_pool=None) is None


def test_graphdiff_is_off_under_dp_attention_on_every_rank_alike():
    """Idle DP ranks replay in IDLE mode: a rerun on the busy ranks alone would
    hang their collectives, so no rank reruns (server_args is the same on all)."""
    em = ListEmitter()
    b = Binding(settings(instruments=frozenset({"graphdiff"})), em)
    pool, r2t, mr, runner, pages = decode_engine(b)
    mr.server_args = types.SimpleNamespace(enable_dp_attention=True)
    step(mr, runner, [0, 1], [100, 100], ["a", "b"])
    assert mr.eager_runner.calls == 0 and em.of("graphdiff.sample") == []
    mr.server_args.enable_dp_attention = False
    step(mr, runner, [0, 1], [101, 101], ["a", "b"])
    assert mr.eager_runner.calls == 1 and em.of("graphdiff.sample") != []


def test_run_end_reports_work_lost_before_the_emitter_and_features_off(unix_collector):
    """Deferred drops and build errors count as dropped in run.end, and every
    feature switched off says why: a collector never shows a partial run as
    whole."""
    from kvcanary.emitter import Emitter
    em = Emitter(unix_collector.addr, run="r")
    b = Binding(settings(instruments=frozenset({"canary", "checksum"})), em)
    b.deferred.stats["dropped"] += 3
    b.deferred.stats["errors"] += 2
    b.disable(("canary.replay",), "3 errors at X")
    em.close()
    assert unix_collector.wait(lambda c: any(e["kind"] == "run.end" for e in c.events))
    (end,) = [e for e in unix_collector.events if e["kind"] == "run.end"]
    assert end["body"]["dropped"] == 5
    assert "canary.replay off: 3 errors at X" in end["body"]["error"]


def test_site_call_passes_keywords_named_self_and_fn_and_never_raises():
    """The hooks call Site.call with the engine's own keyword arguments: one
    named self or fn must reach the instrument, not collide with call's own
    parameters (a TypeError raised into the engine), and an instrument that
    raises is counted, not raised."""
    binding = types.SimpleNamespace(stats={"errors": 0}, feature_on=lambda f: True)
    site = H.Site(binding, "t.f", ("canary",))
    got = site.call(lambda **kw: sorted(kw.items()), self="engine", fn=1)
    assert got == [("fn", 1), ("self", "engine")]

    def boom(**kw):
        raise ValueError("instrument bug")

    assert site.call(boom, self="engine") is None
    assert site.errors == 1 and binding.stats["errors"] == 1

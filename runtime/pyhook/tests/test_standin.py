"""The SGLang stand-in (tests/standin) on its own, without kvcanary: its
interfaces match the reference, its plugin framework behaves like SGLang's,
a clean engine run reproduces the expected scripts, and each fault changes
exactly what its mechanism should. Engine runs happen in subprocesses (the
engine spawns its scheduler processes); in-process checks put the stand-in on
sys.path only for their duration."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "standin")
ENGINE = os.path.join(STANDIN, "engine.py")

torch = pytest.importorskip("torch", reason="the stand-in needs torch (Debian python3-torch)")


@pytest.fixture
def standin():
    """sglang importable from the stand-in for one test, then forgotten."""
    sys.path.insert(0, STANDIN)
    try:
        yield importlib.import_module("sglang")
    finally:
        sys.path.remove(STANDIN)
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]


def run_engine(tmp_path, *args, env=None, name="truth.json"):
    truth = os.path.join(str(tmp_path), name)
    e = dict(os.environ)
    e.pop("SGLANG_PLUGINS", None)
    e.update(env or {})
    r = subprocess.run([sys.executable, ENGINE, "--truth", truth, "--quiet", *args],
                       capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, "engine %s failed (%d):\n%s" % (args, r.returncode, r.stderr[-4000:])
    with open(truth) as f:
        return json.load(f)


def graph_rids(rank):
    return {rid for s in rank["steps"] if s["graph"] for rid in s["rids"]}


# --- interfaces ---------------------------------------------------------------------------


def params(fn):
    return [(p.name, p.default if p.default is not inspect.Parameter.empty else "-", p.kind.name)
            for p in inspect.signature(fn).parameters.values()]


def test_hook_targets_have_the_reference_signatures(standin):
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.decode import DecodeTransferQueue, SchedulerDisaggregationDecodeMixin
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.mem_cache.index_key_cache import IndexKeyCache
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, NSATokenToKVPool
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.model_executor.runner_backend.full_cuda_graph_backend import FullCudaGraphBackend
    from sglang.srt.runtime_context import get_parallel  # noqa: F401

    P = "POSITIONAL_OR_KEYWORD"
    assert params(SchedulerDisaggregationPrefillMixin.send_kv_chunk) == [
        ("self", "-", P), ("req", "-", P), ("last_chunk", False, P), ("end_idx", None, P)]
    assert params(DecodeTransferQueue.pop_transferred) == [("self", "-", P), ("rids_to_check", None, P)]
    assert params(SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch) == [("self", "-", P), ("running_batch", "-", P)]
    assert params(DecodeCudaGraphRunner.execute) == [("self", "-", P), ("forward_batch", "-", P), ("pp_proxy_tensors", None, P)]
    assert params(FullCudaGraphBackend.replay) == [
        ("self", "-", P), ("shape_key", "-", P), ("static_forward_batch", "-", P), ("kwargs", "-", "VAR_KEYWORD")]
    assert params(IndexKeyCache.move) == [("self", "-", P), ("tgt_loc", "-", P), ("src_loc", "-", P)]
    assert params(ModelRunner.init_indexer_capturer) == [("self", "-", P)]
    # SGLang's own (model_runner.py, 2026-11): pp_proxy_tensors required, a ModelRunnerOutput returned
    assert params(ModelRunner._forward_raw) == [("self", "-", P), ("forward_batch", "-", P), ("pp_proxy_tensors", "-", P),
                                                ("reinit_attn_backend", False, P), ("split_forward_count", 1, P)]
    # the methods live only on the mixins: patching the mixin reaches every Scheduler
    assert "send_kv_chunk" not in Scheduler.__dict__ and "get_new_prebuilt_batch" not in Scheduler.__dict__
    assert issubclass(Scheduler, SchedulerDisaggregationPrefillMixin) and issubclass(Scheduler, SchedulerDisaggregationDecodeMixin)
    assert [(k.name, int(k)) for k in KVPoll] == [
        ("Failed", 0), ("Bootstrapping", 1), ("WaitingForInput", 2), ("Transferring", 3), ("Success", 4)]
    assert NSATokenToKVPool is DSATokenToKVPool
    assert standin.__version__.endswith("+standin")


def test_req_pool_index_variants(standin):
    from array import array

    from sglang.srt.managers.schedule_batch import Req, set_req_kv_variant

    base = Req("a", origin_input_ids=[1, 2, 3], bootstrap_room=7)
    assert base.req_pool_idx is None and not hasattr(base, "kv")
    assert isinstance(base.origin_input_ids, array) and base.origin_input_ids.typecode == "q"
    assert isinstance(base.output_ids, array) and base.output_ids.typecode == "q"
    set_req_kv_variant("new")
    try:
        new = Req("b", origin_input_ids=[1, 2, 3])
        assert new.kv.req_pool_idx is None and new.kv.holds_kv is False
        with pytest.raises(AttributeError):
            new.req_pool_idx
        assert not hasattr(new, "fill_ids") and list(new.get_fill_ids()) == [1, 2, 3]
    finally:
        set_req_kv_variant("base")
    with pytest.raises(ValueError, match="'bad'"):
        set_req_kv_variant("bad")


def make_pool(move_bug=False, pages=200):
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
    from sglang.srt.models import dsa_standin as m

    return DSATokenToKVPool(pages * 64, 64, m.KV_LORA_RANK, torch.float32, m.QK_ROPE_HEAD_DIM, m.NUM_LAYERS, "cpu",
                            skip_topk_layers=m.SKIP_TOPK_LAYERS, index_move_bug=move_bug)


def test_index_k_layout_and_moves(standin):
    from sglang.srt.models import dsa_standin as m

    pool = make_pool()
    bufs = pool.index_k_with_scale_buffer
    assert bufs is pool.index_key_cache.buffer
    assert [tuple(b.shape) for b in bufs] == [(201, 8448), (201, 8448), (0, 8448), (201, 8448)]
    assert all(b.dtype == torch.uint8 for b in bufs)
    slots = torch.tensor([64 * 3 + 5, 64 * 7 + 63])
    kb, sc = m.index_key(torch.tensor([10, 11]), torch.tensor([100, 200]), 1)
    pool.set_index_k_scale_buffer(1, slots, kb, sc)
    b = bufs[1]
    assert torch.equal(b[3, 5 * 128:6 * 128], kb[0]) and torch.equal(b[7, 63 * 128:64 * 128], kb[1])
    assert torch.equal(b[3, 8192 + 20:8192 + 24], sc[:1].view(torch.uint8))
    assert int(b.count_nonzero()) <= 2 * 132
    # fp8 e4m3 values: the K bytes decode to finite numbers whose amax is 448 after scaling
    dec = m.fp8_e4m3_decode(kb)
    assert torch.isfinite(dec).all() and float(dec.abs().amax()) == 448.0

    # correct move: 132 bytes per layer, nothing else
    before = [x.clone() for x in bufs]
    pool.move_kv_cache(torch.tensor([64 * 9 + 1]), slots[:1])
    assert torch.equal(b[9, 128:256], kb[0]) and torch.equal(b[9, 8192 + 4:8192 + 8], sc[:1].view(torch.uint8))
    diff = (b != before[1]).nonzero()
    assert diff[:, 0].unique().tolist() == [9]

    # the reference's bug: token ids used as page rows (small ids keep it in bounds, as on a real pool)
    bug = make_pool(move_bug=True)
    bug.set_index_k_scale_buffer(1, torch.tensor([70]), kb[:1], sc[:1])  # page 1, offset 6
    src_row = bug.index_k_with_scale_buffer[1][72].clone()
    bug.index_key_cache.buffer[1][72].fill_(9)
    bug.move_kv_cache(torch.tensor([70]), torch.tensor([72]))
    row70 = bug.index_k_with_scale_buffer[1][70]
    assert torch.equal(row70, torch.full_like(src_row, 9)), "the buggy move copies page row 72 onto page row 70"
    assert torch.equal(bug.index_k_with_scale_buffer[1][1, 6 * 128:7 * 128], kb[0]), "the token's own page is untouched"


def test_graph_runner_pads_to_page_zero_and_matches_eager(standin):
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.state_capturer.indexer_topk import IndexerTopkCapturer, set_global_indexer_capturer

    mr, fb = small_decode_setup(ServerArgs(disaggregation_mode="decode", standin_pool_pages=40, cuda_graph_max_bs=4,
                                           enable_return_indexer_topk=True, context_length=512))
    g = mr.decode_cuda_graph_runner
    assert g.capture_bs == [1, 2, 4] and g.can_run_graph(fb) and fb.batch_size == 3
    bufs = mr.token_to_kv_pool.index_k_with_scale_buffer
    for b in bufs:
        if b.shape[0]:
            b[0].zero_()  # capture already wrote the padding sink; clear it to see the replay's write
    out = mr.forward(fb)
    assert out.can_run_graph and g.raw_bs == 3 and g.bs == 4 and g.raw_num_token == 3
    logits = out.logits_output.next_token_logits
    assert logits.shape[0] == 3 and logits.data_ptr() == g.buffers.next_token_logits.data_ptr(), "a view of the static buffer"
    assert int(g.buffers.out_cache_loc[3]) == 0 and int(g.buffers.req_pool_indices[3]) == 0
    cap = mr.decode_cuda_graph_runner.backend._graphs[(4,)]._capturer
    assert isinstance(cap, IndexerTopkCapturer)
    graph_sel = cap.device_buffer[:3].clone()
    graph_logits = logits.clone()
    # the padded row wrote slot 0 (page 0, the sink): index-K of (position 0, token 0)
    from sglang.srt.models.dsa_standin import index_key
    for layer, b in enumerate(bufs):
        if b.shape[0]:
            assert torch.equal(b[0, :128], index_key(torch.tensor([0]), torch.tensor([0]), layer)[0][0])
    eager_cap = IndexerTopkCapturer(64 * 41, 4, 8, 8)
    set_global_indexer_capturer(eager_cap)
    eager = mr.eager_runner.execute(fb)
    assert torch.equal(eager.next_token_logits, graph_logits)
    assert torch.equal(eager_cap.device_buffer[:3], graph_sel)


def small_decode_setup(sa):
    """A decode ModelRunner with three requests of 70..90 cached tokens and a
    ForwardBatch for their next step."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    mr = ModelRunner(sa)
    g = torch.Generator().manual_seed(5)
    rpis, pos, ids, locs = [], [], [], []
    for L in (70, 81, 90):
        (rpi,) = mr.req_to_token_pool.alloc(1)
        slots = mr.token_to_kv_pool_allocator.alloc(L + 1)
        mr.req_to_token_pool.req_to_token[rpi, : L + 1] = slots.to(torch.int32)
        toks = torch.randint(0, 4096, (L,), generator=g)
        mr.model.store(toks, torch.arange(L), slots[:L])
        rpis.append(rpi), pos.append(L), ids.append(int(toks[-1])), locs.append(int(slots[L]))
    fb = ForwardBatch(ForwardMode.DECODE, 3, torch.tensor(ids), torch.tensor(rpis), torch.tensor(pos) + 1,
                      torch.tensor(locs), torch.tensor(pos), rids=["a", "b", "c"])
    return mr, fb


def test_replay_alias_changes_graph_selections_only(standin):
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.state_capturer.indexer_topk import IndexerTopkCapturer, set_global_indexer_capturer

    mr, fb = small_decode_setup(ServerArgs(disaggregation_mode="decode", standin_pool_pages=40, cuda_graph_max_bs=4,
                                           enable_return_indexer_topk=True, context_length=512,
                                           standin_fault="replay-alias"))
    g = mr.decode_cuda_graph_runner
    assert g.workspace.scratch.data_ptr() == g.workspace.index_logits.data_ptr(), "scratch aliases the index logits"
    cap = g.backend._graphs[(4,)]._capturer
    graph_logits = mr.forward(fb).logits_output.next_token_logits.clone()
    graph_sel = cap.device_buffer[:3].clone()
    eager_cap = IndexerTopkCapturer(64 * 41, 4, 8, 8)
    set_global_indexer_capturer(eager_cap)
    eager_logits = mr.eager_runner.execute(fb).next_token_logits
    eager_sel = eager_cap.device_buffer[:3]
    for layer in (0, 1, 3):
        assert not torch.equal(graph_sel[:, layer], eager_sel[:, layer]), "layer %d: same selection" % layer
        # the alias overwrote positions 0..63: the graph path picks the first 8 positions
        assert graph_sel[:, layer].sort(dim=1).values.tolist() == [list(range(8))] * 3
    assert not torch.equal(graph_logits, eager_logits)
    # eager twice on the same inputs agrees with itself (unaffected by the alias)
    again = mr.eager_runner.execute(fb).next_token_logits
    assert torch.equal(again, eager_logits)


# --- plugin framework ------------------------------------------------------------------------


@pytest.fixture
def registry(standin):
    import types

    from sglang.srt.plugins.hook_registry import HookRegistry

    mod = types.ModuleType("standin_hook_target")

    class Target:
        def add(self, a, b=1):
            return a + b

        @classmethod
        def name(cls, x):
            return "%s:%s" % (cls.__name__, x)

        @staticmethod
        def twice(x):
            return 2 * x

    def free(x):
        return x + 100

    mod.Target, mod.free = Target, free
    sys.modules[mod.__name__] = mod
    other = types.ModuleType("standin_hook_importer")
    other.free = free  # a stale `from standin_hook_target import free`
    sys.modules[other.__name__] = other
    HookRegistry.reset()
    try:
        yield HookRegistry, mod, other
    finally:
        HookRegistry.reset()
        del sys.modules[mod.__name__], sys.modules[other.__name__]


def test_hook_call_conventions(registry):
    from sglang.srt.plugins.hook_registry import HookType, plugin_hook

    R, mod, other = registry
    seen = []

    def before(self, a, b=1):
        seen.append(("before", a, b))
        return (self, a * 10), {"b": b}

    def after(result, self, a, b=1):
        seen.append(("after", result))
        return result + 1000

    def around(original, self, a, b=1):
        seen.append(("around-in", a))
        r = original(self, a, b)
        seen.append(("around-out", r))
        return -r

    R.register("standin_hook_target.Target.add", before, HookType.BEFORE)
    R.register("standin_hook_target.Target.add", after, HookType.AFTER)
    R.register("standin_hook_target.Target.add", around, HookType.AROUND)

    @plugin_hook("standin_hook_target.Target.name", type=HookType.AFTER)
    def after_name(result, cls, x):
        return result + "!"

    R.register("standin_hook_target.Target.twice", lambda x: 3 * x, HookType.REPLACE)
    R.register("standin_hook_target.free", lambda result, x: None, HookType.AFTER)  # None keeps the result
    R.apply_hooks()
    R.apply_hooks()  # idempotent: already patched targets are skipped

    assert mod.Target().add(2, b=3) == -(20 + 3 + 1000)
    assert seen == [("around-in", 2), ("before", 2, 3), ("after", 23), ("around-out", 1023)]
    assert mod.Target.name("x") == "Target:x!" and isinstance(mod.Target.__dict__["name"], classmethod)
    assert mod.Target.twice(5) == 15 and isinstance(mod.Target.__dict__["twice"], staticmethod)
    assert mod.free(1) == 101 and other.free is mod.free, "stale from-imports are rebound"
    assert mod.Target.add.__wrapped__.__wrapped__.__wrapped__.__name__ == "add"


def test_hook_on_a_class_needs_replace(registry, caplog):
    from sglang.srt.plugins.hook_registry import HookType

    R, mod, _ = registry
    with pytest.raises(TypeError):
        R.register("standin_hook_target.Target", type("X", (), {}), HookType.AFTER)
    R.register("standin_hook_target.Target", lambda *a: None, HookType.AROUND)
    R.register("standin_hook_target.free", lambda result, x: result * 2, HookType.AFTER)
    R.apply_hooks()  # the bad target is logged and skipped; the others apply
    assert "Failed to apply hooks to standin_hook_target.Target" in caplog.text
    assert isinstance(mod.Target, type) and mod.free(1) == 202

    class Replacement(mod.Target):
        pass

    R.reset()
    R.register("standin_hook_target.Target", Replacement, HookType.REPLACE)
    R.apply_hooks()
    assert mod.Target is Replacement


PROBE_PLUGIN = '''
import json, os

from sglang.srt.plugins.hook_registry import HookRegistry, HookType

def _note(what, **kw):
    path = os.path.join(os.environ["PROBE_DIR"], "%d.jsonl" % os.getpid())
    with open(path, "a") as f:
        f.write(json.dumps(dict(what=what, **kw)) + "\\n")

def _before_admit(self, running_batch):
    _note("admit", waiting=[r.rid for r in self.waiting_queue], rank=self.ps.tp_rank)

def _after_pop(result, self, rids_to_check=None):
    _note("transferred", rooms=[str(r.bootstrap_room) for r in result])

def _around_exec(original, self, forward_batch, pp_proxy_tensors=None):
    raw = forward_batch.batch_size
    if os.environ.get("PROBE_RAISE"):
        raise RuntimeError("probe boom")
    out = original(self, forward_batch, pp_proxy_tensors)
    _note("replay", raw_bs=raw, bs=self.bs, rows=int(out.next_token_logits.shape[0]))
    return out

def _before_move(self, tgt_loc, src_loc):
    _note("move", tgt=tgt_loc.tolist(), src=src_loc.tolist())

def load():
    _note("load")
    HookRegistry.register("sglang.srt.disaggregation.decode.SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch", _before_admit, HookType.BEFORE)
    HookRegistry.register("sglang.srt.disaggregation.decode.DecodeTransferQueue.pop_transferred", _after_pop, HookType.AFTER)
    HookRegistry.register("sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.execute", _around_exec, HookType.AROUND)
    HookRegistry.register("sglang.srt.mem_cache.index_key_cache.IndexKeyCache.move", _before_move, HookType.BEFORE)
'''


def make_probe_dist(root):
    with open(os.path.join(root, "standin_probe_plugin.py"), "w") as f:
        f.write(PROBE_PLUGIN)
    d = os.path.join(root, "standin_probe_plugin-0.1.dist-info")
    os.makedirs(d)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: standin-probe-plugin\nVersion: 0.1\n")
    with open(os.path.join(d, "entry_points.txt"), "w") as f:
        f.write("[sglang.srt.plugins]\nprobe = standin_probe_plugin:load\n")


def read_probe(probe_dir):
    out = {}
    for name in os.listdir(probe_dir):
        with open(os.path.join(probe_dir, name)) as f:
            out[int(name.split(".")[0])] = [json.loads(line) for line in f]
    return out


def test_plugin_entry_point_reaches_spawned_schedulers(tmp_path):
    plug, probe = tmp_path / "plug", tmp_path / "probe"
    plug.mkdir(), probe.mkdir()
    make_probe_dist(str(plug))
    env = {"PYTHONPATH": os.pathsep.join([str(plug), STANDIN]), "SGLANG_PLUGINS": "probe,another", "PROBE_DIR": str(probe)}
    t = run_engine(tmp_path, "--requests", "4", "--prompt-len", "100:300", "--tp", "2", "--spec", env=env)
    assert all(r["match"] for r in t["requests"])
    notes = read_probe(str(probe))
    decode_pids = {r["pid"] for r in t["ranks"]}
    assert decode_pids | {t["prefill_pid"]} <= set(notes), "every scheduler process loaded the plugin"
    assert len(notes) == 4, "launcher + prefill + 2 decode ranks"
    rooms = {r["room"] for r in t["requests"]}
    for rank in t["ranks"]:
        n = notes[rank["pid"]]
        assert [x["what"] for x in n].count("load") == 1
        assert {room for x in n if x["what"] == "transferred" for room in x["rooms"]} == rooms
        admits = [x for x in n if x["what"] == "admit"]
        assert admits and admits[0]["rank"] == rank["rank"] and admits[0]["waiting"]
        replays = [x for x in n if x["what"] == "replay"]
        graph_steps = [s for s in rank["steps"] if s["graph"]]
        assert len(replays) == len(graph_steps) > 0
        assert [(x["raw_bs"], x["bs"]) for x in replays] == [(s["raw_bs"], s["bs"]) for s in graph_steps]
        assert all(x["rows"] == x["raw_bs"] for x in replays)
        moves = [x for x in n if x["what"] == "move"]
        assert [(m["tgt"], m["src"]) for m in moves] == [(m["tgt_loc"], m["src_loc"]) for m in rank["moves"]]
    # the prefill process has no decode targets to fire
    assert [x["what"] for x in notes[t["prefill_pid"]]] == ["load"]


LOAD_PROBE = """
import json, os
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
load_plugins()  # idempotent per process
import sglang.srt.disaggregation.decode as d
print(json.dumps({"patched": sorted(HookRegistry._patched),
                  "wrapped": hasattr(d.DecodeTransferQueue.pop_transferred, "__wrapped__")}))
"""


@pytest.mark.parametrize("whitelist,loaded", [("someone_else", False), ("", True), ("x, probe", True)])
def test_sglang_plugins_whitelist(tmp_path, whitelist, loaded):
    plug, probe = tmp_path / "plug", tmp_path / "probe"
    plug.mkdir(), probe.mkdir()
    make_probe_dist(str(plug))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plug), STANDIN]), SGLANG_PLUGINS=whitelist, PROBE_DIR=str(probe))
    r = subprocess.run([sys.executable, "-c", LOAD_PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    notes = read_probe(str(probe))
    if loaded:
        assert list(notes.values()) == [[{"what": "load"}]], "loaded and called once"
        assert len(out["patched"]) == 4 and out["wrapped"]
    else:
        assert notes == {} and out == {"patched": [], "wrapped": False}


def test_a_failing_scheduler_process_fails_the_engine(tmp_path):
    """A hook that raises inside the engine reaches the step thread (which is
    why kvcanary's hooks must never raise); the launcher reports it, exit 1."""
    plug, probe = tmp_path / "plug", tmp_path / "probe"
    plug.mkdir(), probe.mkdir()
    make_probe_dist(str(plug))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plug), STANDIN]), SGLANG_PLUGINS="probe",
               PROBE_DIR=str(probe), PROBE_RAISE="1")
    r = subprocess.run([sys.executable, ENGINE, "--requests", "2", "--prompt-len", "70:90", "--tp", "2", "--timeout", "100",
                        "--log-level", "warning"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "engine: decode rank " in r.stderr and "RuntimeError: probe boom" in r.stderr


# --- engine runs --------------------------------------------------------------------------


def check_clean(t, tp):
    assert [r["match"] for r in t["requests"]] == [True] * len(t["requests"]), [
        (r["rid"], r["expected"], r["outputs"]) for r in t["requests"] if not r["match"]]
    assert len(t["ranks"]) == tp and len({r["pid"] for r in t["ranks"]} | {t["prefill_pid"], os.getpid()}) == tp + 2
    for rank in t["ranks"]:
        assert rank["transferred"] == t["sent"], "rank %d: landed index-K differs from what prefill sent" % rank["rank"]
        steps = rank["steps"]
        assert steps == t["ranks"][0]["steps"], "TP ranks run identical steps"
        assert any(s["graph"] for s in steps) and any(not s["graph"] for s in steps)
        for s in steps:
            assert (s["bs"] in (1, 2, 4) and s["bs"] >= s["raw_bs"]) if s["graph"] else s["raw_bs"] > 4
        assert [s["forward_pass_id"] for s in steps] == list(range(1, len(steps) + 1))
    for r in t["requests"]:
        pre, dec = t["prefill_page_tables"][r["rid"]], t["ranks"][0]["page_tables"][r["rid"]]
        assert len(pre) == (r["prompt_len"] + 63) // 64 and len(dec) == (r["prompt_len"] + r["max_new_tokens"] + 2 + 63) // 64
        assert 0 not in pre and 0 not in dec
    prompt_pages = lambda pt, r: pt[r["rid"]][: (r["prompt_len"] + 63) // 64]  # noqa: E731
    assert [prompt_pages(t["prefill_page_tables"], r) for r in t["requests"]] != [
        prompt_pages(t["ranks"][0]["page_tables"], r) for r in t["requests"]], "prefill and decode use different pages"
    late = [r["rid"] for r in t["requests"] if r["late"]]
    assert late and late[0] not in t["ranks"][0]["steps"][0]["rids"], "the late request lands while others decode"
    assert t["transfer_corrupt"] is None


def test_clean_run_base_variant_two_ranks(tmp_path):
    t = run_engine(tmp_path, "--tp", "2", "--requests", "6", "--prompt-len", "200:600", "--seed", "3")
    check_clean(t, 2)
    assert all(not r["moves"] for r in t["ranks"])


def test_clean_run_new_variant_with_correct_spec_moves(tmp_path):
    t = run_engine(tmp_path, "--req-kv-variant", "new", "--spec", "--requests", "5", "--prompt-len", "200:600")
    check_clean(t, 1)
    moves = t["ranks"][0]["moves"]
    r0 = t["requests"][0]
    assert len(moves) == r0["max_new_tokens"] - 1 and all(not m["faulty"] for m in moves)
    for m in moves:
        assert m["rid"] == "r0" and m["src_loc"][0] == m["tgt_loc"][0] + 2
        assert m["written_pages"] == [{"page": m["tgt_loc"][0] // 64, "owners": [{"rid": "r0", "state": "running"}]}]


def c_rid(t, c):
    return next(r["rid"] for r in t["requests"] if r["room"] == str(c["room"]))


def test_transfer_corrupt_changes_one_room_layer_on_one_rank(tmp_path):
    t = run_engine(tmp_path, "--fault", "transfer-corrupt", "--tp", "2", "--requests", "5", "--prompt-len", "200:600", "--seed", "1")
    c = t["transfer_corrupt"]
    assert c is not None and c["rank"] == 0
    assert t["prefill_page_tables"][c_rid(t, c)][c["entry"]] == c["prefill_page"]
    assert t["ranks"][0]["page_tables"][c_rid(t, c)][c["entry"]] == c["decode_page"]
    room, layer = str(c["room"]), str(c["layer"])
    plan = t["transfer_corrupt_planned"]
    assert (plan["room"], plan["layer"], plan["entry"]) == (c["room"], c["layer"], c["entry"])
    victim = next(r for r in t["requests"] if r["room"] == room)
    assert 0 <= c["entry"] < (victim["prompt_len"] + 63) // 64
    r0, r1 = t["ranks"]
    assert r1["transferred"] == t["sent"], "the other rank received clean bytes"
    for rm, digests in t["sent"].items():
        for lay, d in digests.items():
            assert (r0["transferred"][rm][lay] != d) == (rm == room and lay == layer), (rm, lay)


def test_spec_move_bug_overwrites_another_requests_page(tmp_path):
    t = run_engine(tmp_path, "--spec", "--fault", "spec-move", "--requests", "8")
    moves = t["ranks"][0]["moves"]
    assert moves and all(m["faulty"] and m["rid"] == "r0" for m in moves)
    victims = set()
    for m in moves:
        (w,) = m["written_pages"]
        assert w["page"] == m["tgt_loc"][0], "the token id was used as the page row"
        assert w["page"] != m["tgt_loc"][0] // 64
        for o in w["owners"]:
            if o["rid"] != "r0" and o["state"] == "running" and w["changed_layers"]:
                victims.add(o["rid"])
    assert victims, moves
    by_rid = {r["rid"]: r for r in t["requests"]}
    assert not by_rid["r0"]["match"], "r0's own token never reached its slot"
    assert any(not by_rid[v]["match"] for v in victims)
    untouched = set(by_rid) - victims - {"r0"}
    assert all(by_rid[r]["match"] for r in untouched), [r for r in untouched if not by_rid[r]["match"]]
    assert t["ranks"][0]["transferred"] == t["sent"], "the bug is in decode, not in the transfer"


def test_replay_alias_changes_only_replayed_requests(tmp_path):
    t = run_engine(tmp_path, "--fault", "replay-alias", "--requests", "6", "--prompt-len", "200:600")
    rank = t["ranks"][0]
    replayed = graph_rids(rank)
    assert replayed and rank["replayed_forward_pass_ids"] == [s["forward_pass_id"] for s in rank["steps"] if s["graph"]]
    for r in t["requests"]:
        if r["rid"] not in replayed:
            assert r["match"], r["rid"]
    assert any(not r["match"] for r in t["requests"] if r["rid"] in replayed)
    assert rank["transferred"] == t["sent"]


def test_engine_help_and_bad_arguments():
    r = subprocess.run([sys.executable, ENGINE, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for opt in ("--requests", "--decode-steps", "--tp", "--seed", "--req-kv-variant", "--fault", "--spec", "--truth"):
        assert opt in r.stdout
    r = subprocess.run([sys.executable, ENGINE, "--prompt-len", "9:3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--prompt-len '9:3'" in r.stderr
    r = subprocess.run([sys.executable, ENGINE, "--fault", "spec-move"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs --spec" in r.stderr


def test_clean_scripts_are_deterministic(standin):
    from sglang.srt.models.dsa_standin import reference_script

    a = reference_script(list(range(300, 700)), 6)
    assert a == reference_script(list(range(300, 700)), 6)
    assert a != reference_script(list(range(300, 699)) + [5], 6)

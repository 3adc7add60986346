"""Graph vs eager (graphdiff/SPEC.md) around DecodeCudaGraphRunner.execute.

On a sampled step (model_runner.forward_pass_id % KVCANARY_GRAPHDIFF_EVERY ==
0: the same step on every TP rank, because the eager forward runs TP/EP
collectives and a rerun on one rank alone would hang NCCL):

1. the original runs (the graph replay) and its result is kept untouched;
2. next_token_logits[:raw_bs] is cloned (it is a view of the graph's static
   output buffer, shared by all graph runners), and so are the indexer top-k
   rows our capturer's static buffers received from the replay;
3. the index-K rows (all layers, the 132-byte regions: 128 B of K and 4 B of
   scale per slot) and the main-KV rows at out_cache_loc are saved;
4. model_runner.eager_runner.execute(forward_batch, pp_proxy_tensors) reruns
   the step eagerly (kvcanary's hooks are off on this thread meanwhile);
5. the saved rows are restored, so the engine continues from the graph's
   writes exactly as without kvcanary;
6. one graphdiff.sample per request and source is emitted: source
   "next_token_logits" (KVCANARY_GRAPHDIFF_LOGITS: full vectors, or the top-N
   token ids of each side) and "indexer_topk.L" for each layer L of
   KVCANARY_GRAPHDIFF_LAYERS.

Indexer top-k: AFTER ModelRunner.init_indexer_capturer (before graph capture)
a capturer chaining to SGLang's is installed. Its capture(layer_id,
topk_indices) copies the selected layers' indices into static buffers (one per
layer and shape); during graph capture that copy is recorded into the graph, so
every replay refreshes the buffer of its bucket, and an eager forward writes
its own. A capturer that is not None changes what SGLang does (the scheduler
collects top-k per request; some DSA kernels are chosen differently), so one
is installed only when KVCANARY_GRAPHDIFF_LAYERS names layers (top-k stays
opt-in), and the run's notes say so ("graphdiff.topk on: ..."). On
DeepSeek-V4 the indexer calls capture(compress_layer_id, raw_indices): the ids
are mapped to model layer ids through the pool's layer_mapping, and a
non-None capturer changes the captured graph itself (one more allocation,
topk_transform_512 instead of topk_transform_512_v2, on the indexer's side
stream when multi-stream overlap is on): the instrument can perturb the very
allocation pattern under suspicion, which is why it is not on by default.

SGLANG_FORCE_COARSE_WAR_BARRIER=1 is set when graphdiff is on: after a replay
kvcanary reads the graph's static output buffers and runs a second forward
that SGLang's fine-grained write-after-read barrier does not know about; the
coarse barrier makes the next replay wait for every earlier read.
"""

from __future__ import annotations

import base64
import logging

import torch

from ... import digest as D
from .. import access as A
from ..hooks import step_of

log = logging.getLogger("kvcanary")

DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def f32_b64(t: torch.Tensor) -> str:
    """Base64 of little-endian float32 bytes (hook.Float32s)."""
    t = t.detach().reshape(-1).to(torch.float32).cpu().contiguous()
    try:
        raw = t.numpy().astype("<f4", copy=False).tobytes()
    except Exception:  # noqa: BLE001 - numpy is optional
        raw = bytes(t.view(torch.uint8).tolist())
    return base64.b64encode(raw).decode("ascii")


def logits_of(res):
    """next_token_logits of a runner's result (object or tuple)."""
    if isinstance(res, torch.Tensor):
        return res
    v = getattr(res, "next_token_logits", None)
    if v is None and isinstance(res, (tuple, list)) and res:
        v = getattr(res[0], "next_token_logits", None)
    return v


def _capturing() -> bool:
    try:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:  # noqa: BLE001
        return False


class TopkCapturer:
    """An indexer capturer that records the selected layers' top-k into static
    buffers and forwards every call to the capturer it replaced."""

    def __init__(self, gd, prev, layer_ids=None):
        self._gd = gd
        self._prev = prev
        # DeepSeek-V4's indexer calls capture(compress_layer_id, raw_indices):
        # its ids are C4 ordinals, mapped here to model layer ids.
        self._layer_ids = layer_ids
        self.bufs = {}  # (layer, shape) -> tensor
        self.last = {}  # layer -> key of the last Python-side capture
        self.calls = 0
        self.armed = False  # a sampled step's two forwards are running

    def capture(self, layer_id, topk_indices):
        # The eager rerun's selections are kvcanary's, not the engine's: SGLang's
        # own capturer (--enable-return-indexer-topk) keeps the graph's.
        if self._prev is not None and not self._gd.b.busy():
            self._prev.capture(layer_id, topk_indices)  # positional: V4's capturer names them otherwise
        try:
            if self._layer_ids is not None:
                layer_id = self._layer_ids.get(int(layer_id), -1)
                if layer_id < 0:
                    return
            # Copy while a sampled step runs (its Python-side forwards), and
            # always while a CUDA graph is being captured: the copy becomes part
            # of the graph, so every replay refreshes the buffer without Python.
            if (self.armed or _capturing()) and self._gd.wants_layer(int(layer_id)) \
                    and isinstance(topk_indices, torch.Tensor):
                key = (int(layer_id), tuple(topk_indices.shape))
                buf = self.bufs.get(key)
                if buf is None:
                    buf = self.bufs[key] = torch.empty_like(topk_indices)
                buf.copy_(topk_indices)
                self.last[int(layer_id)] = key
                self.calls += 1
        except Exception as e:  # noqa: BLE001 - never into the indexer
            self._gd.b.site("indexer capturer", ("graphdiff.topk",)).fail(e)

    def on_forward_end(self, *args, **kwargs):
        if self._prev is not None:
            return self._prev.on_forward_end(*args, **kwargs)
        return None

    def get_topk(self, *args, **kwargs):
        if self._prev is not None:
            return self._prev.get_topk(*args, **kwargs)
        return None

    def __getattr__(self, name):
        prev = self.__dict__.get("_prev")
        if prev is None:
            raise AttributeError(name)
        return getattr(prev, name)

    def read(self, layer: int, rows: int, bucket, python_ran: bool):
        """Clone the rows of `layer` the last forward wrote: the buffer of the
        last Python-side capture if one ran, else (a graph replay) the buffer
        captured for the bucket's row count."""
        key = self.last.get(layer) if python_ran else None
        if key is None and isinstance(bucket, int):
            for k in self.bufs:
                if k[0] == layer and k[1] and k[1][0] == bucket:
                    key = k
                    break
        if key is None:
            return None
        return self.bufs[key][:rows].clone()


class GraphDiff:
    def __init__(self, b):
        self.b = b
        self.capturer = None
        self._warned = set()

    def _warn(self, key, msg, *a):
        if key not in self._warned:
            self._warned.add(key)
            log.warning("kvcanary: graphdiff: " + msg, *a)

    def wants_layer(self, layer: int) -> bool:
        return self.b.settings.graphdiff_layer(layer)

    # -- the capturer -------------------------------------------------------------------
    def on_init_capturer(self, result, mr, *args, **kwargs):
        if not self.b.settings.graphdiff_layers:
            return
        from sglang.srt.state_capturer import indexer_topk as it  # type: ignore

        prev = it.get_global_indexer_capturer()
        if isinstance(prev, TopkCapturer):
            return
        if prev is None:
            self._warn("none", "SGLang runs without an indexer capturer; kvcanary installs one for "
                       "KVCANARY_GRAPHDIFF_LAYERS, which makes SGLang treat indexer top-k capture as "
                       "on (some DSA kernel choices depend on it)")
        ik = A.find_index_k(getattr(mr, "token_to_kv_pool", None))
        cap = TopkCapturer(self, prev, ik.capture_ids)
        it.set_global_indexer_capturer(cap)
        self.capturer = cap
        self.b.info("graphdiff.topk on: kvcanary installed an indexer top-k capturer for KVCANARY_GRAPHDIFF_LAYERS "
                    "before graph capture, and a capturer changes the captured graph (%s): the graph compared "
                    "is not exactly the one that runs without kvcanary" % (
                        "DeepSeek-V4: one more allocation and topk_transform_512 instead of topk_transform_512_v2 "
                        "on the indexer's stream" if ik.kind == "v4" else
                        "SGLang collects top-k per request and some DSA kernels are chosen differently"))

    # -- around the replay ----------------------------------------------------------------
    def pre(self, runner, fb):
        step = step_of(runner)
        if self.capturer is not None:
            self.capturer.armed = False  # whatever a failed step left behind
        if step < 0 or step % self.b.settings.graphdiff_every != 0:
            return None
        sa = getattr(getattr(runner, "model_runner", None), "server_args", None)
        if getattr(sa, "enable_dp_attention", False):
            # Under DP attention an idle rank replays the same step in IDLE
            # mode: a rerun on the busy ranks alone would wait forever in the
            # MoE collectives. Every rank reads the same server_args, so every
            # rank skips alike.
            self._warn("dp", "graph-vs-eager reruns are off under --enable-dp-attention "
                       "(idle DP ranks would not join the rerun's collectives)")
            return None
        fm = getattr(fb, "forward_mode", None)
        if fm is not None and hasattr(fm, "is_decode") and not fm.is_decode():
            return None  # target-verify and other multi-token modes: rows are not requests
        cap = self.capturer
        if cap is not None:
            cap.armed = True  # cleared in post, after the eager rerun
        return {"step": step, "bs": int(fb.batch_size), "calls": cap.calls if cap is not None else 0}

    def post(self, st, runner, fb, pp, result):
        """Rerun the sampled step eagerly and compare. Once pre() said this
        step is sampled, the eager forward runs on this rank whatever fails
        around it: every TP rank took the same decision from forward_pass_id,
        and a rank that skipped the rerun would leave the others waiting in
        its collectives. A failure before the rerun drops the comparison (and
        is raised after it, to be counted), never the rerun."""
        mr = runner.model_runner
        raw_bs = getattr(runner, "raw_bs", None)
        raw_bs = raw_bs if isinstance(raw_bs, int) else st["bs"]
        bucket = getattr(runner, "bs", None)
        mode = self.b.settings.logits_mode
        cap = self.capturer
        layers, g_logits, g_topk, saved, calls1, prep_err = [], None, {}, [], 0, None
        try:
            layers = sorted({k[0] for k in cap.bufs}) if cap is not None else []
            if mode != "none":
                lg = logits_of(result)
                if lg is not None:
                    g_logits = lg[:raw_bs].clone()
            python_ran = cap is not None and cap.calls != st["calls"]
            for L in layers:
                t = cap.read(L, raw_bs, bucket, python_ran)
                if t is not None:
                    g_topk[L] = t
            calls1 = cap.calls if cap is not None else 0
            saved = self._save_rows(mr, fb)
        except Exception as e:  # noqa: BLE001 - raised after the rerun
            prep_err = e
        self.b.tls.busy = True
        try:
            e_res = mr.eager_runner.execute(fb, pp)
            if prep_err is not None:
                raise prep_err
            e_logits = None
            if g_logits is not None:
                lg = logits_of(e_res)
                if lg is not None:
                    e_logits = lg[:raw_bs].clone()
            e_topk = {}
            eager_ran = cap is not None and cap.calls != calls1
            for L in layers:
                t = cap.read(L, raw_bs, None, eager_ran) if eager_ran else None
                if t is not None:
                    e_topk[L] = t
        finally:
            self.b.tls.busy = False
            if cap is not None:
                cap.armed = False
            self._restore_rows(saved)
        tensors = {}
        k = self.b.settings.logits_k
        if g_logits is not None and e_logits is not None:
            if mode == "full":
                tensors["g_logits"], tensors["e_logits"] = g_logits, e_logits
            else:
                kk = min(k, g_logits.shape[-1])
                tensors["g_logits"] = torch.topk(g_logits.float(), kk, dim=-1).indices
                tensors["e_logits"] = torch.topk(e_logits.float(), kk, dim=-1).indices
        for L in g_topk:
            if L in e_topk:
                tensors["g_topk.%d" % L] = g_topk[L]
                tensors["e_topk.%d" % L] = e_topk[L]
        if not tensors:
            return
        seq_cpu = getattr(fb, "seq_lens_cpu", None)
        seq = seq_cpu if seq_cpu is not None else fb.seq_lens
        tensors["seq"] = seq[:raw_bs]
        rids = [str(r) for r in list(getattr(fb, "rids", None) or [])[:raw_bs]]
        if len(rids) != raw_bs:
            rids = ["row%d" % i for i in range(raw_bs)]
        ctx = {"step": st["step"], "rids": rids, "mode": mode,
               "dtype": DTYPES.get(g_logits.dtype, "") if g_logits is not None else ""}
        self.b.deferred.submit(tensors, lambda h: self._build(h, ctx), "graphdiff")

    def _build(self, h, ctx):
        out = []
        seq = h["seq"].tolist()
        for i, rid in enumerate(ctx["rids"]):
            base = {"step": ctx["step"], "request": rid, "seq_len": int(seq[i])}
            if "g_logits" in h:
                body = dict(base, source="next_token_logits")
                if ctx["dtype"]:
                    body["dtype"] = ctx["dtype"]
                if ctx["mode"] == "full":
                    body["graph"] = f32_b64(h["g_logits"][i])
                    body["eager"] = f32_b64(h["e_logits"][i])
                else:
                    body["topk_graph"] = [int(v) for v in h["g_logits"][i].tolist()]
                    body["topk_eager"] = [int(v) for v in h["e_logits"][i].tolist()]
                    body["k"] = len(body["topk_graph"])
                out.append(("graphdiff.sample", body))
            for key in sorted(k for k in h if k.startswith("g_topk.")):
                L = key.split(".", 1)[1]
                g, e = h[key][i], h["e_topk." + L][i]
                body = dict(base, source="indexer_topk." + L, k=int(g.shape[-1]),
                            topk_graph=[int(v) for v in g.reshape(-1).tolist() if v >= 0],
                            topk_eager=[int(v) for v in e.reshape(-1).tolist() if v >= 0])
                out.append(("graphdiff.sample", body))
        return out

    # -- rows the eager rerun writes ---------------------------------------------------------
    def _save_rows(self, mr, fb):
        """The index-K slots the eager rerun writes (ik.written_slots: on V4
        the C4 slots of rows with seq_len % 4 == 0 and the null slot 0), all
        layers, K and scale bytes; and the main-KV rows at out_cache_loc."""
        pool = getattr(mr, "token_to_kv_pool", None)
        loc = fb.out_cache_loc.reshape(-1).long()
        saved = []
        ik = A.find_index_k(pool)
        lay = D.LAYOUTS.get(ik.layout or "")
        slots = ik.written_slots(fb.out_cache_loc, fb.seq_lens, getattr(fb, "positions", None)) if lay is not None and ik.buffers else None
        for _, buf in ik.buffers if slots is not None else ():
            flat = buf.view(-1)
            l = slots.to(buf.device)
            page = torch.div(l, A.PAGE, rounding_mode="floor")
            off = l % A.PAGE
            base = page * lay.page_bytes
            kidx = (base + off * lay.k_bytes).unsqueeze(1) + torch.arange(lay.k_bytes, device=buf.device)
            parts = [kidx]
            sb = lay.token_bytes - lay.k_bytes
            if sb:
                sidx = (base + A.PAGE * lay.k_bytes + off * sb).unsqueeze(1) + torch.arange(sb, device=buf.device)
                parts.append(sidx)
            idx = torch.cat(parts, dim=1).reshape(-1)
            saved.append((flat, idx, flat[idx]))
        for buf in A.kv_buffers(pool):
            l = loc.to(buf.device)
            saved.append((buf, l, buf[l].clone()))
        return saved

    @staticmethod
    def _restore_rows(saved):
        for dst, idx, val in saved:
            dst[idx] = val

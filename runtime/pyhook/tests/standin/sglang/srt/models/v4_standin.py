"""The stand-in's tiny DeepSeek-V4-like model (CPU torch), C4 indexer only.

Layers follow a compress-ratio list like DeepSeek-V4-Flash's at toy size
(``COMPRESS_RATIOS``: 0 = sliding window only, 4 = C4 with an indexer, 128 =
C128): the C4 layers are model layers 2 and 4 (compress_layer_id 0 and 1).
- A C4 entry g of a request (positions 4g..4g+3) is written when position
  4g+3 is processed, at C4 slot ``loc // 4``; every other row writes C4 slot 0
  (the null slot), as SGLang's ``c4_out_loc`` does. Its index-K is a function
  of (position 4g+3, token, layer), in the pool's layout: fp8 (real e4m3 bytes
  + fp32 scale), fp4 (packed e2m1 nibbles + one ue8m0 byte per 32 values) or
  bf16 (128 bf16 values). Every value is exact in float64, so selections do
  not depend on batch shape.
- The C4 indexer of a decode row scores the row's ``seq_len // 4`` entries
  with a query q(position, token, layer), keeps the top ``TOPK`` entries, and
  calls ``capturer.capture(compress_layer_id, raw_indices)`` (positionally,
  C4 entry indices). The next token is a function of the tokens at positions
  4g+3 of the selected entries (read from the main KV).

Multi-stream overlap (``MQALayer``'s gate, reference sglang-dsv4.md §2):
``enable_multi_stream = envs.SGLANG_OPT_USE_MULTI_STREAM_OVERLAP.get() and
self.alt_streams is not None and get_is_capture_mode() and bs <= 64``; the
alternate streams exist only when the variable is on. So only captured graphs
take the multi-stream path; an eager forward never does.

The captured path's transient memory comes from a planner (``GraphArena``)
that computes lifetimes in capture order as if single-stream and reuses freed
blocks best-fit. The bf16 indexer's logits are transient (in the arena); the
fp8/fp4 logits live in a persistent buffer outside it (as the deep_gemm path
does). After the indexer, the main stream's q_b projection allocates its
scratch: for one row it fits the block an earlier q_a scratch freed; for more
rows only the freed logits block fits, so the plan gives it the logits' bytes
(legal in single-stream order: the logits are dead by then). Replay runs the
plan's work in stream order: single-stream = program order (logits, top-k,
q_b); multi-stream = the streams interleaved (the indexer's logits on its
stream, then main's q_b, then the indexer's top-k), so with bf16, overlap and
a batch of 2+ rows the top-k reads logits q_b overwrote. Nothing here flags a
fault: the wrong selections come from the shared bytes.
"""

from __future__ import annotations

import torch

from sglang.srt.models import dsa_standin as base

VOCAB = base.VOCAB
TOPK = 8
COMPRESS_RATIOS = [0, 0, 4, 128, 4, 128]
NUM_LAYERS = len(COMPRESS_RATIOS)
C4_LAYERS = [L for L, r in enumerate(COMPRESS_RATIOS) if r == 4]
HEAD_DIM = 128
KV_DIM = 4
QB_WIDTH = 64  # floats per row of the main stream's q_b scratch
MULTI_STREAM_BS_LIMIT = 64  # _multi_stream_bs_limit off Blackwell

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                    dtype=torch.float64)


def _hash(positions, tokens, layer, salt):
    return base._features(positions, tokens, layer, salt)


def index_key(positions: torch.Tensor, tokens: torch.Tensor, layer: int, layout: str):
    """(uint8 [n, K] bytes, uint8 [n, 4] scale bytes or None) of C4 entries."""
    h = _hash(positions, tokens, layer, 11)
    if layout == "fp8":
        kb, sc = base.index_key(positions, tokens, layer)
        return kb, sc.contiguous().view(torch.uint8).view(-1, 4)
    if layout == "fp4":
        nib = ((h >> 20) & 0xF).to(torch.uint8)  # [n, 128] e2m1 codes
        packed = nib[:, 0::2] | (nib[:, 1::2] << 4)
        e = ((h[:, :4] >> 40) % 5 - 2 + 127).to(torch.uint8)  # ue8m0 exponent per 32 values
        return packed, e
    vals = (((h >> 20) & 0xFF) - 128).to(torch.float32) / 16.0  # exact in bf16
    return vals.to(torch.bfloat16).contiguous().view(torch.uint8).view(-1, 2 * HEAD_DIM), None


def dequant(k: torch.Tensor, s, layout: str) -> torch.Tensor:
    """float64 [n, 128] from the stored bytes."""
    if layout == "fp8":
        return base.fp8_e4m3_decode(k) * s.contiguous().view(torch.float32).view(-1, 1).to(torch.float64)
    if layout == "fp4":
        lo, hi = (k & 0xF).long(), (k >> 4).long()
        codes = torch.stack([lo, hi], dim=2).reshape(k.shape[0], HEAD_DIM)
        scale = torch.pow(2.0, s.to(torch.float64) - 127).repeat_interleave(32, dim=1)
        return E2M1[codes] * scale
    return k.contiguous().view(torch.bfloat16).to(torch.float64).view(-1, HEAD_DIM)


def index_query(positions, tokens, layer):
    return base.index_query(positions, tokens, layer)


class GraphArena:
    """Best-fit planner over one flat float64 arena, lifetimes in capture order."""

    def __init__(self):
        self.blocks = []  # [offset, size, free]
        self.top = 0

    def alloc(self, size: int) -> int:
        fits = [b for b in self.blocks if b[2] and b[1] >= size]
        if fits:
            b = min(fits, key=lambda b: b[1])
            b[2] = False
            return b[0]
        self.blocks.append([self.top, size, False])
        self.top += size
        return self.blocks[-1][0]

    def free(self, offset: int) -> None:
        for b in self.blocks:
            if b[0] == offset:
                b[2] = True


class GraphWorkspace:
    """Per captured batch size: the plan (arena, views) and the stream choice."""

    def __init__(self, max_bs: int, max_context_len: int, layout: str):
        self.max_c4 = max_context_len // 4 + 1
        self.layout = layout
        self.plans = {}
        # fp8/fp4: logits in a persistent buffer outside the graph arena
        self.persistent_logits = torch.zeros((max_bs, self.max_c4), dtype=torch.float64)

    def plan(self, bs: int, multi_stream: bool) -> dict:
        a = GraphArena()
        q_a = a.alloc(QB_WIDTH)  # main stream: q_lora scratch, dead before the indexer's output is read
        a.free(q_a)
        logits = None
        if self.layout == "bf16":
            logits = a.alloc(bs * self.max_c4)  # the indexer's transient logits
            a.free(logits)  # dead after top-k (single-stream order)
        q_b = a.alloc(bs * QB_WIDTH)  # main stream: q_b scratch
        arena = torch.zeros(a.top, dtype=torch.float64)
        p = {"multi_stream": multi_stream, "arena": arena,
             "q_b": arena[q_b: q_b + bs * QB_WIDTH].view(bs, QB_WIDTH),
             "logits": (arena[logits: logits + bs * self.max_c4].view(bs, self.max_c4) if logits is not None
                        else self.persistent_logits[:bs])}
        self.plans[bs] = p
        return p


class StandinV4ForCausalLM:
    def __init__(self, layout: str = "fp8"):
        from sglang.srt.environ import envs

        self.layout = layout
        self.req_to_token_pool = None
        self.token_to_kv_pool = None
        self.num_layers = NUM_LAYERS
        self.vocab_size = VOCAB
        # DeepseekV4Model: five alternate streams, None when overlap is off
        self.alt_streams = [object() for _ in range(5)] if envs.SGLANG_OPT_USE_MULTI_STREAM_OVERLAP.get() else None

    def bind_pools(self, req_to_token_pool, token_to_kv_pool):
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = token_to_kv_pool

    def make_workspace(self, max_bs: int, max_context_len: int):
        return GraphWorkspace(max_bs, max_context_len, self.layout)

    def store(self, input_ids, positions, loc) -> None:
        pool = self.token_to_kv_pool
        ids, pos = input_ids.long(), positions.long()
        for layer in range(self.num_layers):
            kv = torch.stack([ids.float(), pos.float(), torch.full_like(pos, layer).float(), torch.ones_like(pos).float()], dim=1)
            pool.set_kv_buffer(layer, loc, kv)
        ip = pool.index_pools[4]
        c4 = torch.where(pos % 4 == 3, loc.long() // 4, torch.zeros_like(pos))  # c4_out_loc
        for layer in C4_LAYERS:
            kb, sb = index_key(pos, ids, layer, self.layout)
            ip.store(pool.layer_mapping[layer].compress_layer_id, c4, kb, sb)

    def _scores(self, layer, c4_slots, q):
        ip = self.token_to_kv_pool.index_pools[4]
        k, s = ip.read(self.token_to_kv_pool.layer_mapping[layer].compress_layer_id, c4_slots)
        return dequant(k, s, self.layout) @ q

    def forward(self, input_ids, positions, forward_batch, workspace: GraphWorkspace = None, capturer=base._GLOBAL, **kwargs):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.model_executor.runner.decode_cuda_graph_runner import get_is_capture_mode
        from sglang.srt.state_capturer.indexer_topk import get_global_indexer_capturer

        if capturer is base._GLOBAL:
            capturer = get_global_indexer_capturer()
        fb = forward_batch
        self.store(input_ids, positions, fb.out_cache_loc)
        if fb.forward_mode.is_decode():
            rows = [(i, int(positions[i]), int(input_ids[i])) for i in range(fb.batch_size)]
        else:
            rows = [(0, int(positions[-1]), int(input_ids[-1]))]
        bs = len(rows)
        plan = None
        if workspace is not None:
            if get_is_capture_mode():
                ms = self.alt_streams is not None and get_is_capture_mode() and bs <= MULTI_STREAM_BS_LIMIT
                workspace.plan(bs, ms)
            plan = workspace.plans[bs]
        r2t = self.req_to_token_pool.req_to_token
        kv0 = self.token_to_kv_pool.get_key_buffer(0)
        sel = {}
        topk = {}
        for layer in C4_LAYERS:
            cid = self.token_to_kv_pool.layer_mapping[layer].compress_layer_id
            topk[cid] = torch.full((bs, TOPK), -1, dtype=torch.int32)
            qs, cnts, slots = [], [], []
            for i, pos, tok in rows:
                n = int(fb.seq_lens[i]) // 4
                cnts.append(n)
                slots.append(r2t[int(fb.req_pool_indices[i]), 3:4 * n:4].long() // 4)
                qs.append(index_query(torch.tensor([pos]), torch.tensor([tok]), layer)[0])

            def indexer_logits():
                out = []
                for i in range(bs):
                    sc = self._scores(layer, slots[i], qs[i])
                    if plan is None:
                        out.append(sc)
                    else:
                        plan["logits"][i, : cnts[i]] = sc
                        out.append(plan["logits"][i, : cnts[i]])
                return out

            def indexer_topk(lg):
                for i in range(bs):
                    order = torch.sort(lg[i], descending=True, stable=True).indices[: min(TOPK, cnts[i])]
                    sel[(layer, i)] = order
                    topk[cid][i, : order.numel()] = order.to(torch.int32)

            def q_b():
                if plan is not None:
                    for i in range(bs):
                        plan["q_b"][i].fill_(float(qs[i] @ qs[i]) * 1e6)

            if plan is not None and plan["multi_stream"]:
                lg = indexer_logits()  # stream_indexer
                q_b()  # main stream, not ordered after the indexer's top-k
                indexer_topk(lg)  # stream_indexer
            else:
                indexer_topk(indexer_logits())
                q_b()
        out = torch.zeros((bs, VOCAB), dtype=torch.float32)
        for i, pos, tok in rows:
            acc = 7 * pos + 3 * tok
            row = r2t[int(fb.req_pool_indices[i])]
            for layer in C4_LAYERS:
                g = sel[(layer, i)]
                toks = kv0[row[4 * g + 3].long(), 0].long()
                acc += (layer + 1) * int(toks.sum())
                out[i].index_add_(0, toks % VOCAB, torch.full((toks.numel(),), 0.01 * (layer + 1)))
            out[i, acc % VOCAB] += 10.0
        if capturer is not None:
            for cid, t in topk.items():
                capturer.capture(cid, t)  # positional, C4 entry indices
        return LogitsProcessorOutput(next_token_logits=out)


def reference_script(prompt, num_output_tokens: int, layout: str = "fp8"):
    """The tokens a clean engine must produce, computed eagerly alone."""
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    L = len(prompt)
    total = L + num_output_tokens
    pages = (total + 255) // 256
    r2t = ReqToTokenPool(1, total + 1)
    pool = DeepSeekV4TokenToKVPool((pages + 1) * 256, 256, COMPRESS_RATIOS, layout)
    r2t.req_to_token[1, :total] = torch.arange(256, 256 + total, dtype=torch.int32)
    model = StandinV4ForCausalLM(layout)
    model.bind_pools(r2t, pool)
    ids = torch.tensor(list(prompt), dtype=torch.int64)
    pos = torch.arange(L, dtype=torch.int64)
    fb = ForwardBatch(ForwardMode.EXTEND, 1, ids, torch.tensor([1]), torch.tensor([L]), pos + 256, pos)
    out = [int(model.forward(ids, pos, fb, capturer=None).next_token_logits[0].argmax())]
    for step in range(num_output_tokens - 1):
        p = L + step
        fb = ForwardBatch(ForwardMode.DECODE, 1, torch.tensor([out[-1]]), torch.tensor([1]), torch.tensor([p + 1]),
                          torch.tensor([256 + p]), torch.tensor([p]))
        out.append(int(model.forward(fb.input_ids, fb.positions, fb, capturer=None).next_token_logits[0].argmax()))
    return out

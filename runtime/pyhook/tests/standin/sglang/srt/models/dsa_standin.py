"""The stand-in's tiny deterministic DSA-like model (CPU torch).

Nothing here is SGLang's math; it is built so that the index-K cache decides
the output:
- index-K of a token = f(position, token id, layer): 128 small values turned
  into real fp8 e4m3 bytes with one fp32 scale per token (amax / 448), stored
  in the reference's 8448-byte page layout;
- the indexer of layer L scores every cached position of a row with a query
  q(position, token, L) against the dequantized K and keeps the top-k
  (TOPK = 8) positions; the layers marked in SKIP_TOPK_LAYERS have a 0-row
  index-K buffer and reuse the previous layer's selection;
- the next token is a fixed function of the position, the token and the token
  ids (read from the main KV) at the selected positions: a clean engine
  reproduces ``reference_script`` exactly; a wrong selection changes it.
Scores are exact in float64 (e4m3 x small ints, summed, times an fp32 scale),
so the selection does not depend on batch shape or summation order.

``workspace`` is the captured path's static memory (index-logit buffer and a
scratch); with ``alias_scratch`` the scratch is a view of the first 64 columns
of the index-logit buffer (the replay-alias fault), eager runs never use it.
"""

from __future__ import annotations

import torch

VOCAB = 4096
TOPK = 8
NUM_LAYERS = 4
SKIP_TOPK_LAYERS = [False, False, True, False]
# --model hybrid: a hybrid linear-attention model of 6 layers whose
# full-attention (DSA) layers are these model layers; 1 and 4 are linear
HYBRID_FULL_ATTENTION_LAYERS = [0, 2, 3, 5]
KV_LORA_RANK = 3
QK_ROPE_HEAD_DIM = 1
HEAD_DIM = 128


def _e4m3_values() -> torch.Tensor:
    vals = []
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 15 and m == 7:
            v = float("nan")
        elif e == 0:
            v = (m / 8.0) * 2.0 ** -6
        else:
            v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        vals.append(-v if s else v)
    return torch.tensor(vals, dtype=torch.float64)


E4M3 = _e4m3_values()
_POS = E4M3[:127]  # codes 0..126: 0 .. 448 ascending
_MID = (_POS[1:] + _POS[:-1]) / 2


def fp8_e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    """Nearest e4m3fn byte of each value (saturating at 448)."""
    a = x.abs().to(torch.float64)
    code = torch.bucketize(a, _MID).clamp(max=126)
    return (code | ((x < 0).long() << 7)).to(torch.uint8)


def fp8_e4m3_decode(b: torch.Tensor) -> torch.Tensor:
    return E4M3[b.long()]


_C1 = 0x2545F4914F6CDD1D
_C2 = 0x1B873593A5F1E2D3


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ (x >> 31)) * _C1
    x = (x ^ (x >> 29)) * _C2
    return x ^ (x >> 32)


def _features(positions: torch.Tensor, tokens: torch.Tensor, layer: int, salt: int) -> torch.Tensor:
    seed = _mix(positions.long() * 1000003 + tokens.long() * 7919 + layer * 104729 + salt)
    d = torch.arange(HEAD_DIM, dtype=torch.int64)
    return _mix(seed[:, None] * 257 + d[None, :] + 1)


def index_key(positions: torch.Tensor, tokens: torch.Tensor, layer: int):
    """(uint8 [n, 128] e4m3 bytes, float32 [n] scale) of tokens at positions."""
    h = _features(positions, tokens, layer, 11)
    k = (((h >> 20) & 0xFF) - 128).to(torch.float32) / 16.0
    amax = k.abs().amax(dim=1).clamp(min=1.0 / 16.0)
    scale = (amax / 448.0).to(torch.float32)
    return fp8_e4m3_encode(k / scale[:, None]), scale


def index_query(positions: torch.Tensor, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    h = _features(positions, tokens, layer, 23)
    return (((h >> 17) & 0xF) - 8).to(torch.float64)


class GraphWorkspace:
    """Static buffers of the captured decode path."""

    def __init__(self, max_bs: int, max_context_len: int, alias_scratch: bool = False):
        self.index_logits = torch.zeros((max_bs, max_context_len), dtype=torch.float64)
        if alias_scratch:
            self.scratch = self.index_logits[:, :64]
        else:
            self.scratch = torch.zeros((max_bs, 64), dtype=torch.float64)


_GLOBAL = object()


class StandinDSAForCausalLM:
    """forward(input_ids, positions, forward_batch) -> LogitsProcessorOutput."""

    def __init__(self, layer_ids=None):
        self.req_to_token_pool = None
        self.token_to_kv_pool = None
        self.num_layers = NUM_LAYERS
        self.skip_topk_layers = list(SKIP_TOPK_LAYERS)
        self.vocab_size = VOCAB
        # the model layer id of each attention layer: 0..3, or (hybrid
        # linear-attention models) the full-attention layers among more
        self.layer_ids = list(layer_ids) if layer_ids is not None else list(range(NUM_LAYERS))

    def bind_pools(self, req_to_token_pool, token_to_kv_pool):
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = token_to_kv_pool

    def store(self, input_ids: torch.Tensor, positions: torch.Tensor, loc: torch.Tensor) -> None:
        pool = self.token_to_kv_pool
        ids, pos = input_ids.long(), positions.long()
        for layer in range(self.num_layers):
            kv = torch.stack([ids.float(), pos.float(), torch.full_like(pos, layer).float(), torch.ones_like(pos).float()], dim=1)
            pool.set_kv_buffer(self.layer_ids[layer], loc, kv)
            if not self.skip_topk_layers[layer]:
                kb, sc = index_key(pos, ids, layer)
                pool.set_index_k_scale_buffer(self.layer_ids[layer], loc, kb, sc)

    def select(self, layer: int, slots: torch.Tensor, q: torch.Tensor, logits_row: torch.Tensor = None, scratch_row: torch.Tensor = None) -> torch.Tensor:
        """Top-k positions (int64, best first) over the row's cached tokens."""
        kb, sc = self.token_to_kv_pool.get_index_k_scale(self.layer_ids[layer], slots)
        scores = (fp8_e4m3_decode(kb) @ q) * sc.to(torch.float64)
        n = scores.shape[0]
        if logits_row is None:
            logits = scores
        else:
            logits_row[:n] = scores
            # the captured path prepares the next layer's query norm in its scratch
            if scratch_row is not None:
                scratch_row.fill_(float(q @ q) * 1e6)
            logits = logits_row[:n]
        order = torch.sort(logits, descending=True, stable=True).indices
        return order[: min(TOPK, n)]

    def forward(self, input_ids, positions, forward_batch, workspace: GraphWorkspace = None, capturer=_GLOBAL, **kwargs):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.state_capturer.indexer_topk import get_global_indexer_capturer

        if capturer is _GLOBAL:
            capturer = get_global_indexer_capturer()
        fb = forward_batch
        self.store(input_ids, positions, fb.out_cache_loc)
        if fb.forward_mode.is_decode():
            rows = [(i, int(positions[i]), int(input_ids[i])) for i in range(fb.batch_size)]
        else:  # extend: one request per batch in the stand-in; logits of its last token
            rows = [(0, int(positions[-1]), int(input_ids[-1]))]
        r2t = self.req_to_token_pool.req_to_token
        kv0 = self.token_to_kv_pool.get_key_buffer(self.layer_ids[0])
        bs = len(rows)
        out = torch.zeros((bs, VOCAB), dtype=torch.float32)
        topk = {layer: torch.full((bs, TOPK), -1, dtype=torch.int32) for layer in range(self.num_layers) if not self.skip_topk_layers[layer]}
        for i, pos, tok in rows:
            slots = r2t[int(fb.req_pool_indices[i]), : int(fb.seq_lens[i])].long()
            p_t, t_t = torch.tensor([pos]), torch.tensor([tok])
            acc = 7 * pos + 3 * tok
            sel = None
            for layer in range(self.num_layers):
                if not self.skip_topk_layers[layer]:
                    q = index_query(p_t, t_t, layer)[0]
                    if workspace is not None:
                        sel = self.select(layer, slots, q, workspace.index_logits[i], workspace.scratch[i])
                    else:
                        sel = self.select(layer, slots, q)
                    topk[layer][i, : sel.numel()] = sel.to(torch.int32)
                toks = kv0[slots[sel], 0].long()
                acc += (layer + 1) * int(toks.sum())
                out[i].index_add_(0, toks % VOCAB, torch.full((toks.numel(),), 0.01 * (layer + 1)))
            out[i, acc % VOCAB] += 10.0
        if capturer is not None:
            for layer, t in topk.items():
                capturer.capture(layer_id=self.layer_ids[layer], topk_indices=t)
        return LogitsProcessorOutput(next_token_logits=out)


def reference_script(prompt, num_output_tokens: int):
    """The tokens a clean engine must produce for ``prompt`` (first token from
    prefill, then decode steps), computed alone in a private contiguous pool."""
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, ReqToTokenPool
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    L = len(prompt)
    total = L + num_output_tokens
    pages = (total + 63) // 64
    r2t = ReqToTokenPool(1, total + 1)
    pool = DSATokenToKVPool(pages * 64, 64, KV_LORA_RANK, torch.float32, QK_ROPE_HEAD_DIM, NUM_LAYERS, "cpu",
                            skip_topk_layers=SKIP_TOPK_LAYERS)
    r2t.req_to_token[1, :total] = torch.arange(64, 64 + total, dtype=torch.int32)
    model = StandinDSAForCausalLM()
    model.bind_pools(r2t, pool)
    ids = torch.tensor(list(prompt), dtype=torch.int64)
    pos = torch.arange(L, dtype=torch.int64)
    fb = ForwardBatch(ForwardMode.EXTEND, 1, ids, torch.tensor([1]), torch.tensor([L]), pos + 64, pos)
    out = [int(model.forward(ids, pos, fb, capturer=None).next_token_logits[0].argmax())]
    for step in range(num_output_tokens - 1):
        p = L + step
        fb = ForwardBatch(ForwardMode.DECODE, 1, torch.tensor([out[-1]]), torch.tensor([1]), torch.tensor([p + 1]),
                          torch.tensor([64 + p]), torch.tensor([p]))
        out.append(int(model.forward(fb.input_ids, fb.positions, fb, capturer=None).next_token_logits[0].argmax()))
    return out

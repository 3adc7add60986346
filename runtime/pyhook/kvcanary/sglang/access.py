"""Reading SGLang's objects: pools, a request's slots, the rank.

Every name here is one the references list (sglang-hooks.md, "Inside the hooked
methods" and "Checked against SGLang's source"; sglang-dsv4.md §7 and "Quick
facts"), with the variants they name (req.kv.req_pool_idx / req.req_pool_idx;
index-K on a DSATokenToKVPool or its IndexKeyCache, in a
DeepSeekV4TokenToKVPool's C4 indexer pool, or in a HybridLinearKVPool's
full_kv_pool). Functions return None (or an IndexK with a reason) when a
thing is absent; callers skip that work (they never guess).
"""

from __future__ import annotations

import logging

import torch

PAGE = 64  # slots per index-K page row (tokens on DSA, C4 entries on V4)


def host_ints(values, device) -> torch.Tensor:
    """A host list of ints as an int64 tensor on `device`. On CUDA the copy is
    made from pinned memory with non_blocking=True: a plain copy from
    pageable memory would synchronize the step thread with the stream."""
    t = torch.tensor(list(values), dtype=torch.int64)
    dev = torch.device(device)
    if dev.type == "cuda":
        return t.pin_memory().to(dev, non_blocking=True)
    return t.to(dev)


def req_pool_idx(req):
    """The request's row in req_to_token: req.kv.req_pool_idx (new) or
    req.req_pool_idx (older versions); None when unassigned."""
    kv = getattr(req, "kv", None)
    if kv is not None:
        v = getattr(kv, "req_pool_idx", None)
        if v is not None:
            return int(v)
    v = getattr(req, "req_pool_idx", None)
    return None if v is None else int(v)


def prompt_len(req) -> int:
    """Tokens whose index-K PD transfers: len(req.origin_input_ids)."""
    return len(req.origin_input_ids)


def kv_pool_of_scheduler(sched):
    """The token-to-KV pool (DSATokenToKVPool) of a Scheduler."""
    alloc = getattr(sched, "token_to_kv_pool_allocator", None)
    if alloc is not None and hasattr(alloc, "get_kvcache"):
        try:
            return alloc.get_kvcache()
        except Exception:  # noqa: BLE001
            pass
    worker = getattr(sched, "tp_worker", None)
    mr = getattr(worker, "model_runner", None) if worker is not None else None
    return getattr(mr, "token_to_kv_pool", None)


# --- index-K: which pool, which layers, which layout --------------------------------

KINDS = ("dsa", "v4", "hybrid")
WIDTHS = {132: "fp8", 68: "fp4", 256: "bf16"}  # bytes per slot -> layout name


class IndexK:
    """What the binding found of a pool's index-K (reference sglang-hooks.md
    "Index-K storage", sglang-dsv4.md §7 and "Quick facts"):

    kind: "dsa" (DSATokenToKVPool), "v4" (DeepSeekV4TokenToKVPool's C4
        indexer, HiSparse included), "hybrid" (a DSA pool inside
        HybridLinearKVPool), "" when none was found;
    buffers: [(model layer id, uint8 (num_pages, page_bytes) view)], ids
        ascending, 0-row buffers left out; [] when unusable (then `reason`);
    layout: "fp8" | "fp4" | "bf16" (width from bytes, not elements), or None;
    ratio: tokens per index-K slot: 1 (DSA: a slot is a token) or 4 (V4: a
        slot is a C4 entry);
    page_slots: slots per page row (64), read from the pool where it says;
    has_move: the pool has IndexKeyCache.move (DSA), the writer the canary's
        between phase expects; V4 has no move;
    pool_class, reason: for messages and `check`;
    capture_ids: V4 only, {compress_layer_id: model layer id}: the V4 indexer
        calls capture(compress_layer_id, raw_indices).
    """

    __slots__ = ("kind", "buffers", "layout", "ratio", "page_slots", "has_move", "pool_class", "reason",
                 "capture_ids")

    def __init__(self, kind="", buffers=None, layout=None, ratio=1, page_slots=PAGE, has_move=False,
                 pool_class="", reason=""):
        self.capture_ids = None  # V4: {compress_layer_id: model layer id} (the top-k capturer's ids)
        self.kind = kind
        self.buffers = buffers or []
        self.layout = layout
        self.ratio = ratio
        self.page_slots = page_slots
        self.has_move = has_move
        self.pool_class = pool_class
        self.reason = reason

    @property
    def page_tokens(self) -> int:
        """Tokens per page-table entry: 64 (DSA), 256 (V4)."""
        return self.page_slots * self.ratio

    @property
    def layers(self) -> list:
        return [l for l, _ in self.buffers]

    def entries(self, tokens: int) -> int:
        """Index-K slots a request of `tokens` tokens holds: tokens (DSA),
        tokens // 4 (V4; the partial last group is not in index-K)."""
        return max(0, int(tokens)) // self.ratio

    def slots(self, req_to_token, idx: int, tokens: int):
        """The request's index-K slots in position order: req_to_token[idx, :n]
        (DSA), req_to_token[idx, 3:n:4] // 4 (V4: entry g at C4 slot
        req_to_token[idx, 4g+3] // 4)."""
        if self.ratio == 1:
            return req_to_token[idx, :tokens]
        n = self.entries(tokens) * self.ratio
        return torch.div(req_to_token[idx, self.ratio - 1:n:self.ratio].long(), self.ratio, rounding_mode="floor")

    def written_slots(self, out_cache_loc, seq_lens, positions=None):
        """Index-K slots a forward writes, one per out_cache_loc entry:
        out_cache_loc (DSA); on V4 out_cache_loc // 4 where the token
        completes a C4 group (position % 4 == 3; in a decode step that is
        seq_len % 4 == 0), else C4 slot 0 (the null slot every other row, and
        every padded row, writes). Positions are used when they line up with
        out_cache_loc (any forward mode), else decode's one token per row."""
        loc = out_cache_loc.reshape(-1).long()
        if self.ratio == 1:
            return loc
        if positions is not None and positions.numel() == loc.numel():
            done = positions.reshape(-1).to(loc.device).long() % self.ratio == self.ratio - 1
        else:
            seq = seq_lens.reshape(-1).to(loc.device).long()
            if seq.numel() != loc.numel():
                raise ValueError("%d out_cache_loc entries for %d rows and no positions: which tokens "
                                 "complete a C4 group is unknown" % (loc.numel(), seq.numel()))
            done = seq % self.ratio == 0
        c4 = torch.div(loc, self.ratio, rounding_mode="floor")
        return torch.where(done, c4, torch.zeros_like(c4))

    def describe(self) -> dict:
        return {"kind": self.kind, "pool_class": self.pool_class, "layout": self.layout,
                "layers": self.layers, "ratio": self.ratio, "page_slots": self.page_slots,
                "page_tokens": self.page_tokens, "has_move": self.has_move, "reason": self.reason}


def _rows(b):
    """A buffer as uint8 (num_pages, page_bytes) rows over the same memory
    (2-D uint8, 2-D bf16 (pages, 8192), 3-D bf16 (pages, 64, 128) all work);
    None when that view would be a copy (non-contiguous)."""
    if b is None or not hasattr(b, "dim") or b.dim() < 2:
        return None
    if not b.is_contiguous():
        return None
    u = b if b.dtype == torch.uint8 else b.view(torch.uint8)
    return u.reshape(b.shape[0], -1)


def _page_slots(*holders) -> int:
    """Slots per index-K page row from the pool (D5): index_kernel_page_size
    or index_page_size where present, else 64."""
    for h in holders:
        for name in ("index_kernel_page_size", "index_page_size"):
            v = getattr(h, name, None)
            if isinstance(v, int) and v > 0:
                return v
    return PAGE


def _finish(ik: IndexK, pairs) -> IndexK:
    """Views, 0-row buffers out, ids ascending, the layout from the width."""
    out = []
    for lid, b in pairs:
        if b is None or not hasattr(b, "shape") or b.dim() < 2 or b.shape[0] == 0:
            continue
        v = _rows(b)
        if v is None:
            ik.reason = "layer %d index-K buffer is not contiguous (a uint8 view would be a copy)" % lid
            ik.buffers = []
            return ik
        out.append((int(lid), v))
    out.sort(key=lambda t: t[0])
    if not out:
        ik.reason = ik.reason or "the pool's index-K buffers are all empty"
        return ik
    width = int(out[0][1].shape[1])
    if any(int(b.shape[1]) != width for _, b in out):
        ik.reason = "index-K buffers of different widths"
        return ik
    per_slot, rem = divmod(width, ik.page_slots)
    name = WIDTHS.get(per_slot) if rem == 0 else None
    if ik.page_slots != PAGE:
        ik.reason = "index-K pages of %d slots (kvcanary digests 64-slot pages)" % ik.page_slots
        return ik
    if name is None:
        ik.reason = ("index-K page of %d bytes is no known layout (8448 fp8, 4352 fp4, 16384 bf16)" % width)
        return ik
    ik.layout = name
    ik.buffers = out
    return ik


def _dsa(pool, kind="dsa", layer_ids=None) -> IndexK | None:
    """A DSATokenToKVPool's per-layer buffers: pool.index_k_with_scale_buffer,
    else pool.index_key_cache.buffer (IndexKeyCache keeps its list there, D5)."""
    bufs = getattr(pool, "index_k_with_scale_buffer", None)
    ikc = getattr(pool, "index_key_cache", None)
    if bufs is None and ikc is not None:
        bufs = getattr(ikc, "buffer", None)
        if bufs is None:
            bufs = getattr(ikc, "index_k_with_scale_buffer", None)
    if bufs is None:
        return None
    start = int(getattr(pool, "start_layer", 0) or 0)
    ik = IndexK(kind, ratio=1, page_slots=_page_slots(pool, ikc), pool_class=type(pool).__name__,
                has_move=ikc is not None and hasattr(ikc, "move"))
    pairs = []
    for i, b in enumerate(bufs):
        lid = start + i
        if layer_ids is not None:
            lid = layer_ids.get(lid)
            if lid is None:
                continue
        pairs.append((lid, b))
    return _finish(ik, pairs)


def _v4(pool) -> IndexK | None:
    """DeepSeekV4TokenToKVPool: index_pools[4] (alias c4_indexer_kv_pool), one
    buffer per C4 layer listed by compress_layer_id; layer_mapping[L] says
    which model layer L uses which (compress_ratio 4). HiSparse swaps only the
    C4 attention pool; the indexer pool is the same."""
    ip = None
    pools = getattr(pool, "index_pools", None)
    if isinstance(pools, dict):
        ip = pools.get(4)
    if ip is None:
        ip = getattr(pool, "c4_indexer_kv_pool", None)
    if ip is None:
        return None
    ik = IndexK("v4", ratio=4, page_slots=_page_slots(ip), pool_class=type(pool).__name__, has_move=False)
    ps = getattr(ip, "page_size", None)
    if isinstance(ps, int) and ps > 0 and not hasattr(ip, "index_kernel_page_size"):
        ik.page_slots = ps  # the indexer pool's page_size is in C4 slots (256 // 4)
    bufs = getattr(ip, "index_k_with_scale_buffer", None)
    if bufs is None:
        bufs = getattr(ip, "index_k_bf16_buffer", None)  # a fork's bf16 index-K
    if bufs is None:
        if getattr(ip, "index_k_payload_buffer", None) is not None:
            ik.reason = "fp4 index-K in two tensors per layer (HIP/AITER layout) is not supported"
        else:
            ik.reason = "the C4 indexer pool has no index_k_with_scale_buffer"
        return ik
    mapping = getattr(pool, "layer_mapping", None)
    if mapping is None:
        ik.reason = "the V4 pool has no layer_mapping (model layer ids unknown)"
        return ik
    items = mapping.items() if isinstance(mapping, dict) else enumerate(mapping)
    pairs = []
    for L, item in items:
        if item is None or getattr(item, "compress_ratio", None) != 4:
            continue
        c = getattr(item, "compress_layer_id", None)
        if not isinstance(c, int) or not 0 <= c < len(bufs):
            ik.reason = "layer_mapping[%s].compress_layer_id %r is outside the %d C4 buffers" % (L, c, len(bufs))
            return ik
        pairs.append((int(L), bufs[c]))
    ik.capture_ids = {int(mapping[L].compress_layer_id): L for L, _ in pairs}
    return _finish(ik, pairs)


def _hybrid(pool) -> IndexK | None:
    """HybridLinearKVPool over a DSA pool (D4): pool.full_kv_pool holds the
    full-attention layers under dense ids; full_attention_layer_id_mapping maps
    model layer id -> dense id (reported: model ids)."""
    inner = getattr(pool, "full_kv_pool", None)
    if inner is None:
        return None
    mapping = getattr(pool, "full_attention_layer_id_mapping", None)
    if not isinstance(mapping, dict):
        ik = IndexK("hybrid", pool_class=type(pool).__name__,
                    reason="HybridLinearKVPool without full_attention_layer_id_mapping (model layer ids unknown)")
        return ik if _dsa(inner) is not None else None
    dense_to_model = {int(d): int(m) for m, d in mapping.items()}
    ik = _dsa(inner, "hybrid", dense_to_model)
    if ik is not None:
        ik.pool_class = "%s(%s)" % (type(pool).__name__, type(inner).__name__)
    return ik


_found: dict = {}


def find_index_k(pool) -> IndexK:
    """The pool's index-K (IndexK; kind "" and a reason when none). Cached
    per pool object: the buffers are allocated once at start-up."""
    if pool is None:
        return IndexK(reason="no KV pool")
    key = id(pool)
    hit = _found.get(key)
    if hit is not None and hit[0] is pool:
        return hit[1]
    ik = None
    for f in (_v4, _hybrid, _dsa):
        ik = f(pool)
        if ik is not None:
            break
    if ik is None:
        ik = IndexK(pool_class=type(pool).__name__,
                    reason="%s has no index-K (no index_k_with_scale_buffer, index_key_cache, "
                           "index_pools[4] or full_kv_pool)" % type(pool).__name__)
    if len(_found) > 64:
        _found.clear()
    _found[key] = (pool, ik)
    return ik


def index_buffers(pool):
    """[(model layer id, uint8 (num_pages, page_bytes) view)] ascending, 0-row
    buffers (skip_topk_layers) left out; None when the pool has no usable
    index-K (find_index_k says why)."""
    ik = find_index_k(pool)
    return ik.buffers or None


def layout_name(buffers) -> str | None:
    """"fp8" (8448 B pages), "fp4" (4352) or "bf16" (16384) from the
    buffers' width in bytes (64 slots per page)."""
    if not buffers:
        return None
    b = buffers[0][1]
    w = int(b[0].numel() * b.element_size()) if b.shape[0] else 0
    return {8448: "fp8", 4352: "fp4", 16384: "bf16"}.get(w)


def kv_buffers(pool):
    """Main KV buffers indexed by slot (first dimension): MLA `kv_buffer`, MHA
    `k_buffer` + `v_buffer`; [] when none is found."""
    out = []
    for name in ("kv_buffer", "k_buffer", "v_buffer"):
        bufs = getattr(pool, name, None)
        if isinstance(bufs, (list, tuple)):
            out.extend(b for b in bufs if hasattr(b, "shape") and b.dim() >= 1 and b.shape[0] > 0)
    return out


def role_of(obj) -> str:
    """PD role of the process owning obj: its (or its scheduler's)
    disaggregation_mode (DisaggregationMode.PREFILL/DECODE, .value
    "prefill"/"decode"), else server_args.disaggregation_mode; "" otherwise
    ("null" and unknown values included)."""
    for o in (obj, getattr(obj, "scheduler", None)):
        if o is None:
            continue
        m = getattr(o, "disaggregation_mode", None)
        if m is None:
            m = getattr(getattr(o, "server_args", None), "disaggregation_mode", None)
        v = getattr(m, "value", m)
        if isinstance(v, str) and v.lower() in ("prefill", "decode"):
            return v.lower()
    return ""


def rank_of(obj) -> int:
    """Attention-TP rank: obj.ps.tp_rank, obj.tp_rank, obj.scheduler.ps.tp_rank,
    sglang.srt.runtime_context.get_parallel().tp_rank; 0 when none exists."""
    for o in (obj, getattr(obj, "scheduler", None), getattr(obj, "model_runner", None)):
        if o is None:
            continue
        ps = getattr(o, "ps", None)
        r = getattr(ps, "tp_rank", None) if ps is not None else None
        if r is None:
            r = getattr(o, "tp_rank", None)
        if isinstance(r, int):
            return r
    try:
        from sglang.srt.runtime_context import get_parallel  # type: ignore

        return int(get_parallel().tp_rank)
    except Exception as e:  # noqa: BLE001
        # The wire has no "unknown" rank (0 is a single-rank producer's): say
        # so once, so records of several ranks that all read 0 are explained.
        global _rank_warned
        if not _rank_warned:
            _rank_warned = True
            logging.getLogger("kvcanary").warning(
                "kvcanary: the TP rank is unknown here (no ps.tp_rank, tp_rank or runtime_context: %s); "
                "room checksums say rank 0, so compare may report several ranks' records as duplicates", e)
        return 0


_rank_warned = False

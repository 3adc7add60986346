"""Reading SGLang's objects: pools, a request's slots, the rank.

Every name here is one the reference lists (sglang-hooks.md, "Inside the hooked
methods"), with the variants it names (req.kv.req_pool_idx / req.req_pool_idx;
index-K buffers on the pool or on pool.index_key_cache). Functions return None
when a thing is absent; callers skip that work (they never guess).
"""

from __future__ import annotations

import logging

import torch

PAGE = 64  # tokens per index-K page (fixed at 64 on CUDA)


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


def index_buffers(pool):
    """[(layer_id, uint8 (num_pages, page_bytes) tensor)] ascending, 0-row
    buffers (skip_topk_layers) left out; None when the pool has no index-K.

    Layer ids are start_layer + local index (pipeline parallelism gives a rank
    a slice of the layers)."""
    if pool is None:
        return None
    bufs = getattr(pool, "index_k_with_scale_buffer", None)
    if bufs is None:
        ikc = getattr(pool, "index_key_cache", None)
        bufs = getattr(ikc, "index_k_with_scale_buffer", None) if ikc is not None else None
    if bufs is None:
        return None
    start = int(getattr(pool, "start_layer", 0) or 0)
    out = []
    for i, b in enumerate(bufs):
        if b is None or b.dim() != 2 or b.shape[0] == 0:
            continue
        out.append((start + i, b))
    return out


def layout_name(buffers) -> str | None:
    """"fp8" (8448 B pages) or "bf16" (16384 B pages) from the buffers' width."""
    if not buffers:
        return None
    w = buffers[0][1].shape[1]
    return {8448: "fp8", 16384: "bf16"}.get(int(w))


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

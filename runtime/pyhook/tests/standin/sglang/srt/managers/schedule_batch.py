"""Req and ScheduleBatch (stand-in of ``sglang.srt.managers.schedule_batch``).

``Req`` has ``rid``, ``bootstrap_room``, ``origin_input_ids`` / ``output_ids``
(``array('q')``), ``extend_range`` and ``get_fill_ids()``. The request's pool
index exists in two variants, chosen per process with
``set_req_kv_variant()`` (the engine's ``--req-kv-variant``):
- "base" (BASE): ``req.req_pool_idx``, ``req.kv_committed_len``;
- "new"  (NEW):  ``req.kv.req_pool_idx``, ``req.kv.kv_committed_len``,
  ``req.kv.holds_kv``, and no ``req.req_pool_idx`` attribute.
"""

from __future__ import annotations

from array import array
from typing import List, NamedTuple, Optional

from sglang.srt.sampling.sampling_params import SamplingParams

_REQ_KV_VARIANT = "base"


def set_req_kv_variant(variant: str) -> None:
    global _REQ_KV_VARIANT
    if variant not in ("base", "new"):
        raise ValueError("req kv variant %r: want 'base' or 'new'" % (variant,))
    _REQ_KV_VARIANT = variant


def get_req_kv_variant() -> str:
    return _REQ_KV_VARIANT


class ExtendRange(NamedTuple):
    start: int
    end: int


class ReqKVState:
    def __init__(self):
        self.req_pool_idx: Optional[int] = None
        self.kv_committed_len: int = 0
        self.holds_kv: bool = False


class Req:
    def __init__(self, rid: str, origin_input_text: str = "", origin_input_ids=(), sampling_params: SamplingParams = None,
                 bootstrap_host: Optional[str] = None, bootstrap_port: Optional[int] = None,
                 bootstrap_room: Optional[int] = None, kv_variant: Optional[str] = None, **kwargs):
        self.rid = rid
        self.origin_input_text = origin_input_text
        self.origin_input_ids = array("q", origin_input_ids)
        self.output_ids = array("q")
        self.sampling_params = sampling_params or SamplingParams()
        self.bootstrap_host = bootstrap_host
        self.bootstrap_port = bootstrap_port
        self.bootstrap_room = bootstrap_room
        self.extend_range = ExtendRange(0, len(self.origin_input_ids))
        self.finished_reason = None
        self.start_send_idx = 0
        self.disagg_kv_sender = None
        self.metadata_buffer_index = -1
        variant = kv_variant or _REQ_KV_VARIANT
        if variant == "base":
            self.req_pool_idx: Optional[int] = None
            self.kv_committed_len = 0
        elif variant == "new":
            self.kv = ReqKVState()
        else:
            raise ValueError("req kv variant %r: want 'base' or 'new'" % (variant,))
        # stand-in bookkeeping
        self.standin_alloc_len = 0
        self.standin_spec = False

    def get_fill_ids(self):
        return self.origin_input_ids + self.output_ids

    @property
    def seqlen(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    def finished(self) -> bool:
        return self.finished_reason is not None

    def __repr__(self):
        return "Req(rid=%s, bootstrap_room=%s, input_len=%d, output_len=%d)" % (
            self.rid, self.bootstrap_room, len(self.origin_input_ids), len(self.output_ids))


def req_pool_index(req: Req) -> Optional[int]:
    """Either variant's pool index (stand-in helper)."""
    kv = getattr(req, "kv", None)
    if kv is not None:
        return kv.req_pool_idx
    return req.req_pool_idx


def set_req_pool_index(req: Req, idx: Optional[int], committed: int = 0) -> None:
    kv = getattr(req, "kv", None)
    if kv is not None:
        kv.req_pool_idx = idx
        kv.kv_committed_len = committed
        kv.holds_kv = idx is not None
    else:
        req.req_pool_idx = idx
        req.kv_committed_len = committed


class ScheduleBatch:
    def __init__(self, reqs: List[Req], req_to_token_pool=None, token_to_kv_pool_allocator=None, tree_cache=None):
        self.reqs = list(reqs)
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.tree_cache = tree_cache

    @classmethod
    def init_new(cls, reqs, req_to_token_pool, token_to_kv_pool_allocator, tree_cache=None, model_config=None,
                 enable_overlap: bool = False, spec_algorithm=None, **kwargs):
        return cls(reqs, req_to_token_pool, token_to_kv_pool_allocator, tree_cache)

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    def merge_batch(self, other: "ScheduleBatch") -> None:
        self.reqs.extend(other.reqs)

    def filter_batch(self, keep_indices: Optional[List[int]] = None) -> None:
        if keep_indices is None:
            keep_indices = [i for i, r in enumerate(self.reqs) if not r.finished()]
        self.reqs = [self.reqs[i] for i in keep_indices]

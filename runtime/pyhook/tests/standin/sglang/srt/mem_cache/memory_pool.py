"""Memory pools (stand-in of ``sglang.srt.mem_cache.memory_pool``).

- ``ReqToTokenPool``: ``req_to_token`` int32 ``[size + 1, max_context_len]``;
  row 0 is the padding row (graph batches pad with ``req_pool_idx`` 0).
- ``MLATokenToKVPool``: the main KV, one ``[size + page_size, kv_dim]`` float32
  buffer per layer (token-indexed; slot 0 / page 0 is the padding sink). The
  stand-in's "KV" of a token is ``(token id, position, layer, 1)``.
- ``DSATokenToKVPool(MLATokenToKVPool)`` (alias ``NSATokenToKVPool``): adds the
  index-K cache, delegated to ``IndexKeyCache`` (``pool.index_key_cache``);
  ``pool.index_k_with_scale_buffer`` is its list of per-layer uint8 buffers.
"""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.mem_cache.index_key_cache import IndexKeyCache


class ReqToTokenPool:
    def __init__(self, size: int, max_context_len: int, device: str = "cpu", enable_memory_saver: bool = False):
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self.req_to_token = torch.zeros((size + 1, max_context_len), dtype=torch.int32, device=device)
        self.free_slots = list(range(1, size + 1))

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, need_size: int = 1) -> Optional[List[int]]:
        if need_size > len(self.free_slots):
            return None
        out, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
        return out

    def free(self, free_index) -> None:
        if isinstance(free_index, int):
            free_index = [free_index]
        for i in free_index:  # the row keeps its stale slots, as in SGLang
            self.free_slots.append(int(i))

    def write(self, indices, values) -> None:
        self.req_to_token[indices] = values


class KVCache:
    def __init__(self, size: int, page_size: int, dtype, layer_num: int, device: str,
                 enable_memory_saver: bool = False, start_layer: Optional[int] = None, end_layer: Optional[int] = None):
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.layer_num = layer_num
        self.device = device
        self.start_layer = start_layer or 0
        self.end_layer = end_layer or layer_num - 1


class MLATokenToKVPool(KVCache):
    def __init__(self, size: int, page_size: int, dtype, kv_lora_rank: int, qk_rope_head_dim: int,
                 layer_num: int, device: str, enable_memory_saver: bool = False,
                 start_layer: Optional[int] = None, end_layer: Optional[int] = None):
        super().__init__(size, page_size, dtype, layer_num, device, enable_memory_saver, start_layer, end_layer)
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim
        self.kv_cache_dim = kv_lora_rank + qk_rope_head_dim
        self.kv_buffer = [
            torch.zeros((size + page_size, self.kv_cache_dim), dtype=dtype, device=device)
            for _ in range(layer_num)
        ]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.kv_buffer[layer_id - self.start_layer]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor) -> None:
        self.kv_buffer[layer_id - self.start_layer][loc.long()] = cache_k.to(self.dtype)

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        if tgt_loc.numel() == 0:
            return
        t, s = tgt_loc.view(-1).long(), src_loc.view(-1).long()
        for buf in self.kv_buffer:
            buf[t] = buf[s]


class DSATokenToKVPool(MLATokenToKVPool):
    quant_block_size = 128
    index_k_with_scale_buffer_dtype = torch.uint8

    def __init__(self, size: int, page_size: int, kv_lora_rank: int, dtype, qk_rope_head_dim: int,
                 layer_num: int, device: str, index_head_dim: int = 128, enable_memory_saver: bool = False,
                 kv_cache_dim: Optional[int] = None, start_layer: Optional[int] = None,
                 end_layer: Optional[int] = None, skip_topk_layers: Optional[List[bool]] = None,
                 index_move_bug: bool = False):
        super().__init__(size, page_size, dtype, kv_lora_rank, qk_rope_head_dim, layer_num, device,
                         enable_memory_saver, start_layer, end_layer)
        assert index_head_dim == 128, "the stand-in stores fp8 index-K with head dim 128"
        self.index_head_dim = index_head_dim
        self.skip_topk_layers = list(skip_topk_layers) if skip_topk_layers else [False] * layer_num
        self.index_key_cache = IndexKeyCache(self, size, page_indexed_move_bug=index_move_bug)

    @property
    def index_k_with_scale_buffer(self) -> List[torch.Tensor]:
        return self.index_key_cache.buffer

    def get_index_k_with_scale_buffer(self, layer_id: int) -> torch.Tensor:
        return self.index_key_cache.get_buffer(layer_id)

    def set_index_k_scale_buffer(self, layer_id: int, loc: torch.Tensor, index_k: torch.Tensor, index_k_scale: torch.Tensor) -> None:
        self.index_key_cache.store_quantized(layer_id, loc, index_k, index_k_scale)

    def get_index_k_scale(self, layer_id: int, loc: torch.Tensor):
        return self.index_key_cache.get_k_and_scale_bytes(layer_id, loc)

    def move_kv_cache(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        super().move_kv_cache(tgt_loc, src_loc)
        self.index_key_cache.move(tgt_loc, src_loc)

    def standin_index_rows(self):
        """Stand-in only: [(layer id, uint8 page rows)] the transfer moves (0-row buffers included)."""
        return [(self.start_layer + i, b) for i, b in enumerate(self.index_k_with_scale_buffer)]

    @property
    def standin_kv_buffers(self):
        return self.kv_buffer


NSATokenToKVPool = DSATokenToKVPool  # the old name stays as an alias


class HybridLinearKVPool:
    """Hybrid linear-attention models (stand-in of SGLang's
    ``HybridLinearKVPool`` with ``use_dsa``): the full-attention layers live
    in ``full_kv_pool`` (a ``DSATokenToKVPool`` under dense ids 0..n-1);
    ``full_attention_layer_id_mapping`` maps model layer id -> dense id. The
    wrapper itself has no ``index_k_with_scale_buffer``, ``index_key_cache``
    or ``kv_buffer``; its accessors translate model layer ids."""

    def __init__(self, full_attention_layer_ids, full_kv_pool: DSATokenToKVPool):
        self.full_kv_pool = full_kv_pool
        self.full_attention_layer_id_mapping = {int(m): d for d, m in enumerate(full_attention_layer_ids)}
        self.page_size = full_kv_pool.page_size
        self.size = full_kv_pool.size
        self.device = full_kv_pool.device

    def _dense(self, layer_id: int) -> int:
        return self.full_attention_layer_id_mapping[layer_id]

    def get_index_k_with_scale_buffer(self, layer_id: int) -> torch.Tensor:
        return self.full_kv_pool.get_index_k_with_scale_buffer(self._dense(layer_id))

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.full_kv_pool.get_key_buffer(self._dense(layer_id))

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor) -> None:
        self.full_kv_pool.set_kv_buffer(self._dense(layer_id), loc, cache_k)

    def set_index_k_scale_buffer(self, layer_id: int, loc, index_k, index_k_scale) -> None:
        self.full_kv_pool.set_index_k_scale_buffer(self._dense(layer_id), loc, index_k, index_k_scale)

    def get_index_k_scale(self, layer_id: int, loc):
        return self.full_kv_pool.get_index_k_scale(self._dense(layer_id), loc)

    # stand-in only: what the transfer backend moves --------------------------------
    def standin_index_rows(self):
        """[(model layer id, uint8 page rows)] of the full-attention layers."""
        model = {d: m for m, d in self.full_attention_layer_id_mapping.items()}
        return [(model[d], b) for d, b in self.full_kv_pool.standin_index_rows()]

    @property
    def standin_kv_buffers(self):
        return self.full_kv_pool.kv_buffer

"""DeepSeek-V4 pool (stand-in of ``sglang.srt.mem_cache.deepseek_v4_memory_pool``).

As the reference (sglang-dsv4.md §1, "Quick facts") describes, at toy sizes:
- ``DeepSeekV4TokenToKVPool``: 256-token pages (``page_size``); no
  ``index_k_with_scale_buffer``, no ``index_key_cache``, no ``move_kv_cache``.
  ``index_pools = {4: DeepSeekV4IndexerPool}`` (alias ``c4_indexer_kv_pool``),
  ``layer_mapping[L] = DeepSeekV4LayerItem(compress_ratio, compress_layer_id,
  compress_kv_pool)``, ``c4_kv_pool`` (``HiSparseC4DevicePool`` with HiSparse:
  it remaps only the C4 attention pool; the indexer pool stays logically
  addressed), ``get_index_k_with_scale_buffer(model layer id)``.
- ``DeepSeekV4IndexerPool``: ``page_size`` 64 (C4 slots per page row); one
  buffer per C4 layer, listed by compress_layer_id: fp8 uint8 ``(pages, 8448)``
  (64 x 128 B K then 64 x 4 B fp32 scales), fp4 uint8 ``(pages, 4352)`` (64 x
  64 B packed e2m1 then 64 x 4 B ue8m0), or a fork's bf16
  ``index_k_bf16_buffer[l]`` ``(pages, 64, 128)`` bfloat16 (then
  ``index_k_with_scale_buffer`` is None and ``get_index_k_with_scale_buffer``
  returns the bf16 buffer). Row p holds the 64 C4 slots of KV page p.
- The stand-in's main KV is one token-indexed float buffer per layer
  (``kv_buffer``; the real pool splits it into SWA/C4/C128 pools), holding
  (token id, position, layer, 1) so the model can read token ids.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional

import torch

C4_SLOTS = 64  # C4 slots per indexer page row (256 // 4)
HEAD_DIM = 128
LAYOUT_SLOT_BYTES = {"fp8": 132, "fp4": 68, "bf16": 256}
K_BYTES = {"fp8": 128, "fp4": 64, "bf16": 256}


class DeepSeekV4LayerItem(NamedTuple):
    compress_ratio: int
    compress_layer_id: int
    compress_kv_pool: object


class C4DevicePool:
    """The C4 attention pool (not modelled: the stand-in has no C4 attention)."""


class HiSparseC4DevicePool(C4DevicePool):
    """The C4 attention pool under HiSparse."""


class DeepSeekV4IndexerPool:
    quant_block_size = 128
    index_k_with_scale_buffer_dtype = torch.uint8

    def __init__(self, size: int, page_size: int, layer_num: int, layout: str, device: str = "cpu"):
        assert page_size == C4_SLOTS
        self.size = size
        self.page_size = page_size
        self.layer_num = layer_num
        self.layout = layout
        self.start_layer = 0
        num_pages = (size + page_size + 1) // page_size
        self.num_pages = num_pages
        if layout == "bf16":
            self.index_k_with_scale_buffer = None
            self.index_k_bf16_buffer = [torch.zeros((num_pages, page_size, HEAD_DIM), dtype=torch.bfloat16, device=device)
                                        for _ in range(layer_num)]
        else:
            self.index_k_with_scale_buffer = [
                torch.zeros((num_pages, page_size * LAYOUT_SLOT_BYTES[layout]), dtype=torch.uint8, device=device)
                for _ in range(layer_num)]

    def _buffers(self) -> List[torch.Tensor]:
        return self.index_k_bf16_buffer if self.layout == "bf16" else self.index_k_with_scale_buffer

    def get_index_k_with_scale_buffer(self, compress_layer_id: int) -> torch.Tensor:
        return self._buffers()[compress_layer_id]

    def contiguous_page_row_buffers(self) -> List[torch.Tensor]:
        """Each layer's buffer as uint8 page rows (what PD registers)."""
        return [b.view(torch.uint8).reshape(b.shape[0], -1) for b in self._buffers()]

    # byte addressing of C4 slots in a page row ------------------------------------
    def _index(self, c4_slots: torch.Tensor):
        s = c4_slots.view(-1).long()
        page, off = s // self.page_size, s % self.page_size
        kb = K_BYTES[self.layout]
        sb = LAYOUT_SLOT_BYTES[self.layout] - kb
        base = page * self.page_size * LAYOUT_SLOT_BYTES[self.layout]
        k = (base + off * kb)[:, None] + torch.arange(kb)[None, :]
        sc = (base + self.page_size * kb + off * sb)[:, None] + torch.arange(sb)[None, :] if sb else None
        return k, sc

    def store(self, compress_layer_id: int, c4_slots: torch.Tensor, k_bytes: torch.Tensor, scale_bytes) -> None:
        """k_bytes uint8 [n, K]; scale_bytes uint8 [n, 4] or None (bf16)."""
        flat = self.contiguous_page_row_buffers()[compress_layer_id].view(-1)
        k, sc = self._index(c4_slots)
        flat[k] = k_bytes
        if sc is not None:
            flat[sc] = scale_bytes

    def read(self, compress_layer_id: int, c4_slots: torch.Tensor):
        flat = self.contiguous_page_row_buffers()[compress_layer_id].view(-1)
        k, sc = self._index(c4_slots)
        return flat[k], (flat[sc] if sc is not None else None)


class DeepSeekV4TokenToKVPool:
    def __init__(self, size: int, page_size: int, compress_ratios: List[int], layout: str, device: str = "cpu",
                 kv_dim: int = 4, hisparse: bool = False):
        assert page_size == 256, "the system hardcodes page_size=256"
        self.size = size
        self.page_size = page_size
        self.device = device
        self.dtype = torch.float32
        self.layer_num = len(compress_ratios)
        self.start_layer = 0
        self.kv_buffer = [torch.zeros((size + page_size, kv_dim), dtype=torch.float32, device=device)
                          for _ in range(self.layer_num)]
        c4_layers = [L for L, r in enumerate(compress_ratios) if r == 4]
        self.c4_kv_pool = HiSparseC4DevicePool() if hisparse else C4DevicePool()
        self.c128_kv_pool = object()
        self.kv_pools = {4: self.c4_kv_pool, 128: self.c128_kv_pool}
        self.index_pools = {4: DeepSeekV4IndexerPool(size // 4, page_size // 4, len(c4_layers), layout, device)}
        self.c4_indexer_kv_pool = self.index_pools[4]
        self.layer_mapping: List[Optional[DeepSeekV4LayerItem]] = []
        counts = {}
        for r in compress_ratios:
            cid = counts.get(r, 0)
            counts[r] = cid + 1
            self.layer_mapping.append(DeepSeekV4LayerItem(r, cid, self.kv_pools.get(r)))

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.kv_buffer[layer_id]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor) -> None:
        self.kv_buffer[layer_id][loc.long()] = cache_k.to(self.dtype)

    def get_index_k_page_size(self, ratio: int = 4) -> int:
        return self.index_pools[ratio].page_size

    def get_index_k_with_scale_buffer(self, layer_id: int) -> torch.Tensor:
        ratio, cid, _ = self.layer_mapping[layer_id]
        if ratio != 4:
            raise ValueError("layer %d has compress_ratio %d: no C4 indexer" % (layer_id, ratio))
        return self.index_pools[4].get_index_k_with_scale_buffer(cid)

    def get_contiguous_buf_infos(self):
        """PD registration order: (C4 KV), C4 indexer, (C128 KV); here the main
        KV rows then the indexer's page rows."""
        bufs = self.index_pools[4].contiguous_page_row_buffers()
        return [b.data_ptr() for b in bufs], [b.nbytes for b in bufs], [b[0].nbytes for b in bufs]

    # stand-in only: what the transfer backend moves ---------------------------------
    @property
    def standin_kv_buffers(self):
        return self.kv_buffer

    def standin_index_rows(self):
        """[(model layer id, uint8 page rows)] of the C4 layers (page row = KV page id)."""
        rows = self.index_pools[4].contiguous_page_row_buffers()
        return [(L, rows[it.compress_layer_id]) for L, it in enumerate(self.layer_mapping) if it.compress_ratio == 4]

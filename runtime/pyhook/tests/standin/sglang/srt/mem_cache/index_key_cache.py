"""Index-K storage of the DSA pool (stand-in of
``sglang.srt.mem_cache.index_key_cache``).

``buffer`` is a list with one uint8 tensor per local layer, shape
``(num_pages, page_size * 132)``: per page, ``page_size`` x 128 B of fp8 e4m3 K
(token-major), then ``page_size`` x 4 B fp32 scales. Layers in
``pool.skip_topk_layers`` get a 0-row placeholder. Token slot ``s`` lives in
page ``s // page_size`` at offset ``s % page_size``.

``move(tgt_loc, src_loc)`` copies token slots. With ``page_indexed_move_bug``
it does what the reference's 2026-08 source does: ``index_k[tgt] = index_k[src]``
with token ids used as page-row indices (correct only for page size 1).
"""

from __future__ import annotations

import torch

INDEX_HEAD_DIM = 128
SCALE_BYTES = 4


class IndexKeyCache:
    def __init__(self, pool, index_buf_size: int, page_indexed_move_bug: bool = False):
        self.pool = pool
        self.page_indexed_move_bug = page_indexed_move_bug
        num_pages = (index_buf_size + pool.page_size + 1) // pool.page_size
        self.num_pages = num_pages
        self.buffer = [
            torch.zeros(self._buffer_shape(0 if pool.skip_topk_layers[i] else num_pages),
                        dtype=pool.index_k_with_scale_buffer_dtype, device=pool.device)
            for i in range(pool.layer_num)
        ]

    def _buffer_shape(self, num_pages: int):
        p = self.pool
        return (num_pages, p.page_size * (p.index_head_dim + p.index_head_dim // p.quant_block_size * SCALE_BYTES))

    # byte addressing -------------------------------------------------------
    def k_byte_index(self, loc: torch.Tensor) -> torch.Tensor:
        """Flat byte indices [n, 128] of the K bytes of token slots ``loc``."""
        ps = self.pool.page_size
        row = self.buffer_row_bytes()
        loc = loc.view(-1).long()
        base = (loc // ps) * row + (loc % ps) * INDEX_HEAD_DIM
        return base[:, None] + torch.arange(INDEX_HEAD_DIM, device=loc.device)[None, :]

    def scale_byte_index(self, loc: torch.Tensor) -> torch.Tensor:
        """Flat byte indices [n, 4] of the fp32 scale of token slots ``loc``."""
        ps = self.pool.page_size
        row = self.buffer_row_bytes()
        loc = loc.view(-1).long()
        base = (loc // ps) * row + ps * INDEX_HEAD_DIM + (loc % ps) * SCALE_BYTES
        return base[:, None] + torch.arange(SCALE_BYTES, device=loc.device)[None, :]

    def buffer_row_bytes(self) -> int:
        return self.pool.page_size * (INDEX_HEAD_DIM + SCALE_BYTES)

    # operations ------------------------------------------------------------
    def move(self, tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
        if tgt_loc.numel() == 0:
            return
        tgt = tgt_loc.view(-1).long()
        src = src_loc.view(-1).long()
        for index_k in self.buffer:
            if index_k.shape[0] == 0:
                continue
            if self.page_indexed_move_bug:
                index_k[tgt] = index_k[src]
                continue
            flat = index_k.view(-1)
            flat[self.k_byte_index(tgt)] = flat[self.k_byte_index(src)]
            flat[self.scale_byte_index(tgt)] = flat[self.scale_byte_index(src)]

    def get_local_buffer(self, layer_id: int) -> torch.Tensor:
        return self.buffer[layer_id - self.pool.start_layer]

    def get_buffer(self, layer_id: int) -> torch.Tensor:
        return self.get_local_buffer(layer_id)

    def store_quantized(self, layer_id: int, loc: torch.Tensor, index_k: torch.Tensor, index_k_scale: torch.Tensor) -> None:
        """index_k: uint8 [n, 128] (fp8 e4m3 bytes); index_k_scale: float32 [n]."""
        flat = self.get_buffer(layer_id).view(-1)
        flat[self.k_byte_index(loc)] = index_k.to(torch.uint8)
        scale_bytes = index_k_scale.to(torch.float32).contiguous().view(torch.uint8).view(-1, SCALE_BYTES)
        flat[self.scale_byte_index(loc)] = scale_bytes

    def get_k_and_scale_bytes(self, layer_id: int, loc: torch.Tensor):
        """(uint8 [n, 128] K bytes, float32 [n] scales) of token slots ``loc``."""
        flat = self.get_buffer(layer_id).view(-1)
        k = flat[self.k_byte_index(loc)]
        s = flat[self.scale_byte_index(loc)].contiguous().view(torch.float32).view(-1)
        return k, s

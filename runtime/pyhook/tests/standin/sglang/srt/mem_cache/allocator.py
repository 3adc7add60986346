"""Paged token-slot allocator (stand-in of ``sglang.srt.mem_cache.allocator``).

Pages ``1..num_pages`` are free at start (page 0 is reserved: padded graph rows
write there); ``alloc`` hands out whole pages from the front of ``free_pages``
and returns their token slots. ``get_kvcache()`` is the pool.
"""

from __future__ import annotations

import random
from typing import Optional

import torch


class PagedTokenToKVPoolAllocator:
    def __init__(self, size: int, page_size: int, dtype, device: str, kvcache, need_sort: bool = False):
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.device = device
        self._kvcache = kvcache
        self.num_pages = size // page_size
        self.free_pages = list(range(1, self.num_pages + 1))

    def get_kvcache(self):
        return self._kvcache

    def available_size(self) -> int:
        return len(self.free_pages) * self.page_size

    def shuffle_free_pages(self, seed: int) -> None:
        """Stand-in only: a fragmented free list, as after earlier traffic."""
        random.Random(seed).shuffle(self.free_pages)

    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        n = (need_size + self.page_size - 1) // self.page_size
        if n > len(self.free_pages):
            return None
        pages, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        p = torch.tensor(pages, dtype=torch.int64)
        slots = (p[:, None] * self.page_size + torch.arange(self.page_size)[None, :]).view(-1)
        return slots[:need_size]

    def free(self, free_index: torch.Tensor) -> None:
        if free_index.numel() == 0:
            return
        pages = sorted({int(x) // self.page_size for x in free_index.view(-1).tolist()})
        self.free_pages.extend(p for p in pages if p not in self.free_pages)

"""Disaggregation helpers (stand-in of ``sglang.srt.disaggregation.utils``)."""

from __future__ import annotations

from enum import Enum
from typing import List, Optional


class DisaggregationMode(Enum):
    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


class ReqToMetadataIdxAllocator:
    def __init__(self, size: int):
        self.size = size
        self.free_slots = list(range(size))

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self) -> Optional[int]:
        return self.free_slots.pop(0) if self.free_slots else None

    def free(self, free_index: int) -> None:
        self.free_slots.append(free_index)


class MetadataBuffers:
    """First output token per metadata slot (prefill writes, transfer carries)."""

    def __init__(self, size: int):
        self.output_ids: List[int] = [0] * size


def kv_to_page_indices(kv_indices, page_size: int):
    """Token slots -> page indices of the pages they start (slots of whole pages)."""
    return [int(s) // page_size for s in kv_indices[::page_size]]

"""Process-wide parallel state: ``get_parallel().tp_rank`` (the reference's
second way to read a rank; neither Scheduler nor ModelRunner has ``tp_rank``)."""

from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class ParallelState:
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    dp_rank: int = 0
    moe_ep_rank: int = 0
    attn_tp_rank: int = 0
    attn_tp_size: int = 1


_parallel: Optional[ParallelState] = None


def set_parallel(ps: ParallelState) -> None:
    global _parallel
    _parallel = ps


def get_parallel() -> ParallelState:
    if _parallel is None:
        raise RuntimeError("parallel state not initialized (no scheduler in this process)")
    return _parallel

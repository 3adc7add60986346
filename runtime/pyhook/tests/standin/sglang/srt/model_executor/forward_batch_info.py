"""ForwardBatch (stand-in of ``sglang.srt.model_executor.forward_batch_info``).

Fields per the reference: ``forward_mode``, ``batch_size``, ``req_pool_indices``
(int64), ``seq_lens`` (int64, including the token written this step),
``out_cache_loc``, ``positions``, ``rids``. No pool references, no rooms.
"""

from __future__ import annotations

import dataclasses
from enum import IntEnum, auto
from typing import List, Optional

import torch


class ForwardMode(IntEnum):
    EXTEND = auto()
    DECODE = auto()
    IDLE = auto()

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_extend(self) -> bool:
        return self == ForwardMode.EXTEND

    def is_idle(self) -> bool:
        return self == ForwardMode.IDLE


@dataclasses.dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    out_cache_loc: torch.Tensor
    positions: torch.Tensor
    rids: Optional[List[str]] = None
    seq_lens_sum: int = 0
    seq_lens_cpu: Optional[torch.Tensor] = None
    extend_seq_lens: Optional[torch.Tensor] = None
    extend_prefix_lens: Optional[torch.Tensor] = None
    out_cache_loc_virtual: Optional[torch.Tensor] = None
    spec_info: object = None
    can_run_dp_cuda_graph: bool = False

"""LogitsProcessorOutput (stand-in of ``sglang.srt.layers.logits_processor``)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch


@dataclasses.dataclass
class LogitsProcessorOutput:
    next_token_logits: torch.Tensor
    hidden_states: Optional[torch.Tensor] = None

"""ServerArgs / PortArgs (stand-in of ``sglang.srt.server_args``).

SGLang's names where the stand-in has the setting; ``standin_*`` fields are the
stand-in engine's own knobs (faults, workload).
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional


@dataclasses.dataclass
class ServerArgs:
    model_path: str = "standin/tiny-dsa"
    device: str = "cpu"
    tp_size: int = 1
    page_size: int = 64
    attention_backend: str = "dsa"
    kv_cache_dtype: str = "fp8_e4m3"
    disaggregation_mode: str = "null"
    disaggregation_transfer_backend: str = "standin"
    cuda_graph_max_bs: int = 4
    disable_cuda_graph: bool = False
    enable_return_indexer_topk: bool = False
    max_running_requests: int = 16
    chunked_prefill_size: int = 512
    context_length: int = 4096
    # stand-in engine knobs
    standin_pool_pages: int = 256
    standin_fault: str = "none"
    standin_spec: bool = False
    standin_req_kv_variant: str = "base"
    standin_seed: int = 0
    standin_log_level: str = "info"
    standin_transfer_gap_ms: float = 2.0
    standin_corrupt: Optional[dict] = None  # {"room", "layer", "entry", "rank"} for transfer-corrupt
    standin_model: str = "dsa"  # "dsa" | "v4" (DeepSeekV4TokenToKVPool, page_size 256)
    standin_index_k_dtype: str = "fp8"  # V4: "fp8" | "fp4" | "bf16"
    standin_hisparse: bool = False  # V4: the C4 attention pool is a HiSparseC4DevicePool


@dataclasses.dataclass
class PortArgs:
    """How the stand-in's processes talk (SGLang uses ZMQ ports here)."""

    requests: List[dict] = dataclasses.field(default_factory=list)
    result_queue: Any = None
    transfer_queues: List[Any] = dataclasses.field(default_factory=list)
    decode_started: Any = None
    tp_barrier: Any = None
    tp_poll_array: Any = None


_global_server_args: Optional[ServerArgs] = None


def set_global_server_args_for_scheduler(server_args: ServerArgs) -> None:
    global _global_server_args
    _global_server_args = server_args


def get_global_server_args() -> Optional[ServerArgs]:
    return _global_server_args

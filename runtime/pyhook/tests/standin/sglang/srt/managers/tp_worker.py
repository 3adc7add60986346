"""TpModelWorker (stand-in of ``sglang.srt.managers.tp_worker``): owns the ModelRunner."""

from __future__ import annotations

from sglang.srt.model_executor.model_runner import ModelRunner


class TpModelWorker:
    def __init__(self, server_args, gpu_id: int = 0, tp_rank: int = 0, moe_ep_rank: int = 0, pp_rank: int = 0, dp_rank=None, nccl_port: int = 0):
        self.server_args = server_args
        self.tp_rank = tp_rank
        self.model_runner = ModelRunner(server_args, gpu_id=gpu_id, tp_rank=tp_rank, tp_size=server_args.tp_size)

    def get_memory_pool(self):
        return self.model_runner.req_to_token_pool, self.model_runner.token_to_kv_pool_allocator

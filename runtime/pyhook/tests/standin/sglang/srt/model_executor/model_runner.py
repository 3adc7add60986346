"""ModelRunner (stand-in of ``sglang.srt.model_executor.model_runner``).

Attributes per the reference: ``req_to_token_pool``, ``token_to_kv_pool``
(the ``DSATokenToKVPool``), ``token_to_kv_pool_allocator``, ``eager_runner``,
``decode_cuda_graph_runner`` (None when graphs are off or on prefill),
``forward_pass_id`` (incremented at the start of each ``forward``), ``ps``,
``device``, ``model``. Start-up order: memory pool, ``init_indexer_capturer()``,
``init_cuda_graphs()``. ``_forward_raw`` picks the graph runner when
``decode_cuda_graph_runner.can_run_graph(forward_batch)``, else the eager runner.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, HybridLinearKVPool, ReqToTokenPool
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
from sglang.srt.model_executor.runner.eager_runner import EagerRunner
from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
from sglang.srt.models import dsa_standin, v4_standin
from sglang.srt.runtime_context import ParallelState
from sglang.srt.state_capturer.indexer_topk import (
    create_indexer_capturer,
    get_global_indexer_capturer,
    set_global_indexer_capturer,
)


@dataclasses.dataclass
class ModelRunnerOutput:
    logits_output: LogitsProcessorOutput
    can_run_graph: bool


class ModelRunner:
    def __init__(self, server_args, gpu_id: int = 0, tp_rank: int = 0, tp_size: int = 1,
                 req_to_token_pool: Optional[ReqToTokenPool] = None,
                 token_to_kv_pool_allocator: Optional[PagedTokenToKVPoolAllocator] = None):
        self.server_args = server_args
        self.gpu_id = gpu_id
        self.device = server_args.device
        self.page_size = server_args.page_size
        self.ps = ParallelState(tp_rank=tp_rank, tp_size=tp_size, attn_tp_rank=tp_rank, attn_tp_size=tp_size)
        self.forward_pass_id = 0
        self.decode_cuda_graph_runner = None
        self.load_model()
        self.init_memory_pool(req_to_token_pool, token_to_kv_pool_allocator)
        self.init_indexer_capturer()
        self.eager_runner = EagerRunner(self)
        self.init_cuda_graphs()

    def load_model(self) -> None:
        if self.server_args.standin_model == "v4":
            self.model = v4_standin.StandinV4ForCausalLM(self.server_args.standin_index_k_dtype)
        elif self.server_args.standin_model == "hybrid":
            self.model = dsa_standin.StandinDSAForCausalLM(layer_ids=dsa_standin.HYBRID_FULL_ATTENTION_LAYERS)
        else:
            self.model = dsa_standin.StandinDSAForCausalLM()

    def init_memory_pool(self, req_to_token_pool=None, token_to_kv_pool_allocator=None) -> None:
        sa = self.server_args
        size = sa.standin_pool_pages * sa.page_size
        self.req_to_token_pool = req_to_token_pool or ReqToTokenPool(sa.max_running_requests, sa.context_length, self.device)
        if token_to_kv_pool_allocator is not None:
            self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
            self.token_to_kv_pool = token_to_kv_pool_allocator.get_kvcache()
        elif sa.standin_model == "v4":
            self.token_to_kv_pool = DeepSeekV4TokenToKVPool(size, sa.page_size, v4_standin.COMPRESS_RATIOS,
                                                            sa.standin_index_k_dtype, self.device,
                                                            hisparse=sa.standin_hisparse)
            self.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(size, sa.page_size, torch.float32, self.device, self.token_to_kv_pool)
        else:
            self.token_to_kv_pool = DSATokenToKVPool(
                size, sa.page_size, dsa_standin.KV_LORA_RANK, torch.float32, dsa_standin.QK_ROPE_HEAD_DIM,
                dsa_standin.NUM_LAYERS, self.device, index_head_dim=dsa_standin.HEAD_DIM,
                skip_topk_layers=dsa_standin.SKIP_TOPK_LAYERS, index_move_bug=sa.standin_fault == "spec-move")
            if sa.standin_model == "hybrid":
                self.token_to_kv_pool = HybridLinearKVPool(dsa_standin.HYBRID_FULL_ATTENTION_LAYERS, self.token_to_kv_pool)
            self.token_to_kv_pool_allocator = PagedTokenToKVPoolAllocator(size, sa.page_size, torch.float32, self.device, self.token_to_kv_pool)
        self.model.bind_pools(self.req_to_token_pool, self.token_to_kv_pool)

    def init_indexer_capturer(self) -> None:
        sa = self.server_args
        set_global_indexer_capturer(create_indexer_capturer(
            num_tokens=sa.standin_pool_pages * sa.page_size + sa.page_size,
            max_running_requests=max(sa.max_running_requests, sa.cuda_graph_max_bs), device=self.device,
            enable=sa.enable_return_indexer_topk,
            num_indexer_layers=max(self.model.layer_ids) + 1 if hasattr(self.model, "layer_ids") else dsa_standin.NUM_LAYERS,
            index_topk=dsa_standin.TOPK))

    def init_cuda_graphs(self) -> None:
        sa = self.server_args
        if sa.disable_cuda_graph or sa.disaggregation_mode == "prefill":
            self.decode_cuda_graph_runner = None
            return
        self.decode_cuda_graph_runner = DecodeCudaGraphRunner(self)

    def forward(self, forward_batch, skip_attn_backend_init=None, pp_proxy_tensors=None,
                reinit_attn_backend: bool = False, split_forward_count: int = 1) -> ModelRunnerOutput:
        self.forward_pass_id += 1
        output = self._forward_raw(forward_batch, pp_proxy_tensors, reinit_attn_backend, split_forward_count)
        capturer = get_global_indexer_capturer()
        if capturer is not None:
            capturer.on_forward_end(forward_batch=forward_batch, can_run_graph=output.can_run_graph,
                                    cuda_graph_batch=getattr(self.decode_cuda_graph_runner, "bs", None))
        return output

    def _forward_raw(self, forward_batch, pp_proxy_tensors, reinit_attn_backend: bool = False,
                     split_forward_count: int = 1) -> ModelRunnerOutput:
        # SGLang's signature (pp_proxy_tensors required) and result: a
        # ModelRunnerOutput whose can_run_graph says graph replay or eager.
        runner = self.decode_cuda_graph_runner
        can_run_graph = bool(runner is not None and runner.can_run_graph(forward_batch))
        if can_run_graph:
            ret = runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        else:
            ret = self.eager_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
        return ModelRunnerOutput(logits_output=ret, can_run_graph=can_run_graph)

"""Indexer top-k capture (stand-in of ``sglang.srt.state_capturer.indexer_topk``).

The model calls ``capturer.capture(layer_id=L, topk_indices=[bs, topk])`` for
each indexer layer of every forward (padded graph rows included); ModelRunner
calls ``capturer.on_forward_end(forward_batch, can_run_graph, cuda_graph_batch)``
after the forward. ``ModelRunner.init_indexer_capturer()`` always sets the
global (None unless ``server_args.enable_return_indexer_topk``). A graph
captures the capturer that was global at capture time: install one after
``init_indexer_capturer()`` and before ``init_cuda_graphs()``.
"""

from __future__ import annotations

from typing import Optional

import torch


class IndexerTopkCapturer:
    def __init__(self, num_tokens: int, num_indexer_layers: int, index_topk: int, max_running_requests: int, device: str = "cpu"):
        self.num_layers = num_indexer_layers
        self.topk_size = index_topk
        self.device_buffer = torch.full((max(1, max_running_requests), num_indexer_layers, index_topk), -1, dtype=torch.int32)
        self.host_buffer = torch.full((num_tokens, num_indexer_layers, index_topk), -1, dtype=torch.int32)

    def capture(self, layer_id: int, topk_indices: torch.Tensor):
        n = topk_indices.shape[0]
        self.device_buffer[:n, layer_id, :] = topk_indices

    def on_forward_end(self, forward_batch, can_run_graph: bool, cuda_graph_batch: Optional[int], no_copy_to_cpu: bool = False):
        loc = forward_batch.out_cache_loc
        if forward_batch.forward_mode.is_decode():
            self.host_buffer[loc.long()] = self.device_buffer[: loc.shape[0]]
        return None


_global_indexer_capturer = None


def get_global_indexer_capturer():
    return _global_indexer_capturer


def set_global_indexer_capturer(capturer) -> None:
    global _global_indexer_capturer
    _global_indexer_capturer = capturer


def maybe_capture_indexer_topk(layer_id: int, topk_indices: Optional[torch.Tensor]):
    if topk_indices is None:
        return None
    cap = get_global_indexer_capturer()
    if cap is not None:
        cap.capture(layer_id=layer_id, topk_indices=topk_indices)
    return topk_indices


def create_indexer_capturer(*, model_config=None, num_tokens: int, max_running_requests: int, device: str, enable: bool = False, num_indexer_layers: int = 4, index_topk: int = 8):
    if not enable:
        return None
    return IndexerTopkCapturer(num_tokens, num_indexer_layers, index_topk, max_running_requests, device)

"""Decode graph runner (stand-in of
``sglang.srt.model_executor.runner.decode_cuda_graph_runner``).

``execute(forward_batch, pp_proxy_tensors=None)`` calls ``load_batch`` (sets
``raw_bs`` / ``bs`` / ``raw_num_token``; copies the batch into the static
``buffers``, padding rows ``raw_bs..bs`` with req_pool_idx 0, seq_len 1 and
out_cache_loc 0, so padded rows write slot 0 / page 0), then
``self.backend.replay(ShapeKey(bs), forward_batch)``. The result's
``next_token_logits`` is a view of the static logits buffer shared by all
shapes. ``bs`` is the smallest capture size >= raw_bs.

The captured forward uses static workspace buffers; with server_args
``standin_fault="replay-alias"`` its scratch aliases the first 64 columns of
the index-logit buffer (eager runs are unaffected).
"""

from __future__ import annotations

import bisect

import torch

from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.runner_backend.full_cuda_graph_backend import FullCudaGraphBackend, ShapeKey
from sglang.srt.models.dsa_standin import GraphWorkspace

_is_capture_mode = False


def get_is_capture_mode() -> bool:
    return _is_capture_mode


def get_capture_bs(max_bs: int):
    out, b = [], 1
    while b < max_bs:
        out.append(b)
        b *= 2
    out.append(max_bs)
    return out


class DecodeInputBuffers:
    def __init__(self, max_bs: int, vocab_size: int):
        self.input_ids = torch.zeros(max_bs, dtype=torch.int64)
        self.req_pool_indices = torch.zeros(max_bs, dtype=torch.int64)
        self.seq_lens = torch.ones(max_bs, dtype=torch.int64)
        self.out_cache_loc = torch.zeros(max_bs, dtype=torch.int64)
        self.positions = torch.zeros(max_bs, dtype=torch.int64)
        self.next_token_logits = torch.zeros((max_bs, vocab_size), dtype=torch.float32)

    def forward_batch(self, bs: int) -> ForwardBatch:
        return ForwardBatch(
            forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=self.input_ids[:bs],
            req_pool_indices=self.req_pool_indices[:bs], seq_lens=self.seq_lens[:bs],
            out_cache_loc=self.out_cache_loc[:bs], positions=self.positions[:bs])


class DecodeCudaGraphRunner:
    def __init__(self, model_runner):
        global _is_capture_mode
        self.model_runner = model_runner
        sa = model_runner.server_args
        self.max_bs = sa.cuda_graph_max_bs
        self.capture_bs = get_capture_bs(self.max_bs)
        self.buffers = DecodeInputBuffers(self.max_bs, model_runner.model.vocab_size)
        if hasattr(model_runner.model, "make_workspace"):  # the V4 stand-in plans its own
            self.workspace = model_runner.model.make_workspace(self.max_bs, model_runner.req_to_token_pool.max_context_len)
        else:
            self.workspace = GraphWorkspace(self.max_bs, model_runner.req_to_token_pool.max_context_len,
                                            alias_scratch=sa.standin_fault == "replay-alias")
        self.backend = FullCudaGraphBackend(self)
        self.raw_bs = 0
        self.bs = 0
        self.raw_num_token = 0
        _is_capture_mode = True
        try:
            for bs in self.capture_bs:
                self.backend.capture(ShapeKey(bs), self._make_graph_fn(bs))
        finally:
            _is_capture_mode = False

    def _make_graph_fn(self, bs: int):
        def run(capturer):
            fb = self.buffers.forward_batch(bs)
            out = self.model_runner.model.forward(fb.input_ids, fb.positions, fb, workspace=self.workspace, capturer=capturer)
            self.buffers.next_token_logits[:bs].copy_(out.next_token_logits)
            return LogitsProcessorOutput(next_token_logits=self.buffers.next_token_logits[:bs])
        return run

    def can_run_graph(self, forward_batch) -> bool:
        return forward_batch.forward_mode.is_decode() and forward_batch.batch_size <= self.max_bs

    def load_batch(self, forward_batch) -> None:
        raw_bs = forward_batch.batch_size
        self.raw_bs = raw_bs
        self.raw_num_token = raw_bs
        self.bs = self.capture_bs[bisect.bisect_left(self.capture_bs, raw_bs)]
        b = self.buffers
        b.input_ids[:raw_bs].copy_(forward_batch.input_ids)
        b.req_pool_indices[:raw_bs].copy_(forward_batch.req_pool_indices)
        b.seq_lens[:raw_bs].copy_(forward_batch.seq_lens)
        b.out_cache_loc[:raw_bs].copy_(forward_batch.out_cache_loc)
        b.positions[:raw_bs].copy_(forward_batch.positions)
        b.input_ids[raw_bs:].zero_()
        b.req_pool_indices[raw_bs:].zero_()
        b.seq_lens[raw_bs:].fill_(1)
        b.out_cache_loc[raw_bs:].zero_()
        b.positions[raw_bs:].zero_()

    def execute(self, forward_batch, pp_proxy_tensors=None):
        self.load_batch(forward_batch)
        out = self.backend.replay(ShapeKey(self.bs), forward_batch)
        return LogitsProcessorOutput(next_token_logits=out.next_token_logits[: self.raw_bs])

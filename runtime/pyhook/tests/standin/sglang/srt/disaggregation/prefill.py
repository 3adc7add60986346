"""Prefill side of PD disaggregation (stand-in of
``sglang.srt.disaggregation.prefill``).

``SchedulerDisaggregationPrefillMixin.send_kv_chunk(self, req, last_chunk=False,
end_idx=None)``: ``self`` is the Scheduler. Middle chunks send only whole pages
prefilled so far; ``last_chunk=True`` sends the rest of the prompt's pages (the
first output token is already in ``req.output_ids`` and travels as metadata).
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import torch

from sglang.srt.disaggregation.base.conn import KVPoll  # noqa: F401 (SGLang's modules import it here)
from sglang.srt.disaggregation.standin.conn import StandinKVSender
from sglang.srt.disaggregation.standin.truth import room_layer_digests
from sglang.srt.disaggregation.utils import kv_to_page_indices
from sglang.srt.managers.schedule_batch import Req, req_pool_index, set_req_pool_index
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class SchedulerDisaggregationPrefillMixin:
    def send_kv_chunk(self, req: Req, last_chunk: bool = False, end_idx: Optional[int] = None) -> None:
        page_size = self.token_to_kv_pool_allocator.page_size
        start_idx = req.start_send_idx
        if end_idx is None:
            end_idx = min(req.standin_prefilled_len, len(req.origin_input_ids))
        if not last_chunk:
            end_idx = end_idx - end_idx % page_size
        kv_indices = self.req_to_token_pool.req_to_token[req_pool_index(req), start_idx:end_idx]
        req.start_send_idx = end_idx
        page_indices = kv_to_page_indices(kv_indices.tolist(), page_size)
        if not page_indices and not last_chunk:
            return
        if last_chunk:
            req.disagg_kv_sender.output_id = int(req.output_ids[0])
        req.disagg_kv_sender.send(page_indices)

    # the stand-in's prefill event loop ---------------------------------------
    def event_loop_normal_disagg_prefill(self) -> None:
        specs = self.port_args.requests
        first = [s for s in specs if not s.get("late")]
        late = [s for s in specs if s.get("late")]
        for spec in first:
            self._standin_prefill_one(spec, gap=0.0)
        if late:
            if not self.port_args.decode_started.wait(120):
                raise RuntimeError("prefill: decode never started its first step")
            for spec in late:
                self._standin_prefill_one(spec, gap=self.server_args.standin_transfer_gap_ms / 1000.0)

    def _standin_prefill_one(self, spec: dict, gap: float) -> None:
        req = Req(spec["rid"], origin_input_ids=spec["prompt"], sampling_params=SamplingParams(spec["max_new_tokens"]),
                  bootstrap_room=spec["room"])
        L = len(req.origin_input_ids)
        (rpi,) = self.req_to_token_pool.alloc(1)
        slots = self.token_to_kv_pool_allocator.alloc(L)
        if slots is None:
            raise RuntimeError("prefill pool full for request %s (%d tokens)" % (req.rid, L))
        self.req_to_token_pool.req_to_token[rpi, :L] = slots.to(torch.int32)
        set_req_pool_index(req, rpi)
        self.standin_record["page_tables"][req.rid] = kv_to_page_indices(slots.tolist(), self.page_size)
        req.standin_prefilled_len = 0
        req.disagg_kv_sender = StandinKVSender(self.disagg_kv_manager, "standin://prefill", req.bootstrap_room)
        req.disagg_kv_sender.init((L + self.page_size - 1) // self.page_size)
        chunk = self.server_args.chunked_prefill_size
        ids = torch.tensor(list(req.origin_input_ids), dtype=torch.int64)
        for start in range(0, L, chunk):
            end = min(L, start + chunk)
            pos = torch.arange(start, end, dtype=torch.int64)
            fb = ForwardBatch(ForwardMode.EXTEND, 1, ids[start:end], torch.tensor([rpi]), torch.tensor([end]),
                              slots[start:end], pos, rids=[req.rid], seq_lens_sum=end,
                              extend_seq_lens=torch.tensor([end - start]), extend_prefix_lens=torch.tensor([start]))
            t0 = time.perf_counter()
            out = self.tp_worker.model_runner.forward(fb)
            req.standin_prefilled_len = end
            alloc = self.token_to_kv_pool_allocator
            logger.info("Prefill batch, #new-seq: 1, #new-token: %d, #cached-token: 0, token usage: %.2f, #running-req: 0, "
                        "#queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): %.2f",
                        end - start, 1 - alloc.available_size() / alloc.size, (end - start) / max(time.perf_counter() - t0, 1e-9))
            if end < L:
                self.send_kv_chunk(req)
                if gap:
                    time.sleep(gap)
            else:
                req.output_ids.append(int(out.logits_output.next_token_logits[0].argmax()))
                self.send_kv_chunk(req, last_chunk=True)
        self.standin_record["sent"][str(req.bootstrap_room)] = room_layer_digests(self.token_to_kv_pool_allocator.get_kvcache(), slots)
        self.standin_record["first_token"][req.rid] = int(req.output_ids[0])

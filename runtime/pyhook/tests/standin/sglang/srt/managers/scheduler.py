"""Scheduler (stand-in of ``sglang.srt.managers.scheduler``).

``Scheduler`` mixes in the PD mixins (so a patch of a mixin attribute reaches
every Scheduler) and has, per the reference: ``req_to_token_pool``,
``token_to_kv_pool_allocator`` (``.get_kvcache()`` is the DSA pool, the same
object as ``tp_worker.model_runner.token_to_kv_pool``), ``page_size``,
``disaggregation_mode`` (``DisaggregationMode``), ``server_args``, ``ps``
(``ps.tp_rank``), ``tp_worker.model_runner``, ``waiting_queue``,
``running_batch``, ``max_running_requests``, ``policy`` (``calc_priority``);
on decode also ``disagg_decode_prealloc_queue`` and
``disagg_decode_transfer_queue``, and with ``speculative_algorithm`` a
``draft_worker`` whose ``model_runner`` is a draft ModelRunner
(``is_draft_worker`` True) sharing the target's ``req_to_token_pool`` and
owning its own KV pool.

``run_scheduler_process(server_args, port_args, gpu_id, tp_rank, moe_ep_rank,
pp_rank, dp_rank, pipe_writer)`` is the target of each spawned scheduler
process; it calls ``load_plugins()`` first, as SGLang does.
"""

from __future__ import annotations

import logging
import os
import traceback

from sglang.srt.disaggregation.decode import (
    DecodePreallocQueue,
    DecodeTransferQueue,
    HostStagingPool,
    PriorityPolicy,
    SchedulerDisaggregationDecodeMixin,
)
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
from sglang.srt.disaggregation.standin.conn import StandinGroup, StandinKVManager
from sglang.srt.disaggregation.utils import DisaggregationMode, MetadataBuffers, ReqToMetadataIdxAllocator
from sglang.srt.managers.schedule_batch import ScheduleBatch, set_req_kv_variant
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.runtime_context import set_parallel
from sglang.srt.server_args import set_global_server_args_for_scheduler

logger = logging.getLogger(__name__)


class Scheduler(SchedulerDisaggregationPrefillMixin, SchedulerDisaggregationDecodeMixin):
    def __init__(self, server_args, port_args, gpu_id: int, tp_rank: int, moe_ep_rank: int, pp_rank: int, dp_rank):
        self.server_args = server_args
        self.port_args = port_args
        self.gpu_id = gpu_id
        set_global_server_args_for_scheduler(server_args)
        set_req_kv_variant(server_args.standin_req_kv_variant)
        self.tp_worker = TpModelWorker(server_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
        self.ps = self.tp_worker.model_runner.ps
        set_parallel(self.ps)
        self.req_to_token_pool, self.token_to_kv_pool_allocator = self.tp_worker.get_memory_pool()
        self.page_size = server_args.page_size
        self.disaggregation_mode = DisaggregationMode(server_args.disaggregation_mode)
        self.max_running_requests = server_args.standin_max_running or server_args.max_running_requests
        self.policy = PriorityPolicy()
        self.draft_worker = None
        if server_args.speculative_algorithm and server_args.disaggregation_mode == "decode":
            from sglang.srt.speculative.eagle_worker import EAGLEWorker

            self.draft_worker = EAGLEWorker(server_args, gpu_id, tp_rank, self.tp_worker)
        self.tree_cache = None
        self.waiting_queue = []
        self.running_batch = ScheduleBatch([], self.req_to_token_pool, self.token_to_kv_pool_allocator)
        self.standin_record = {"sent": {}, "transferred": {}, "first_token": {}, "outputs": {}, "steps": [], "moves": [],
                               "page_tables": {}}
        self.init_disaggregation()

    def init_disaggregation(self) -> None:
        sa, pa = self.server_args, self.port_args
        pool = self.token_to_kv_pool_allocator.get_kvcache()
        self.req_to_metadata_buffer_idx_allocator = ReqToMetadataIdxAllocator(sa.max_running_requests * 2)
        self.disagg_metadata_buffers = MetadataBuffers(sa.max_running_requests * 2)
        if self.disaggregation_mode == DisaggregationMode.PREFILL:
            self.token_to_kv_pool_allocator.shuffle_free_pages(sa.standin_seed * 7919 + 1)
            self.disagg_kv_manager = StandinKVManager(pool, self.page_size, self.ps.tp_rank, outboxes=pa.transfer_queues)
        elif self.disaggregation_mode == DisaggregationMode.DECODE:
            rank = self.ps.tp_rank
            if sa.disaggregation_decode_host_receive_threshold > 0:
                self.standin_host_pool = HostStagingPool(pool, sa.standin_pool_pages, self.page_size)
            corrupt = sa.standin_corrupt if sa.standin_fault == "transfer-corrupt" else None
            self.disagg_kv_manager = StandinKVManager(pool, self.page_size, rank, inbox=pa.transfer_queues[rank], corrupt=corrupt)
            group = StandinGroup(rank, sa.tp_size, pa.tp_barrier, pa.tp_poll_array)
            self.disagg_decode_transfer_queue = DecodeTransferQueue(
                group, self.req_to_metadata_buffer_idx_allocator, rank, self.disagg_metadata_buffers, self, self.tree_cache)
            self.disagg_decode_prealloc_queue = DecodePreallocQueue(
                self.req_to_token_pool, self.token_to_kv_pool_allocator, self.disagg_kv_manager,
                self.req_to_metadata_buffer_idx_allocator, self)

    def run_event_loop(self) -> None:
        if self.disaggregation_mode == DisaggregationMode.PREFILL:
            self.event_loop_normal_disagg_prefill()
        elif self.disaggregation_mode == DisaggregationMode.DECODE:
            self.event_loop_normal_disagg_decode()
        else:
            raise ValueError("the stand-in runs PD only: disaggregation_mode %r" % self.server_args.disaggregation_mode)

    def standin_result(self) -> dict:
        out = dict(self.standin_record)
        out.update({"side": self.disaggregation_mode.value, "rank": self.ps.tp_rank, "pid": os.getpid(),
                    "forward_pass_id": self.tp_worker.model_runner.forward_pass_id,
                    "corrupted": list(getattr(self.disagg_kv_manager, "corrupted", []))})
        return out


def configure_logger(server_args, tp_rank: int) -> None:
    """SGLang's scheduler log prefix: ``[%Y-%m-%d %H:%M:%S TPn] ``."""
    prefix = " TP%d" % tp_rank if server_args.disaggregation_mode == "decode" or server_args.tp_size > 1 else ""
    logging.basicConfig(level=getattr(logging, server_args.standin_log_level.upper(), logging.INFO),
                        format="[%(asctime)s" + prefix + "] %(message)s", datefmt="%Y-%m-%d %H:%M:%S", force=True)


def run_scheduler_process(server_args, port_args, gpu_id: int, tp_rank: int, moe_ep_rank: int, pp_rank: int, dp_rank, pipe_writer=None):
    from sglang.srt.plugins import load_plugins

    load_plugins()
    side = server_args.disaggregation_mode
    configure_logger(server_args, tp_rank)
    try:
        scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
        if pipe_writer is not None:
            pipe_writer.send({"status": "ready"})
        scheduler.run_event_loop()
        port_args.result_queue.put(scheduler.standin_result())
    except BaseException:
        port_args.result_queue.put({"side": side, "rank": tp_rank, "pid": os.getpid(), "error": traceback.format_exc()})
        raise

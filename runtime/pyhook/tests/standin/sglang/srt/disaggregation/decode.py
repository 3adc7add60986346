"""Decode side of PD disaggregation (stand-in of
``sglang.srt.disaggregation.decode``).

- ``DecodePreallocQueue``: allocates a request's ``req_pool_idx`` and pages
  (its prompt, its output tokens and 2 speculative draft slots) and gives the
  receiver the prompt's pages (different slots from the prefill side's).
- ``DecodeTransferQueue.pop_transferred(self, rids_to_check=None) -> List[Req]``:
  polls every receiver, all-reduces the poll states over the TP ranks (min),
  and returns the requests that reached ``KVPoll.Success`` (first output token
  appended from the metadata); the rest stay in ``self.queue``
  (``DecodeRequest``: ``.req``, ``.kv_receiver``, ``.metadata_buffer_index``).
- ``SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch(self,
  running_batch)`` (47aa81b7's shape): ``_get_new_prebuilt_batch`` reorders
  ``self.waiting_queue`` by priority (``self.policy.calc_priority``, with
  ``enable_priority_scheduling``), admits the first ``min(req_to_token_pool.size,
  max_running_requests) - running_batch.batch_size()`` requests and restores
  host-staged ones to the device (``restore_kv_cache``); then
  ``_verify_kv_checksums(batch)`` gets the admitted batch. Returns a
  ``ScheduleBatch`` or None.

Decode host receive (``disaggregation_decode_host_receive_threshold > 0``;
requests whose prompt has at least that many tokens): ``_pre_alloc_host``
receives the transfer into a host pool (``req.kv.retraction_backup`` set,
``DecodeRequest.host_staged``) and allocates no device row; on
``KVPoll.Success`` ``pop_transferred`` calls ``allocate_host_staged`` ->
``_pre_alloc(req)``, which allocates the device row (``holds_kv`` True) whose
pages still hold stale bytes, and returns the request; the bytes reach the
device only in ``_get_new_prebuilt_batch``. Needs ``--req-kv-variant new``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import List, Optional

import torch

from sglang.srt.disaggregation.base.conn import KVPoll
from sglang.srt.disaggregation.standin.conn import StandinKVReceiver
from sglang.srt.disaggregation.standin.truth import room_layer_digests
from sglang.srt.disaggregation.utils import kv_to_page_indices
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch, req_pool_index, set_req_pool_index
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

DRAFT_OFFSET = 2  # a speculative request's draft slot is the slot of position + 2


@dataclasses.dataclass
class DecodeRequest:
    req: Req
    kv_receiver: StandinKVReceiver
    waiting_for_input: bool = False
    metadata_buffer_index: int = -1
    host_staged: bool = False


@dataclasses.dataclass
class RetractionBackup:
    """Where a host-staged request's KV waits in host memory."""

    host_pages: List[int]


class HostStagingPool:
    """Host memory a host-received transfer lands in: buffers shaped like
    what the device pool's transfer moves (its standin_index_rows page rows,
    its standin_kv_buffers slots), with page ids of its own (page 0 unused)."""

    def __init__(self, device_pool, num_pages: int, page_size: int):
        self.page_size = page_size
        self._rows = [(layer, torch.zeros((num_pages if b.shape[0] else 0,) + tuple(b.shape[1:]), dtype=b.dtype))
                      for layer, b in device_pool.standin_index_rows()]
        self.standin_kv_buffers = [torch.zeros((num_pages * page_size,) + tuple(b.shape[1:]), dtype=b.dtype)
                                   for b in device_pool.standin_kv_buffers]
        self.free_pages = list(range(1, num_pages))

    def standin_index_rows(self):
        return self._rows

    def alloc_pages(self, n: int) -> List[int]:
        if n > len(self.free_pages):
            raise RuntimeError("host staging pool full (%d pages wanted)" % n)
        out, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return out

    def free(self, pages: List[int]) -> None:
        self.free_pages.extend(pages)


def restore_kv_cache(host: HostStagingPool, device_pool, host_pages: List[int], device_pages: List[int], page_size: int) -> None:
    """Copy a host-staged request's pages to its device pages."""
    h = torch.tensor(host_pages, dtype=torch.int64)
    d = torch.tensor(device_pages, dtype=torch.int64)
    for (_, hb), (_, db) in zip(host.standin_index_rows(), device_pool.standin_index_rows()):
        if db.shape[0]:
            db[d] = hb[h]
    hs = (h[:, None] * page_size + torch.arange(page_size)[None, :]).view(-1)
    ds = (d[:, None] * page_size + torch.arange(page_size)[None, :]).view(-1)
    for hb, db in zip(host.standin_kv_buffers, device_pool.standin_kv_buffers):
        db[ds] = hb[hs]


class PriorityPolicy:
    """SchedulePolicy's priority ordering: lower req.priority first, stable."""

    def calc_priority(self, waiting_queue, running_batch=None) -> bool:
        waiting_queue.sort(key=lambda r: getattr(r, "priority", 0) or 0)
        return True


def poll_and_all_reduce(pollers, gloo_group) -> List[int]:
    return gloo_group.all_reduce_min([int(p.poll()) for p in pollers])


class DecodePreallocQueue:
    def __init__(self, req_to_token_pool, token_to_kv_pool_allocator, kv_manager, req_to_metadata_buffer_idx_allocator, scheduler):
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.kv_manager = kv_manager
        self.req_to_metadata_buffer_idx_allocator = req_to_metadata_buffer_idx_allocator
        self.scheduler = scheduler
        self.queue: List[DecodeRequest] = []

    def add(self, req: Req) -> None:
        self.queue.append(DecodeRequest(req=req, kv_receiver=StandinKVReceiver(self.kv_manager, "standin://decode", req.bootstrap_room)))

    def host_receive(self, req: Req) -> bool:
        t = getattr(self.scheduler.server_args, "disaggregation_decode_host_receive_threshold", 0) or 0
        return t > 0 and len(req.origin_input_ids) >= t

    def pop_preallocated(self) -> List[DecodeRequest]:
        out = []
        for d in self.queue:
            if self.host_receive(d.req):
                self._pre_alloc_host(d)
            else:
                self._pre_alloc(d.req)
                d.metadata_buffer_index = d.req.metadata_buffer_index
                d.kv_receiver.init(self._prompt_pages(d.req), d.metadata_buffer_index)
            out.append(d)
        self.queue = []
        return out

    def _prompt_pages(self, req: Req) -> List[int]:
        L = len(req.origin_input_ids)
        slots = self.req_to_token_pool.req_to_token[req_pool_index(req), :L].long()
        return kv_to_page_indices(slots.tolist(), self.token_to_kv_pool_allocator.page_size)

    def _pre_alloc_host(self, d: DecodeRequest) -> None:
        """Receive into host memory: no device row yet."""
        req = d.req
        if not hasattr(req, "kv"):
            raise RuntimeError("decode host receive needs --req-kv-variant new (req.kv.retraction_backup)")
        ps = self.token_to_kv_pool_allocator.page_size
        host = self.scheduler.standin_host_pool
        pages = host.alloc_pages((len(req.origin_input_ids) + ps - 1) // ps)
        req.kv.retraction_backup = RetractionBackup(host_pages=pages)
        d.host_staged = True
        d.metadata_buffer_index = self.req_to_metadata_buffer_idx_allocator.alloc()
        req.metadata_buffer_index = d.metadata_buffer_index
        d.kv_receiver.dest_pool = host
        d.kv_receiver.init(pages, d.metadata_buffer_index)

    def allocate_host_staged(self, d: DecodeRequest) -> None:
        """The transfer reached host memory: allocate the device row now
        (holds_kv True); its pages keep whatever they held until the restore."""
        self._pre_alloc(d.req, metadata=False)

    def _pre_alloc(self, req: Req, metadata: bool = True) -> None:
        """The request's device row: its prompt, output tokens and 2 draft slots."""
        page_size = self.token_to_kv_pool_allocator.page_size
        L = len(req.origin_input_ids)
        n = L + req.sampling_params.max_new_tokens + DRAFT_OFFSET
        (rpi,) = self.req_to_token_pool.alloc(1)
        slots = self.token_to_kv_pool_allocator.alloc(n)
        if slots is None:
            raise RuntimeError("decode pool full pre-allocating request %s (%d tokens)" % (req.rid, n))
        self.req_to_token_pool.req_to_token[rpi, :n] = slots.to(torch.int32)
        set_req_pool_index(req, rpi, committed=0)
        req.standin_alloc_len = n
        if metadata:
            req.metadata_buffer_index = self.req_to_metadata_buffer_idx_allocator.alloc()
        self.scheduler.standin_record["page_tables"][req.rid] = kv_to_page_indices(slots.tolist(), page_size)


class DecodeTransferQueue:
    def __init__(self, gloo_group, req_to_metadata_buffer_idx_allocator, tp_rank: int, metadata_buffers, scheduler, tree_cache=None):
        self.queue: List[DecodeRequest] = []
        self.gloo_group = gloo_group
        self.req_to_metadata_buffer_idx_allocator = req_to_metadata_buffer_idx_allocator
        self.tp_rank = tp_rank
        self.metadata_buffers = metadata_buffers
        self.scheduler = scheduler
        self.tree_cache = tree_cache

    def add(self, decode_req: DecodeRequest) -> None:
        self.queue.append(decode_req)

    def extend(self, decode_reqs: List[DecodeRequest]) -> None:
        self.queue.extend(decode_reqs)

    def pop_transferred(self, rids_to_check: Optional[List[str]] = None) -> List[Req]:
        if not self.queue:
            return []
        polls = poll_and_all_reduce([d.kv_receiver for d in self.queue], self.gloo_group)
        transferred, keep = [], []
        for d, poll in zip(self.queue, polls):
            if rids_to_check is not None and d.req.rid not in rids_to_check:
                keep.append(d)
                continue
            if poll == KVPoll.Success:
                out_id = d.kv_receiver.output_id
                self.metadata_buffers.output_ids[d.metadata_buffer_index] = out_id
                d.req.output_ids.append(out_id)
                L = len(d.req.origin_input_ids)
                if hasattr(d.req, "kv"):
                    d.req.kv.kv_committed_len = L
                else:
                    d.req.kv_committed_len = L
                self.req_to_metadata_buffer_idx_allocator.free(d.metadata_buffer_index)
                if d.host_staged:
                    self.scheduler.disagg_decode_prealloc_queue.allocate_host_staged(d)
                    if hasattr(d.req, "kv"):
                        d.req.kv.kv_committed_len = L
                transferred.append(d.req)
            elif poll == KVPoll.Failed:
                raise RuntimeError("Decode transfer failed for request rank=%d decode_req.req.rid=%s decode_req.req.bootstrap_room=%s"
                                   % (self.tp_rank, d.req.rid, d.req.bootstrap_room))
            else:
                keep.append(d)
        self.queue = keep
        return transferred


class SchedulerDisaggregationDecodeMixin:
    def get_new_prebuilt_batch(self, running_batch: ScheduleBatch) -> Optional[ScheduleBatch]:
        batch = self._get_new_prebuilt_batch(running_batch)
        if batch is not None:
            self._verify_kv_checksums(batch)
        return batch

    def _get_new_prebuilt_batch(self, running_batch: ScheduleBatch) -> Optional[ScheduleBatch]:
        if not self.waiting_queue:
            return None
        if self.server_args.enable_priority_scheduling:
            self.policy.calc_priority(self.waiting_queue, running_batch)
        room = min(self.req_to_token_pool.size, self.max_running_requests) - running_batch.batch_size()
        if room <= 0:
            return None
        can_run, self.waiting_queue = self.waiting_queue[:room], self.waiting_queue[room:]
        for req in can_run:
            kv = getattr(req, "kv", None)
            backup = getattr(kv, "retraction_backup", None)
            if backup is not None:
                pool = self.token_to_kv_pool_allocator.get_kvcache()
                dev = self._standin_prompt_pages(req)
                restore_kv_cache(self.standin_host_pool, pool, backup.host_pages, dev, self.page_size)
                self.standin_host_pool.free(backup.host_pages)
                kv.retraction_backup = None
                L = len(req.origin_input_ids)
                slots = self.req_to_token_pool.req_to_token[req_pool_index(req), :L].long()
                self.standin_record["transferred"][str(req.bootstrap_room)] = room_layer_digests(pool, slots)
        self.standin_record.setdefault("admitted_order", []).append([r.rid for r in can_run])
        return ScheduleBatch.init_new(can_run, self.req_to_token_pool, self.token_to_kv_pool_allocator, self.tree_cache)

    def _verify_kv_checksums(self, batch: ScheduleBatch) -> None:
        """Verify after host restore and before process_prebuilt caches any
        KV (SGLang's own PD checksum; the stand-in has none to verify)."""
        return None

    def _standin_prompt_pages(self, req: Req) -> List[int]:
        L = len(req.origin_input_ids)
        slots = self.req_to_token_pool.req_to_token[req_pool_index(req), :L].long()
        return kv_to_page_indices(slots.tolist(), self.page_size)

    # the stand-in's decode event loop ----------------------------------------
    def event_loop_normal_disagg_decode(self) -> None:
        rec = self.standin_record
        specs = self.port_args.requests
        for spec in specs:
            req = Req(spec["rid"], origin_input_ids=spec["prompt"], sampling_params=SamplingParams(spec["max_new_tokens"]),
                      bootstrap_room=spec["room"])
            req.standin_spec = bool(spec.get("spec")) and self.server_args.standin_spec
            req.priority = spec.get("priority")
            self.disagg_decode_prealloc_queue.add(req)
        self.disagg_decode_transfer_queue.extend(self.disagg_decode_prealloc_queue.pop_preallocated())
        n_first = sum(1 for s in specs if not s.get("late"))
        popped, done, started = 0, 0, False
        pool = self.token_to_kv_pool_allocator.get_kvcache()
        while done < len(specs):
            for req in self.disagg_decode_transfer_queue.pop_transferred():
                if getattr(getattr(req, "kv", None), "retraction_backup", None) is None:
                    # (a host-staged request's landed bytes are recorded at its restore)
                    L = len(req.origin_input_ids)
                    slots = self.req_to_token_pool.req_to_token[req_pool_index(req), :L].long()
                    rec["transferred"][str(req.bootstrap_room)] = room_layer_digests(pool, slots)
                self.waiting_queue.append(req)
                popped += 1
            if not started and popped < n_first:
                time.sleep(0.0005)
                continue
            new_batch = self.get_new_prebuilt_batch(self.running_batch)
            if new_batch is not None:
                self.running_batch.merge_batch(new_batch)
            if self.running_batch.is_empty():
                time.sleep(0.0005)
                continue
            done += self.standin_decode_step()
            if not started:
                started = True
                if self.ps.tp_rank == 0 and self.port_args.decode_started is not None:
                    self.port_args.decode_started.set()

    def standin_decode_step(self) -> int:
        """One decode step of the running batch, then speculative moves; returns
        the number of requests that finished."""
        rec = self.standin_record
        r2t = self.req_to_token_pool.req_to_token
        reqs = self.running_batch.reqs
        rpis, pos, ids, locs, moves = [], [], [], [], []
        for req in reqs:
            rpi = req_pool_index(req)
            p = len(req.origin_input_ids) + len(req.output_ids) - 1
            loc = int(r2t[rpi, p])
            if req.standin_spec:
                draft = int(r2t[rpi, p + DRAFT_OFFSET])
                r2t[rpi, p] = draft
                moves.append((req, rpi, p, loc, draft))
                loc = draft
            rpis.append(rpi)
            pos.append(p)
            ids.append(int(req.output_ids[-1]))
            locs.append(loc)
        bs = len(reqs)
        seq = torch.tensor(pos, dtype=torch.int64) + 1
        fb = ForwardBatch(ForwardMode.DECODE, bs, torch.tensor(ids, dtype=torch.int64), torch.tensor(rpis, dtype=torch.int64),
                          seq, torch.tensor(locs, dtype=torch.int64), torch.tensor(pos, dtype=torch.int64),
                          rids=[r.rid for r in reqs], seq_lens_sum=int(seq.sum()), seq_lens_cpu=seq.clone())
        mr = self.tp_worker.model_runner
        t0 = time.perf_counter()
        if self.draft_worker is not None:  # the draft proposes first, on its own runner and pool
            self.draft_worker.draft_forward(ids, rpis, seq, locs, pos, [r.rid for r in reqs])
        out = mr.forward(fb)
        alloc = self.token_to_kv_pool_allocator
        logger.info("Decode batch, #running-req: %d, #token: %d, token usage: %.2f, pre-allocated usage: 0.00, "
                    "#prealloc-req: 0, #transfer-req: %d, #retracted-req: 0, cuda graph: %s, gen throughput (token/s): %.2f, "
                    "#queue-req: %d", bs, int(seq.sum()), 1 - alloc.available_size() / alloc.size,
                    len(self.disagg_decode_transfer_queue.queue), bool(out.can_run_graph),
                    bs / max(time.perf_counter() - t0, 1e-9), len(self.waiting_queue))
        logits = out.logits_output.next_token_logits
        next_ids = [int(x) for x in logits[:bs].argmax(dim=1)]
        gr = mr.decode_cuda_graph_runner
        rec["steps"].append({"forward_pass_id": mr.forward_pass_id, "raw_bs": bs,
                             "bs": gr.bs if out.can_run_graph else bs, "graph": bool(out.can_run_graph),
                             "rids": [r.rid for r in reqs], "positions": pos})
        for req, rpi, p, final, draft in moves:  # the speculative worker, between forwards
            self._standin_spec_move(req, rpi, p, final, draft)
        done = 0
        for req, nid in zip(reqs, next_ids):
            req.output_ids.append(nid)
            if hasattr(req, "kv"):
                req.kv.kv_committed_len += 1
            else:
                req.kv_committed_len += 1
            if len(req.output_ids) >= req.sampling_params.max_new_tokens:
                req.finished_reason = "length"
                rec["outputs"][req.rid] = list(req.output_ids)
                rpi = req_pool_index(req)
                self.token_to_kv_pool_allocator.free(r2t[rpi, : req.standin_alloc_len].long())
                self.req_to_token_pool.free(rpi)
                set_req_pool_index(req, None)
                done += 1
        self.running_batch.filter_batch()
        return done

    def _standin_spec_move(self, req, rpi, p, final, draft) -> None:
        pool = self.token_to_kv_pool_allocator.get_kvcache()
        ps = self.page_size
        bug = pool.index_key_cache.page_indexed_move_bug
        tgt = torch.tensor([final], dtype=torch.int64)
        src = torch.tensor([draft], dtype=torch.int64)
        entry = {"forward_pass_id": self.tp_worker.model_runner.forward_pass_id, "rid": req.rid, "position": p,
                 "tgt_loc": [final], "src_loc": [draft], "faulty": bool(bug)}
        if bug:
            rows = [final]
            before = {layer: buf[rows].clone() for layer, buf in enumerate(pool.index_k_with_scale_buffer) if buf.shape[0]}
        pool.move_kv_cache(tgt, src)
        self.req_to_token_pool.req_to_token[rpi, p] = final
        if bug:
            owners = self._standin_page_owners()
            written = []
            for i, row in enumerate(rows):
                changed = [layer for layer, b in before.items() if not torch.equal(b[i], pool.index_k_with_scale_buffer[layer][row])]
                written.append({"page": row, "owners": owners.get(row, []), "changed_layers": changed})
            entry["written_pages"] = written
        else:
            entry["written_pages"] = [{"page": final // ps, "owners": self._standin_page_owners().get(final // ps, [])}]
        self.standin_record["moves"].append(entry)

    def _standin_page_owners(self) -> dict:
        """page -> [{"rid", "state"}] over every request holding pages now."""
        r2t = self.req_to_token_pool.req_to_token
        ps = self.page_size
        out = {}
        groups = [("running", self.running_batch.reqs), ("waiting", self.waiting_queue),
                  ("transfer", [d.req for d in self.disagg_decode_transfer_queue.queue])]
        for state, reqs in groups:
            for req in reqs:
                rpi = req_pool_index(req)
                if rpi is None:
                    continue
                for page in sorted({int(s) // ps for s in r2t[rpi, : req.standin_alloc_len].tolist()}):
                    out.setdefault(page, []).append({"rid": req.rid, "state": state})
        return out

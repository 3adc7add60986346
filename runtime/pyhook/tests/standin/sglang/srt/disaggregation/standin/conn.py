"""The stand-in's transfer backend (in place of mooncake/nixl RDMA).

The prefill side's ``StandinKVSender.send(page_indices)`` copies those pages
(index-K page rows of every layer with rows, by the pool's
``standin_index_rows()``: on DeepSeek-V4 the C4 indexer's rows by full page id;
main-KV slots of every layer) into a
message for every decode rank's ``multiprocessing`` queue; the decode side's
``StandinKVManager.pump()`` lands messages into the pages its receiver was
initialised with (different slots from the prefill side's), in page-table
order. The last message carries the first output token (the metadata buffer).

Fault ``transfer-corrupt``: when landing the configured room's page-table entry
on the configured rank, the manager XORs 0xFF into 16 bytes (the K bytes of the
page's first token) of the configured layer, and records what it did.
"""

from __future__ import annotations

import queue as queue_mod
from typing import Dict, List, Optional

import torch

from sglang.srt.disaggregation.base.conn import BaseKVReceiver, BaseKVSender, KVPoll

CORRUPT_BYTES = 16


def _to_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _from_bytes(b: bytes, dtype, shape) -> torch.Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.uint8).view(dtype).view(shape)


class StandinKVManager:
    def __init__(self, pool, page_size: int, rank: int, outboxes: Optional[List] = None, inbox=None, corrupt: Optional[dict] = None):
        self.pool = pool
        self.page_size = page_size
        self.rank = rank
        self.outboxes = outboxes or []
        self.inbox = inbox
        self.corrupt = corrupt
        self.receivers: Dict[int, "StandinKVReceiver"] = {}
        self.corrupted: List[dict] = []

    # prefill side -----------------------------------------------------------
    def post(self, room: int, start_entry: int, pages: List[int], is_last: bool, output_id: Optional[int]) -> None:
        ps = self.page_size
        idx = torch.tensor(pages, dtype=torch.int64)
        slots = (idx[:, None] * ps + torch.arange(ps)[None, :]).view(-1)
        index_rows = []
        for _, buf in self.pool.standin_index_rows():
            index_rows.append(None if buf.shape[0] == 0 else _to_bytes(buf[idx]))
        kv_rows = [_to_bytes(buf[slots]) for buf in self.pool.standin_kv_buffers]
        msg = {"room": room, "start": start_entry, "n": len(pages), "index": index_rows, "kv": kv_rows,
               "last": is_last, "output_id": output_id, "src_pages": list(pages)}
        for q in self.outboxes:
            q.put(msg)

    # decode side ------------------------------------------------------------
    def pump(self) -> None:
        if self.inbox is None:
            return
        while True:
            try:
                msg = self.inbox.get_nowait()
            except queue_mod.Empty:
                return
            self._land(msg)

    def _land(self, msg: dict) -> None:
        rcv = self.receivers.get(msg["room"])
        if rcv is None:
            raise RuntimeError("transfer for unknown bootstrap_room %s on decode rank %d" % (msg["room"], self.rank))
        ps, n = self.page_size, msg["n"]
        dst = rcv.kv_indices[msg["start"]: msg["start"] + n]
        if len(dst) != n:
            raise RuntimeError("room %s: %d pages sent from entry %d, receiver holds %d pages"
                               % (msg["room"], n, msg["start"], len(rcv.kv_indices)))
        idx = torch.tensor(dst, dtype=torch.int64)
        slots = (idx[:, None] * ps + torch.arange(ps)[None, :]).view(-1)
        for (layer, buf), rows in zip(self.pool.standin_index_rows(), msg["index"]):
            if rows is None or buf.shape[0] == 0:
                continue
            buf[idx] = _from_bytes(rows, torch.uint8, (n, buf.shape[1]))
        for buf, rows in zip(self.pool.standin_kv_buffers, msg["kv"]):
            buf[slots] = _from_bytes(rows, buf.dtype, (n * ps, buf.shape[1]))
        c = self.corrupt
        if c and c["room"] == msg["room"] and c["rank"] == self.rank and msg["start"] <= c["entry"] < msg["start"] + n:
            page = dst[c["entry"] - msg["start"]]
            buf = dict(self.pool.standin_index_rows())[c["layer"]]
            buf[page, :CORRUPT_BYTES] ^= 0xFF
            self.corrupted.append({"room": c["room"], "layer": c["layer"], "entry": c["entry"], "rank": self.rank,
                                   "decode_page": int(page), "prefill_page": int(msg["src_pages"][c["entry"] - msg["start"]]),
                                   "bytes": [0, CORRUPT_BYTES]})
        rcv.received += n
        rcv.status = KVPoll.Transferring
        if msg["last"]:
            rcv.output_id = msg["output_id"]
            rcv.status = KVPoll.Success


class StandinKVSender(BaseKVSender):
    def __init__(self, mgr: StandinKVManager, bootstrap_addr: str, bootstrap_room: int, dest_tp_ranks=None, pp_rank: int = 0):
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room
        self.num_kv_indices = 0
        self.curr_idx = 0
        self.output_id = None
        self.status = KVPoll.Bootstrapping

    def init(self, num_kv_indices: int, aux_index=None):
        self.num_kv_indices = num_kv_indices
        self.status = KVPoll.WaitingForInput

    def send(self, kv_indices, state_indices=None):
        pages = [int(p) for p in kv_indices]
        is_last = self.curr_idx + len(pages) >= self.num_kv_indices
        self.kv_mgr.post(self.bootstrap_room, self.curr_idx, pages, is_last, self.output_id if is_last else None)
        self.curr_idx += len(pages)
        self.status = KVPoll.Success if is_last else KVPoll.Transferring

    def poll(self) -> KVPoll:
        return self.status


class StandinKVReceiver(BaseKVReceiver):
    def __init__(self, mgr: StandinKVManager, bootstrap_addr: str, bootstrap_room: int, prefill_dp_rank=None):
        self.kv_mgr = mgr
        self.bootstrap_room = bootstrap_room
        self.kv_indices: List[int] = []
        self.received = 0
        self.output_id = None
        self.status = KVPoll.Bootstrapping
        mgr.receivers[bootstrap_room] = self

    def init(self, kv_indices, aux_index=None, state_indices=None):
        self.kv_indices = [int(p) for p in kv_indices]
        self.status = KVPoll.WaitingForInput

    def poll(self) -> KVPoll:
        self.kv_mgr.pump()
        return self.status


class StandinGroup:
    """The decode TP ranks' gloo group stand-in: an element-wise min all-reduce
    over a shared int array, fenced by a barrier (every rank must call it with
    lists of the same length, as with SGLang's poll_and_all_reduce)."""

    def __init__(self, rank: int, size: int, barrier=None, array=None, timeout: float = 60.0):
        self.rank = rank
        self.size = size
        self.barrier = barrier
        self.array = array
        self.timeout = timeout

    def all_reduce_min(self, values: List[int]) -> List[int]:
        if self.size == 1 or not values:
            return list(values)
        width = len(self.array) // self.size
        if len(values) > width:
            raise RuntimeError("all_reduce_min: %d values, group array holds %d per rank" % (len(values), width))
        base = self.rank * width
        for i, v in enumerate(values):
            self.array[base + i] = int(v)
        self.barrier.wait(self.timeout)
        out = [min(self.array[r * width + i] for r in range(self.size)) for i in range(len(values))]
        self.barrier.wait(self.timeout)
        return out

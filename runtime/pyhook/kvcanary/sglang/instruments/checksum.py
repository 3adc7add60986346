"""Room checksums of index-K across a PD transfer (checksum/SPEC.md v1.1).

Three stages, one record each per room and rank:
- "sent" (prefill): AFTER send_kv_chunk(req, last_chunk=True);
- "transferred" (decode): AFTER DecodeTransferQueue.pop_transferred, for the
  requests it returns (the bytes as they landed);
- "admitted" (decode): BEFORE get_new_prebuilt_batch, for the requests it is
  about to admit (after any host restore, before the first decode step).

The digest covers len(req.origin_input_ids) tokens in position order (on
DeepSeek-V4: their n // 4 C4 entries, SPEC §10; seq_len then counts entries),
every non-empty layer buffer by model layer id, on the pool's device; xxh3 is
sent as 0 ("not computed"), page_bsum localizes a mismatch.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from ... import digest as D
from ...emitter import dec64, hex64
from .. import access as A

log = logging.getLogger("kvcanary")

ZERO = "0x0000000000000000"
SEEN_MAX = 65536  # (room, stage, rank) remembered to digest "admitted" once


def not_held(req) -> bool:
    """req.kv.holds_kv is False: its index-K is in host memory, not on the
    device (newer SGLang; an absent attribute means held)."""
    kv = getattr(req, "kv", None)
    return kv is not None and getattr(kv, "holds_kv", True) is False


class Checksum:
    def __init__(self, b):
        self.b = b
        self._seen: OrderedDict = OrderedDict()
        self._warned = set()
        self.skipped_not_held = 0  # digests skipped: index-K still on the host

    # -- hooks ------------------------------------------------------------
    def on_send_kv_chunk(self, result, sched, *args, **kwargs):
        req = args[0] if args else kwargs.get("req")
        last = args[1] if len(args) > 1 else kwargs.get("last_chunk", False)
        if not last or req is None:
            return
        rank = A.rank_of(sched)
        self.b.note_source(A.role_of(sched) or "prefill", rank)
        self.digest(sched, req, "prefill", "sent", rank)

    def on_pop_transferred(self, result, queue, *args, **kwargs):
        if not result:
            return
        sched = getattr(queue, "scheduler", None)
        rank = A.rank_of(queue)
        self.b.note_source(A.role_of(queue) or "decode", rank)
        for req in result:
            if not_held(req):
                # Received into host memory (newer SGLang): restored to the
                # device only inside get_new_prebuilt_batch. Digesting the
                # device slots now would be a false mismatch.
                self.skipped_not_held += 1
                continue
            self.digest(sched, req, "decode", "transferred", rank)

    def on_prebuilt(self, sched, *args, **kwargs):
        running = args[0] if args else kwargs.get("running_batch")
        waiting = list(getattr(sched, "waiting_queue", None) or ())
        if not waiting:
            return
        n = len(waiting)
        try:
            cap = int(sched.req_to_token_pool.size)
            mrr = getattr(sched, "max_running_requests", None)
            if isinstance(mrr, int) and mrr > 0:
                cap = min(cap, mrr)
            in_batch = running.batch_size() if running is not None and hasattr(running, "batch_size") else 0
            n = max(0, min(n, cap - int(in_batch)))
        except Exception:  # noqa: BLE001 - without the bound, digest all waiting (once each)
            pass
        rank = A.rank_of(sched)
        self.b.note_source(A.role_of(sched) or "decode", rank)
        for req in waiting[:n]:
            if not_held(req):
                # Newer SGLang restores host-received requests inside
                # get_new_prebuilt_batch: before it their device index-K is not
                # there yet, and a digest would be a false mismatch.
                self.skipped_not_held += 1
                continue
            key = (getattr(req, "bootstrap_room", None), getattr(req, "rid", None), rank)
            if key in self._seen:
                continue
            if not self.digest(sched, req, "decode", "admitted", rank):
                continue  # skipped (no pool index yet, …): tried again on the next call
            self._seen[key] = True
            if len(self._seen) > SEEN_MAX:
                self._seen.popitem(last=False)

    # -- the digest ---------------------------------------------------------
    def _warn(self, key, msg, *a):
        if key not in self._warned:
            self._warned.add(key)
            log.warning("kvcanary: checksum: " + msg, *a)

    def digest(self, sched, req, side: str, stage: str, rank: int) -> bool:
        """Enqueue the digest of req's prompt index-K; False when skipped."""
        room = getattr(req, "bootstrap_room", None)
        if room is None:
            return False
        pool = A.kv_pool_of_scheduler(sched) if sched is not None else None
        ik = A.find_index_k(pool)
        if not ik.buffers:
            self._warn("nobuf", "no usable index-K on the pool (%s: %s); room checksums are off",
                       ik.pool_class or type(pool).__name__, ik.reason)
            return False
        idx = A.req_pool_idx(req)
        if idx is None:
            self._warn("idx", "request %s has no req_pool_idx at stage %s; skipped",
                       getattr(req, "rid", "?"), stage)
            return False
        n = A.prompt_len(req)
        # DSA: the prompt's tokens; V4: its n // 4 C4 entries (SPEC §10), in
        # position order, on model layer ids.
        slots = ik.slots(sched.req_to_token_pool.req_to_token, idx, n)
        count = ik.entries(n)
        pages_on = bool(self.b.settings.checksum_pages)
        rd = D.room_digest(ik.buffers, slots, D.LAYOUTS[ik.layout], page_digests=pages_on)
        layers = list(rd.layers)
        ctx = {"room": dec64(int(room)), "side": side, "seq_len": count, "pages": (count + A.PAGE - 1) // A.PAGE,
               "dtype": ik.layout, "request": str(getattr(req, "rid", "")), "rank": rank,
               "stage": stage, "layers": layers}
        tensors = {"layer_bsum": rd.layer_bsum, "bsum": rd.bsum}
        if pages_on and getattr(rd, "page_bsum", None) is not None:
            tensors["page_bsum"] = rd.page_bsum

        def build(h):
            body = dict(ctx)
            body["bsum"] = hex64(int(h["bsum"].reshape(-1)[0]))
            body["xxh3"] = ZERO
            body["layer_bsum"] = [hex64(v) for v in h["layer_bsum"].reshape(-1).tolist()]
            if "page_bsum" in h:
                body["page_bsum"] = [hex64(v) for v in h["page_bsum"].reshape(-1).tolist()]
            return [("room.checksum", body)]

        return self.b.deferred.submit(tensors, build, "checksum." + stage)

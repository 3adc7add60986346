"""The replay canary (canary/SPEC.md) around every decode forward
(ModelRunner._forward_raw: a graph replay or, above the largest captured
bucket, eager_runner.execute).

On a sampled step (model_runner.forward_pass_id % KVCANARY_CANARY_EVERY == 0,
and the step after it when N > 1, so that a "between" window of two
consecutive forwards exists; the key is the same on every TP rank):

- pages: the policy's pages (`live`: the page-table entries of the batch's
  requests up to seq_len, the expected pages out_cache_loc // 64 (DeepSeek-V4:
  out_cache_loc // 256 for rows with seq_len % 4 == 0, else page 0), page 0, and
  the pages of requests still receiving a PD transfer; `all`: every page;
  `sweep:N`: live plus slice step % N of the pool);
- owners: a device-side map page -> request built from req_to_token of the
  running requests (and of transferring ones), taken before the replay;
- page digests (digest.page_bsums, layer-combined) before and after the
  original call, all enqueued on the current stream; `Deferred` brings them
  to the host off the step thread, where the events are built;
- phase "replay": the changes across this call, `expected` from
  forward_batch.out_cache_loc (the allocator's bookkeeping, read before the
  graph copies it into its static buffer), `padding` [0] when raw_bs < bucket;
- phase "between": this step's before-snapshot against the previous check's
  after-snapshot, when that check was the previous forward (forward_pass_id
  one less), for pages in both sets except those of a running request that
  did not own them running at the previous check (it acquired them in the
  window, and its transfer or restore wrote them legitimately); `expected` =
  the correct target pages tgt_loc // 64 of the IndexKeyCache.move calls seen
  in the window, among the pages compared; `transfer` = transfer pages at
  either check. Off on DeepSeek-V4 (reported as "not applicable"): V4 has
  no move (sglang-dsv4.md §5). The `expected` pages assume the fixed
  IndexKeyCache.move, which writes pages tgt_loc // 64; SGLang versions whose
  move writes page rows numbered by token ids (index_key_cache.py@03ac438a,
  the 2026-08 source) show those writes as unexpected, which is the bug the
  phase exists to show (README "Which move the between phase expects", D7).

It never judges: the Go canary classifies (canary/SPEC.md §2).
"""

from __future__ import annotations

import logging
import weakref

import torch

from ... import digest as D
from ...emitter import hex64
from .. import access as A
from ..hooks import step_of

log = logging.getLogger("kvcanary")
PAGE = A.PAGE
MOVES_MAX = 4096  # IndexKeyCache.move calls remembered between two forwards
NO_MOVE = ("not applicable: %s has no IndexKeyCache.move (DeepSeek-V4), so no writer between forwards "
           "has pages to expect")


def entry_pages(r2t, idx: torch.Tensor, lens: torch.Tensor, max_len: int, page_tokens: int = PAGE) -> torch.Tensor:
    """Pages of page-table entries [0, ceil(len/page_tokens)) of rows `idx`:
    int64 (n, E), -1 where an entry is past the row's length. Entry j's page
    is read at its first slot (tokens page_tokens·j.. share a page). An
    index-K page row has the id of its KV page: page_tokens is 64 on DSA, 256
    on DeepSeek-V4 (64 C4 slots)."""
    n = idx.shape[0]
    e = (max_len + page_tokens - 1) // page_tokens
    if n == 0 or e == 0:
        return torch.empty((n, 0), dtype=torch.int64, device=r2t.device)
    cols = torch.arange(e, device=r2t.device, dtype=torch.int64) * page_tokens
    slots = r2t[idx.to(r2t.device).long().unsqueeze(1), cols.unsqueeze(0)].long()
    valid = cols.unsqueeze(0) < lens.to(r2t.device).long().unsqueeze(1)
    return torch.where(valid, torch.div(slots, page_tokens, rounding_mode="floor"), torch.full_like(slots, -1))


def compact(pages: torch.Tensor, total: int | None) -> torch.Tensor:
    """Valid (>= 0) entries first. With `total` (the count, known on the host)
    the result is exactly those entries, without a device sync; without it
    invalid entries become page 0 (digested in vain, never reported)."""
    flat = pages.reshape(-1)
    if total is not None:
        key = (flat < 0).to(torch.int8)
        order = torch.sort(key, stable=True).indices
        return flat[order[:total]]
    return flat.clamp(min=0)


class Canary:
    def __init__(self, b):
        self.b = b
        self._moves: list = []
        self._moves_over = False  # the window saw more than MOVES_MAX moves
        self._queues = weakref.WeakSet()
        self._strong: list = []
        self._prev = None  # host state of the last check (touched only by build)
        self._warned = set()
        self._count = 0  # fallback step key when forward_pass_id is absent

    def _warn(self, key, msg, *a):
        if key not in self._warned:
            self._warned.add(key)
            log.warning("kvcanary: canary: " + msg, *a)

    # -- writers between forwards -------------------------------------------------
    def on_move(self, cache, *args, **kwargs):
        """BEFORE IndexKeyCache.move(tgt_loc, src_loc): the pages it should write.
        Only the canary's forward hook drains the list, so nothing is kept
        while it is off, and a window keeps at most MOVES_MAX calls (past
        that the window is not judged: its expected set would be incomplete)."""
        if not self.b.feature_on("canary.replay"):
            return
        if len(self._moves) >= MOVES_MAX:
            self._moves_over = True
            return
        tgt = args[0] if args else kwargs.get("tgt_loc")
        if isinstance(tgt, torch.Tensor):
            self._moves.append(torch.div(tgt.reshape(-1).long(), PAGE, rounding_mode="floor"))
        elif tgt is not None:  # a host list: kept as ints, copied pinned in pre()
            self._moves.append([int(v) // PAGE for v in tgt])

    def on_pop_transferred(self, result, queue, *args, **kwargs):
        try:
            self._queues.add(queue)
        except TypeError:  # not weak-referenceable: hold it (one queue per scheduler)
            if not any(q is queue for q in self._strong):
                self._strong.append(queue)

    def _transfer_reqs(self):
        """(rid, req_pool_idx, prompt length) of requests still receiving."""
        out, seen = [], set()
        for q in list(self._queues) + self._strong:
            items = list(getattr(q, "queue", None) or ())
            sched = getattr(q, "scheduler", None)
            pre = getattr(sched, "disagg_decode_prealloc_queue", None) if sched is not None else None
            items += list(getattr(pre, "queue", None) or ())
            for d in items:
                req = getattr(d, "req", d)
                idx = A.req_pool_idx(req)
                rid = str(getattr(req, "rid", ""))
                if idx is None or rid in seen:
                    continue
                seen.add(rid)
                out.append((rid, idx, A.prompt_len(req)))
        return out

    # -- around the replay ----------------------------------------------------------
    def sampled(self, step: int) -> bool:
        n = self.b.settings.canary_every
        return step % n == 0 or (n > 1 and step % n == 1)

    def pre(self, runner, fb):
        moves, self._moves = self._moves, []
        moves_over, self._moves_over = self._moves_over, False
        step = step_of(runner)
        if step < 0:
            step = self._count
        self._count += 1
        if not self.sampled(step):
            return None
        mr = runner.model_runner
        ik = A.find_index_k(getattr(mr, "token_to_kv_pool", None))
        bufs = ik.buffers
        if not bufs:
            self._warn("nobuf", "no usable index-K on model_runner.token_to_kv_pool (%s); canary off", ik.reason)
            return None
        if ik.kind == "v4" and self.b.feature_on("canary.between"):
            # V4 has no IndexKeyCache.move (sglang-dsv4.md §5): there is no
            # writer between forwards whose pages the phase could expect.
            self.b.disable(("canary.between",), NO_MOVE % ik.pool_class)
        pt = ik.page_tokens
        num_pages = int(bufs[0][1].shape[0])
        dev = bufs[0][1].device
        r2t = mr.req_to_token_pool.req_to_token
        bs = int(fb.batch_size)
        idx = fb.req_pool_indices[:bs]
        seq = fb.seq_lens[:bs]
        seq_cpu = getattr(fb, "seq_lens_cpu", None)
        if seq_cpu is None and not seq.is_cuda:
            seq_cpu = seq
        if seq_cpu is None:
            self._warn("seqcpu", "forward_batch has no seq_lens_cpu: reading seq_lens synchronizes "
                       "with the device once per checked step")
            seq_cpu = seq.cpu()
        seq_host = [int(v) for v in seq_cpu[:bs].tolist()]
        rids = [str(r) for r in list(getattr(fb, "rids", None) or [])[:bs]]
        if len(rids) != bs:
            rids = ["row%d" % i for i in range(bs)]
        live = entry_pages(r2t, idx, seq, max(seq_host, default=0), pt)
        live_total = sum((s + pt - 1) // pt for s in seq_host)
        treqs = self._transfer_reqs()
        if treqs:
            tl = [t[2] for t in treqs]
            tpages = entry_pages(r2t, A.host_ints([t[1] for t in treqs], r2t.device),
                                 A.host_ints(tl, r2t.device), max(tl), pt)
            t_total = sum((s + pt - 1) // pt for s in tl)
        else:
            tpages = torch.empty((0, 0), dtype=torch.int64, device=r2t.device)
            t_total = 0
        # DSA: out_cache_loc // 64; V4: the C4 slot // 64 of rows with
        # seq_len % 4 == 0, page 0 for the others (ik.written_slots)
        expected = torch.div(ik.written_slots(fb.out_cache_loc, fb.seq_lens, getattr(fb, "positions", None)), PAGE, rounding_mode="floor").to(dev)
        names = rids + [t[0] for t in treqs]
        # Owners before the replay: transferring requests first, running ones
        # last, so a page held by both maps to the running request.
        owner = torch.full((num_pages + 1,), -1, dtype=torch.int32, device=dev)
        for pages, base in ((tpages, bs), (live, 0)):
            if pages.numel() == 0:
                continue
            rows = (torch.arange(pages.shape[0], device=pages.device, dtype=torch.int32) + base)
            rows = rows.unsqueeze(1).expand_as(pages).reshape(-1)
            p = pages.reshape(-1).to(dev)
            tgt = torch.where((p >= 0) & (p < num_pages), p, torch.full_like(p, num_pages))
            owner.index_put_((tgt,), rows.to(dev))
        live_c = compact(live, live_total).to(dev)
        t_c = compact(tpages, t_total).to(dev)
        policy = self.b.settings.canary_policy
        zero = torch.zeros(1, dtype=torch.int64, device=dev)
        if policy == "all":
            cand = torch.arange(num_pages, dtype=torch.int64, device=dev)
        else:
            parts = [live_c, t_c, expected.clamp(0, num_pages - 1), zero]
            n = self.b.settings.canary_sweep
            if n:
                i = step % n
                lo, hi = i * num_pages // n, (i + 1) * num_pages // n
                parts.append(torch.arange(lo, hi, dtype=torch.int64, device=dev))
            cand = torch.cat(parts).clamp(0, num_pages - 1)
        before = D.page_bsums(bufs, cand)
        return {"step": step, "bufs": bufs, "cand": cand, "before": before, "owner": owner[cand],
                "live": live_c, "transfer": t_c, "expected": expected, "names": names,
                "rids": rids, "bs": bs, "num_pages": num_pages, "policy": policy,
                "moves": move_pages(moves, dev), "moves_over": moves_over}

    def post(self, st, runner, fb, result):
        after = D.page_bsums(st["bufs"], st["cand"])
        raw_bs = getattr(runner, "raw_bs", None)
        bucket = getattr(runner, "bs", None)
        raw_bs = raw_bs if isinstance(raw_bs, int) else st["bs"]
        padded = isinstance(bucket, int) and bucket > raw_bs
        between = self.b.feature_on("canary.between")
        tensors = {k: st[k] for k in ("cand", "before", "owner", "live", "transfer", "expected", "moves")}
        tensors["after"] = after
        ctx = {k: st[k] for k in ("step", "names", "rids", "num_pages", "policy", "moves_over")}

        def build(h):
            return self._build(h, ctx, padded, between)

        self.b.deferred.submit(tensors, build, "canary")

    # -- host side (worker thread on CUDA) ------------------------------------------------
    def _build(self, h, ctx, padded: bool, between_on: bool):
        step, names, rids = ctx["step"], ctx["names"], ctx["rids"]
        running = set(rids)

        def name(o):
            return names[o] if 0 <= o < len(names) else ""

        pages = {}
        for p, b, a, o in zip(h["cand"].tolist(), h["before"].tolist(), h["after"].tolist(),
                              h["owner"].tolist()):
            pages[p] = (b, a, name(o))
        live_set = set(h["live"].tolist())
        transfer_set = set(h["transfer"].tolist())
        expected = sorted(set(h["expected"].tolist()))
        base = {"policy": ctx["policy"], "pages_total": ctx["num_pages"], "running": rids}
        out = []
        prev = self._prev
        if between_on and prev is not None and prev["step"] == step - 1 and not ctx["moves_over"]:
            changed, checked = [], set()
            for p in sorted(pages):
                if p not in prev["after"]:
                    continue
                own = pages[p][2]
                if own in running and not (prev["owner"].get(p) == own and own in prev["running"]):
                    continue  # a running request that acquired it in the window: its transfer or restore wrote it
                checked.add(p)
                if pages[p][0] != prev["after"][p]:
                    changed.append({"page": p, "owner": own,
                                    "before": hex64(prev["after"][p]), "after": hex64(pages[p][0])})
            body = dict(base, step=step, phase="between", pages_checked=len(checked),
                        # only pages compared here: an unchecked page cannot show its store
                        expected=sorted(set(h["moves"].tolist()) & checked),
                        transfer=sorted(transfer_set | prev["transfer"]),
                        live_pages=len(live_set), live_checked=len(live_set & checked))
            if changed:
                body["changed"] = changed
            out.append(("canary.pages", _clean(body)))
        changed = [{"page": p, "owner": pages[p][2], "before": hex64(pages[p][0]), "after": hex64(pages[p][1])}
                   for p in sorted(pages) if pages[p][0] != pages[p][1]]
        body = dict(base, step=step, phase="replay", pages_checked=len(pages), expected=expected,
                    transfer=sorted(transfer_set), live_pages=len(live_set),
                    live_checked=len(live_set & set(pages)))
        if padded:
            body["padding"] = [0]
        if changed:
            body["changed"] = changed
        out.append(("canary.pages", _clean(body)))
        self._prev = {"step": step, "after": {p: v[1] for p, v in pages.items()},
                      "owner": {p: v[2] for p, v in pages.items()}, "transfer": transfer_set,
                      "running": running}
        return out


def move_pages(moves: list, dev) -> torch.Tensor:
    """The pages of a window's move calls on `dev`: device tensors copied
    non-blocking, host ints in one pinned copy (A.host_ints)."""
    parts = [m.to(dev, non_blocking=True) for m in moves if isinstance(m, torch.Tensor)]
    host = [v for m in moves if not isinstance(m, torch.Tensor) for v in m]
    if host:
        parts.append(A.host_ints(host, dev))
    if not parts:
        return torch.empty(0, dtype=torch.int64, device=dev)
    return torch.cat(parts)


def _clean(body: dict) -> dict:
    """Drop empty lists (omitempty on the Go side) except `running`."""
    return {k: v for k, v in body.items() if not (isinstance(v, list) and not v and k != "running")}

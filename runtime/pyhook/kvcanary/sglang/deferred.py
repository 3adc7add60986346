"""Finishing device work off the step thread.

An instrument enqueues its digests on the device (torch.cuda.current_stream()
on CUDA), then hands the result tensors and a `build` function here. On CUDA,
`submit` copies them into pinned host memory with non_blocking=True, records a
CUDA event and queues the lot; a daemon worker thread waits on the event and
calls `build(host_tensors)`, which returns the (kind, body) pairs to emit. The
step thread never synchronizes with the device. On the CPU the same `build`
runs at once in the caller (there is nothing to wait for).

The queue is bounded: when the worker falls behind, submissions are dropped and
counted (`stats["dropped"]`), never waited for.
"""

from __future__ import annotations

import logging
import queue
import threading

import torch

log = logging.getLogger("kvcanary")


class Deferred:
    def __init__(self, emit, maxsize: int = 256):
        self._emit = emit  # emit(kind, body) -> bool
        self._q: queue.Queue = queue.Queue(maxsize=maxsize)
        self._thr = None
        self._lock = threading.Lock()
        self._warned = set()
        self.stats = {"submitted": 0, "dropped": 0, "built": 0, "errors": 0}

    def submit(self, tensors: dict, build, site: str = "") -> bool:
        """Queue `build(host)` for when `tensors` are on the host. Never raises
        and never blocks. Returns False when the work was dropped."""
        self.stats["submitted"] += 1
        if not self._on_device(tensors):
            host = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in tensors.items()}
            self._run(build, host, site)
            return True
        if self._q.full():
            self.stats["dropped"] += 1
            return False
        try:
            ev, host = self._stage(tensors)
            # The device tensors ride along until the event completed, so their
            # memory is not handed to another stream while the copy is pending.
            self._q.put_nowait((ev, host, build, site, tensors))
        except queue.Full:
            self.stats["dropped"] += 1
            return False
        except Exception as e:  # noqa: BLE001
            self._error(site, e)
            return False
        self._ensure_worker()
        return True

    @staticmethod
    def _on_device(tensors) -> bool:
        return any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors.values())

    @staticmethod
    def _stage(tensors):
        """Enqueue the device->pinned-host copies and record an event after
        them on the current stream; returns (event, host tensors)."""
        host, dev = {}, None
        for k, v in tensors.items():
            if isinstance(v, torch.Tensor) and v.is_cuda:
                h = torch.empty(v.shape, dtype=v.dtype, device="cpu", pin_memory=True)
                h.copy_(v.detach(), non_blocking=True)
                host[k] = h
                dev = v.device
            else:
                host[k] = v
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(dev))
        return ev, host

    def _ensure_worker(self):
        if self._thr is not None:
            return
        with self._lock:
            if self._thr is None:
                self._thr = threading.Thread(target=self._work, name="kvcanary-deferred", daemon=True)
                self._thr.start()

    def _work(self):
        while True:
            item = self._q.get()
            if item is None:
                self._q.task_done()
                return
            ev, host, build, site, _keep = item
            try:
                ev.synchronize()  # this thread waits, the step thread does not
                self._run(build, host, site)
            finally:
                self._q.task_done()

    def _run(self, build, host, site):
        try:
            out = build(host) or ()
            for kind, body in out:
                self._emit(kind, body)
            self.stats["built"] += 1
        except Exception as e:  # noqa: BLE001
            self._error(site, e)

    def _error(self, site, e):
        self.stats["errors"] += 1
        if site not in self._warned:
            self._warned.add(site)
            log.warning("kvcanary: building events at %s failed (%s: %s); counting further errors "
                        "silently", site or "?", type(e).__name__, e, exc_info=True)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued submission was built (tests, shutdown)."""
        if self._thr is None:
            return
        if timeout is None:
            self._q.join()
            return
        done = threading.Event()

        def waiter():
            self._q.join()
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        done.wait(timeout)

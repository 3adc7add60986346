"""Finishing device work off the step thread.

An instrument enqueues its digests on the device (torch.cuda.current_stream()
on CUDA), then hands the result tensors and a `build` function here. On CUDA,
`submit` copies them into pinned host memory with non_blocking=True, records a
CUDA event and queues the lot; a daemon worker thread waits on the event and
calls `build(host_tensors)`, which returns the (kind, body) pairs to emit. The
step thread never synchronizes with the device. On the CPU the same `build`
runs at once in the caller (there is nothing to wait for).

The queue is bounded in submissions (`maxsize`) and in the pinned host memory
they hold (`max_bytes`, 64 MiB by default: the staged tensors' exact size): when
the worker falls behind, submissions are dropped and counted
(`stats["dropped"]`, and by site in `dropped_sites`), never waited for. A count
alone let 256 submissions of large logits pin gigabytes.
"""

from __future__ import annotations

import logging
import queue
import threading

import torch

log = logging.getLogger("kvcanary")


MAX_BYTES = 64 << 20  # default bound of the pinned host memory queued submissions hold


class Deferred:
    def __init__(self, emit, maxsize: int = 256, max_bytes: int = MAX_BYTES):
        self._emit = emit  # emit(kind, body) -> bool
        self._q: queue.Queue = queue.Queue(maxsize=maxsize)
        self.max_bytes = max(1, int(max_bytes))
        self._pinned = 0  # bytes of host copies queued or being built
        self._thr = None
        self._lock = threading.Lock()
        self._warned = set()
        self.stats = {"submitted": 0, "dropped": 0, "built": 0, "errors": 0}
        self.dropped_sites: dict = {}  # site -> submissions dropped (queue full in count or bytes)

    def submit(self, tensors: dict, build, site: str = "") -> bool:
        """Queue `build(host)` for when `tensors` are on the host. Never raises
        and never blocks. Returns False when the work was dropped."""
        self.stats["submitted"] += 1
        if not self._on_device(tensors):
            host = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in tensors.items()}
            self._run(build, host, site)
            return True
        size = self._device_bytes(tensors)
        with self._lock:
            if self._q.full() or self._pinned + size > self.max_bytes:
                self._drop(site)
                return False
            self._pinned += size
        try:
            ev, host = self._stage(tensors)
            # The device tensors ride along until the event completed, so their
            # memory is not handed to another stream while the copy is pending.
            self._q.put_nowait((ev, host, build, site, tensors, size))
        except queue.Full:
            with self._lock:
                self._pinned -= size
                self._drop(site)
            return False
        except Exception as e:  # noqa: BLE001
            with self._lock:
                self._pinned -= size
            self._error(site, e)
            return False
        self._ensure_worker()
        return True

    def _drop(self, site) -> None:
        self.stats["dropped"] += 1
        self.dropped_sites[site or "?"] = self.dropped_sites.get(site or "?", 0) + 1

    @property
    def pinned_bytes(self) -> int:
        """Host memory the queued submissions hold (exact: their tensors' sizes)."""
        return self._pinned

    @staticmethod
    def _is_device(t) -> bool:
        return isinstance(t, torch.Tensor) and t.is_cuda

    def _device_bytes(self, tensors) -> int:
        """The pinned host memory staging tensors takes: exact."""
        return sum(t.numel() * t.element_size() for t in tensors.values() if self._is_device(t))

    def _on_device(self, tensors) -> bool:
        return any(self._is_device(t) for t in tensors.values())

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
            ev, host, build, site, _keep, size = item
            try:
                ev.synchronize()  # this thread waits, the step thread does not
                self._run(build, host, site)
            finally:
                item = host = _keep = None
                with self._lock:
                    self._pinned -= size
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

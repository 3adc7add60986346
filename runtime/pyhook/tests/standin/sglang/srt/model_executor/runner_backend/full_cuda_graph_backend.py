"""Capture/replay of decode "graphs" (stand-in of
``sglang.srt.model_executor.runner_backend.full_cuda_graph_backend``).

There is no CUDA here: a captured graph is the runner's static-buffer forward
plus the indexer capturer that was global at capture time; ``replay`` re-runs
it on the static buffers (filled by the runner's ``load_batch``) and returns
the static outputs (``self._outputs[shape_key]``), like a CUDA graph replay.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from sglang.srt.state_capturer.indexer_topk import get_global_indexer_capturer


class ShapeKey(NamedTuple):
    size: int


class _CapturedGraph:
    def __init__(self, fn: Callable, capturer):
        self._fn = fn
        self._capturer = capturer

    def replay(self):
        return self._fn(self._capturer)


class FullCudaGraphBackend:
    def __init__(self, cuda_graph_runner):
        self._cuda_graph_runner = cuda_graph_runner
        self._graphs = {}
        self._outputs = {}

    def capture(self, shape_key: ShapeKey, run_once: Callable) -> None:
        capturer = get_global_indexer_capturer()
        self._outputs[shape_key] = run_once(capturer)
        self._graphs[shape_key] = _CapturedGraph(run_once, capturer)

    def replay(self, shape_key: ShapeKey, static_forward_batch, **kwargs):
        self._graphs[shape_key].replay()
        return self._outputs[shape_key]

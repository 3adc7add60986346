"""Eager forward (stand-in of the model runner's eager path)."""

from __future__ import annotations


class EagerRunner:
    def __init__(self, model_runner):
        self.model_runner = model_runner

    def execute(self, forward_batch, pp_proxy_tensors=None):
        model = self.model_runner.model
        return model.forward(forward_batch.input_ids, forward_batch.positions, forward_batch)

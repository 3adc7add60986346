"""Transfer interfaces (stand-in of ``sglang.srt.disaggregation.base.conn``)."""

from __future__ import annotations

from enum import IntEnum


class KVPoll(IntEnum):
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class BaseKVSender:
    def init(self, num_kv_indices: int, aux_index=None):
        raise NotImplementedError

    def send(self, kv_indices, state_indices=None):
        raise NotImplementedError

    def poll(self) -> KVPoll:
        raise NotImplementedError


class BaseKVReceiver:
    def init(self, kv_indices, aux_index=None, state_indices=None):
        raise NotImplementedError

    def poll(self) -> KVPoll:
        raise NotImplementedError

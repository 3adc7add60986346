"""sglang.srt.disaggregation.base (stand-in)."""
from sglang.srt.disaggregation.base.conn import BaseKVReceiver, BaseKVSender, KVPoll  # noqa: F401

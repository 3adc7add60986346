"""sglang.srt (stand-in)."""

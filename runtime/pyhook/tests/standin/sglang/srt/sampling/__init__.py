"""sglang.srt.sampling (stand-in)."""

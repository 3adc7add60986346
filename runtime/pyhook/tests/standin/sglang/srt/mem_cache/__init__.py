"""sglang.srt.mem_cache (stand-in)."""

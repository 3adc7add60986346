"""sglang.srt.models (stand-in)."""

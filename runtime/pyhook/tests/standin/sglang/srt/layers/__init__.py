"""sglang.srt.layers (stand-in)."""

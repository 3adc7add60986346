"""sglang.srt.disaggregation (stand-in)."""

"""sglang.srt.disaggregation.standin (stand-in)."""

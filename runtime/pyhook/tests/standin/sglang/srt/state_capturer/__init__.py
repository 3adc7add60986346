"""sglang.srt.state_capturer (stand-in)."""

"""sglang.srt.model_executor.runner (stand-in)."""

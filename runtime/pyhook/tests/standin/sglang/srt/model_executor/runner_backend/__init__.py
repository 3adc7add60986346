"""sglang.srt.model_executor.runner_backend (stand-in)."""

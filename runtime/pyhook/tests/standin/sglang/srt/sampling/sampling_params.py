"""SamplingParams (stand-in; greedy only)."""


class SamplingParams:
    def __init__(self, max_new_tokens: int = 128, temperature: float = 0.0, **kwargs):
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature

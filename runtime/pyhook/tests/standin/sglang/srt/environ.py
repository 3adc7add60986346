"""Environment settings read through ``envs.NAME.get()``, as SGLang's
``sglang.srt.environ`` does (only the variables the stand-in reads)."""

import os


class _EnvVar:
    def __init__(self, name: str, default: str = ""):
        self.name = name
        self.default = default

    def get(self) -> str:
        return os.environ.get(self.name, self.default)

    def is_set(self) -> bool:
        return self.name in os.environ


class _Envs:
    SGLANG_PLUGINS = _EnvVar("SGLANG_PLUGINS")
    SGLANG_PLATFORM = _EnvVar("SGLANG_PLATFORM")
    SGLANG_FORCE_COARSE_WAR_BARRIER = _EnvVar("SGLANG_FORCE_COARSE_WAR_BARRIER", "0")


envs = _Envs()

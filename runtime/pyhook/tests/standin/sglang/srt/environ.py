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


class _EnvBool(_EnvVar):
    """A boolean variable: "true"/"1"/"yes"/"y" and "false"/"0"/"no"/"n" (any
    case); unset or anything else reads as the default."""

    def __init__(self, name: str, default: bool):
        super().__init__(name, "1" if default else "0")
        self.default_bool = default

    def get(self) -> bool:
        v = os.environ.get(self.name)
        if v is None:
            return self.default_bool
        v = v.lower()
        if v in ("true", "1", "yes", "y"):
            return True
        if v in ("false", "0", "no", "n"):
            return False
        return self.default_bool


class _Envs:
    SGLANG_PLUGINS = _EnvVar("SGLANG_PLUGINS")
    SGLANG_PLATFORM = _EnvVar("SGLANG_PLATFORM")
    SGLANG_FORCE_COARSE_WAR_BARRIER = _EnvVar("SGLANG_FORCE_COARSE_WAR_BARRIER", "0")
    # DeepSeek V4: on by default; read per process (the V4 stand-in model)
    SGLANG_OPT_USE_MULTI_STREAM_OVERLAP = _EnvBool("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP", True)


envs = _Envs()

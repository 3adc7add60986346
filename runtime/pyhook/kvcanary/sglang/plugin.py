"""The plugin route: `load()` is the entry point kvcanary declares in group
`sglang.srt.plugins` (pyproject.toml: kvcanary = "kvcanary.sglang.plugin:load").

SGLang's `load_plugins()` calls it in the launcher and at the top of every
scheduler process (when SGLANG_PLUGINS is unset or names "kvcanary"), then
`HookRegistry.apply_hooks()` patches what was registered. load() resolves every
target of the table itself first (a missing one disables only its features,
with one log line), then registers one hook callable per resolved target.

If the sitecustomize finder already patched targets in this process, load()
undoes those patches before registering: the plugin route wins, and a
function is never wrapped by both.
"""

from __future__ import annotations

import logging
import os

from . import hooks
from . import targets as T

log = logging.getLogger("kvcanary")

_loaded = False


def load() -> None:
    """Entry point; never raises (a failure logs one warning and leaves the
    engine unhooked)."""
    try:
        _load()
    except Exception as e:  # noqa: BLE001
        log.warning("kvcanary: plugin load failed (%s: %s); SGLang runs without kvcanary's hooks",
                    type(e).__name__, e, exc_info=True)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    b = hooks.get_binding()
    if not b.settings.enabled:
        log.debug("kvcanary: KVCANARY_ADDR unset; plugin does nothing")
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType  # type: ignore

    _loaded = True
    if b.settings.instrument("graphdiff"):
        os.environ["SGLANG_FORCE_COARSE_WAR_BARRIER"] = "1"
    from . import finder

    finder.uninstall(restore=True)
    hooks.ROUTE = "plugin"
    version = T.sglang_version()
    for t in T.TARGETS:
        if t.hooked:
            b.note_resolved(T.resolve(t), version)
    n = 0
    for t, res, fn in b.apply_features():
        HookRegistry.register(res.name, fn, HookType[res.hook or t.hook])
        n += 1
    log.info("kvcanary: registered %d hook(s) with SGLang %s's HookRegistry", n, version)

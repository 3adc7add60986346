"""SGLang's general plugin framework (stand-in of ``sglang.srt.plugins``).

``load_plugins()`` discovers entry points of group ``sglang.srt.plugins`` with
``importlib.metadata``, keeps only the names listed in ``SGLANG_PLUGINS``
(comma list) when that is set, loads and calls each (the callable registers
hooks with ``HookRegistry``), then applies the hooks. It is idempotent per
process; SGLang calls it in the launcher and at the top of
``run_scheduler_process`` (every spawned scheduler process).
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

from sglang.srt.environ import envs
from sglang.srt.plugins.hook_registry import (  # noqa: F401 (re-exported like SGLang)
    HookRegistry,
    HookSource,
    HookType,
    _current_plugin_source,
    plugin_hook,
)

logger = logging.getLogger(__name__)

PLATFORM_PLUGINS_GROUP = "sglang.srt.platforms"
GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"

_plugins_loaded = False


def load_plugins_by_group(group: str, excluded_dists=None, *, exclusion_reason: str = "SGLANG_PLATFORM") -> dict:
    """name -> (callable, dist name) for the group's allowed entry points."""
    allowed = None
    raw = envs.SGLANG_PLUGINS.get()
    if raw:
        allowed = {x.strip() for x in raw.split(",") if x.strip()}
    found = entry_points(group=group)
    out = {}
    for ep in found:
        if allowed is not None and ep.name not in allowed:
            logger.info("Skipping plugin %s (not in SGLANG_PLUGINS)", ep.name)
            continue
        dist = ep.dist.name if getattr(ep, "dist", None) else None
        if excluded_dists and dist in excluded_dists:
            logger.info("Skipping plugin %s (dist %s excluded by %s)", ep.name, dist, exclusion_reason)
            continue
        try:
            out[ep.name] = (ep.load(), dist)
            logger.info("Loaded plugin %s from group %s", ep.name, group)
        except Exception:
            logger.exception("Failed to load plugin %s from group %s", ep.name, group)
    return out


def execute_plugin_callbacks(plugins: dict, registry=HookRegistry, log=logger, plugin_label: str = "general") -> None:
    for name, (func, dist) in plugins.items():
        token = _current_plugin_source.set(HookSource(plugin_name=name, dist_name=dist))
        try:
            func()
            log.info("Executed %s plugin: %s", plugin_label, name)
        except Exception:
            log.exception("Failed to execute %s plugin: %s", plugin_label, name)
        finally:
            _current_plugin_source.reset(token)
    registry.apply_hooks()


def load_plugins():
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    execute_plugin_callbacks(load_plugins_by_group(GENERAL_PLUGINS_GROUP), HookRegistry, logger, "general")

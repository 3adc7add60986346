"""Hook registry (stand-in of ``sglang.srt.plugins.hook_registry``).

Same behaviour as SGLang's plugin framework, written for the stand-in:
- ``HookRegistry.register(target, hook, hook_type=HookType.AFTER, *, source=None)``
  records a hook on a dotted target; ``apply_hooks()`` resolves each target's
  parent with ``pkgutil.resolve_name`` and replaces the attribute with a wrapper
  (classmethod/staticmethod kept; class-REPLACE targets first; already patched
  targets skipped; stale ``from X import Y`` bindings in other modules updated).
- Call conventions:
    BEFORE  hook(*args, **kwargs) -> (args, kwargs) or None, then the original runs
    AFTER   hook(result, *args, **kwargs) -> new result, or None to keep result
    AROUND  hook(original_fn, *args, **kwargs) -> result
    REPLACE hook(*args, **kwargs) -> result, or a class replacing a class target
- ``plugin_hook(target, type=HookType.AFTER)`` is the decorator form.
A hook that fails to apply is logged and skipped; others still apply.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import pkgutil
import sys
import types
from collections import defaultdict
from enum import Enum
from typing import Callable, NamedTuple, Optional

logger = logging.getLogger(__name__)


class HookSource(NamedTuple):
    plugin_name: str
    dist_name: Optional[str]


# load_plugins() sets this around each plugin's callable; register() reads it.
_current_plugin_source: contextvars.ContextVar = contextvars.ContextVar(
    "_current_plugin_source", default=None
)


def _describe(src: Optional[HookSource]) -> str:
    if src is None:
        return "unknown"
    return "plugin=%s%s" % (src.plugin_name, ", dist=%s" % src.dist_name if src.dist_name else "")


class HookType(Enum):
    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


class HookRegistry:
    _hooks: dict = defaultdict(list)  # target -> [(HookType, hook, HookSource|None)]
    _patched: set = set()

    @classmethod
    def register(cls, target: str, hook: Callable, hook_type: HookType = HookType.AFTER, *, source: Optional[HookSource] = None):
        if isinstance(hook, type) and hook_type != HookType.REPLACE:
            raise TypeError(
                "Class %s can only be used with HookType.REPLACE, got HookType.%s"
                % (hook.__name__, hook_type.name)
            )
        src = source or _current_plugin_source.get()
        if hook_type == HookType.REPLACE and any(t == HookType.REPLACE for t, _, _ in cls._hooks[target]):
            logger.warning("Multiple REPLACE hooks on '%s': the last registered takes effect", target)
        cls._hooks[target].append((hook_type, hook, src))
        logger.debug("Registered %s hook on %s [%s]", hook_type.value, target, _describe(src))

    @classmethod
    def apply_hooks(cls):
        def tier(item):
            _, hooks = item
            class_replace = any(isinstance(h, type) and t == HookType.REPLACE for t, h, _ in hooks)
            return (0 if class_replace else 1, item[0])

        for target, hooks in sorted(cls._hooks.items(), key=tier):
            if target in cls._patched:
                continue
            try:
                cls._apply_target(target, hooks)
                cls._patched.add(target)
            except Exception:
                logger.exception("Failed to apply hooks to %s", target)

    @classmethod
    def _apply_target(cls, target: str, hooks: list):
        if "." not in target:
            raise ValueError("Invalid target path (need at least module.attr): %s" % target)
        parent_path, attr = target.rsplit(".", 1)
        parent = pkgutil.resolve_name(parent_path)
        original = getattr(parent, attr)
        wrap_as = None
        if isinstance(parent, type):
            raw = parent.__dict__.get(attr)
            if isinstance(raw, (classmethod, staticmethod)):
                wrap_as = type(raw)
                original = raw.__func__
        if isinstance(original, type) and any(t != HookType.REPLACE for t, _, _ in hooks):
            raise TypeError(
                "Target '%s' is a class: only HookType.REPLACE is allowed; hook '%s.<method>' instead"
                % (target, target)
            )
        if sum(1 for t, _, _ in hooks if t == HookType.AROUND) > 1:
            logger.warning("Multiple AROUND hooks on '%s'", target)
        # REPLACE first (stable), then the others in registration order, each
        # wrapping the previous result: the last registered is outermost.
        ordered = sorted(hooks, key=lambda h: 0 if h[0] == HookType.REPLACE else 1)
        fn = original
        for hook_type, hook, _ in ordered:
            if isinstance(hook, type):
                fn = hook
            else:
                fn = _wrap(fn, hook, hook_type)
        if wrap_as is not None:
            fn = wrap_as(fn)
        setattr(parent, attr, fn)
        if fn is not original:
            _rebind_stale(original, fn, parent)
        logger.info(
            "Applied %d hook(s) to %s (from: %s)",
            len(hooks), target, ", ".join(sorted({_describe(s) for _, _, s in hooks})),
        )

    @classmethod
    def reset(cls):
        cls._hooks.clear()
        cls._patched.clear()


def _rebind_stale(original, new, home) -> int:
    n = 0
    for mod in list(sys.modules.values()):
        if mod is None or mod is home or not isinstance(mod, types.ModuleType):
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for name, value in items:
            if value is original:
                try:
                    setattr(mod, name, new)
                    n += 1
                except (AttributeError, TypeError):
                    pass
    return n


def _wrap(original: Callable, hook: Callable, hook_type: HookType) -> Callable:
    if hook_type == HookType.REPLACE:
        def wrapper(*args, **kwargs):
            return hook(*args, **kwargs)
    elif hook_type == HookType.BEFORE:
        def wrapper(*args, **kwargs):
            changed = hook(*args, **kwargs)
            if changed is not None:
                args, kwargs = changed
            return original(*args, **kwargs)
    elif hook_type == HookType.AFTER:
        def wrapper(*args, **kwargs):
            result = original(*args, **kwargs)
            new = hook(result, *args, **kwargs)
            return result if new is None else new
    elif hook_type == HookType.AROUND:
        def wrapper(*args, **kwargs):
            return hook(original, *args, **kwargs)
    else:
        raise ValueError("Unknown hook type: %r" % (hook_type,))
    functools.update_wrapper(wrapper, original)
    wrapper.__wrapped__ = original
    return wrapper


def plugin_hook(target: str, type: HookType = HookType.AFTER) -> Callable:  # noqa: A002 (SGLang's name)
    def decorator(hook):
        HookRegistry.register(target, hook, type)
        return hook

    return decorator

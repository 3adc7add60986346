"""The sitecustomize route: a sys.meta_path finder that patches targets as
their modules are imported.

sitecustomize.py installs it when KVCANARY_ADDR is set. When a module holding
a target is imported, the finder lets the normal finders find and load it,
and right after the module body ran it resolves the target there (signature
check included) and replaces the class attribute with `hooks.wrap(...)` of
the same hook callable the plugin route registers. Patching is idempotent: a
function already wrapped by kvcanary (by this finder, or by HookRegistry
around a kvcanary hook) is left alone. When the plugin route loads in the
same process it uninstalls the finder and restores the originals first.
"""

from __future__ import annotations

import importlib.abc
import logging
import os
import sys
import threading

from . import hooks
from . import targets as T

log = logging.getLogger("kvcanary")

_finder = None
PATCHES: dict = {}  # target name -> (owner, attr, original stored value, wrapper)


class _Loader(importlib.abc.Loader):
    """Runs the real loader, then lets the finder patch the module."""

    def __init__(self, inner, finder, name):
        self._inner = inner
        self._finder = finder
        self._name = name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        # Leave no trace of this wrapper on the module.
        try:
            module.__loader__ = self._inner
            if module.__spec__ is not None:
                module.__spec__.loader = self._inner
        except Exception:  # noqa: BLE001
            pass
        self._finder.loaded(self._name, module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Finder(importlib.abc.MetaPathFinder):
    def __init__(self, binding=None):
        self._binding = binding  # None: the process's Binding, made when a target module loads
        self.watch: dict = {}
        for t in T.TARGETS:
            if not t.hooked:
                continue
            for name in (t.name,) + tuple(T.alias_name(a) for a in t.aliases):
                mods = self.watch.setdefault(T.module_of(name), [])
                if t not in mods:
                    mods.append(t)
        self._busy = threading.local()

    @property
    def b(self):
        # Created lazily: installing the finder (every interpreter that runs
        # sitecustomize) must not import torch; SGLang's modules do anyway.
        if self._binding is None:
            self._binding = hooks.get_binding()
        return self._binding

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.watch or hooks.ROUTE == "plugin":
            return None
        busy = getattr(self._busy, "names", None)
        if busy is None:
            busy = self._busy.names = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = None
            for f in sys.meta_path:
                if f is self:
                    continue
                fs = getattr(f, "find_spec", None)
                if fs is None:
                    continue
                spec = fs(fullname, path, target)
                if spec is not None:
                    break
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self, fullname)
        return spec

    def loaded(self, modname: str, module) -> None:
        """Patch every target of `modname` (never raises)."""
        if hooks.ROUTE == "plugin":
            return
        for t in self.watch.get(modname, ()):
            try:
                self._patch(t, {modname: module})
            except Exception as e:  # noqa: BLE001
                log.warning("kvcanary: patching %s failed (%s: %s); its features are off",
                            t.name, type(e).__name__, e)
                self.b.disable(t.features, "patch failed: %s" % e)

    def _patch(self, t, modules) -> None:
        if t.name in PATCHES:
            return
        res = T.resolve(t, modules)
        self.b.note_resolved(res)
        if not res.ok:
            return
        if not any(self.b.feature_on(f) for f in t.features):
            return
        owner, attr = res.owner, res.attr
        # A method the named class inherits (resolution walked its MRO) is
        # wrapped on the named class itself, shadowing the base's for it and
        # its subclasses, which is what the target names.
        current = owner.__dict__.get(attr, res.func) if isinstance(owner, type) else getattr(owner, attr)
        if current is None or hooks.is_kvcanary_wrapped(current):
            return
        if isinstance(current, (staticmethod, classmethod)):
            log.warning("kvcanary: %s is a %s; not patched", t.name, type(current).__name__)
            return
        wrapper = hooks.wrap(current, self.b.hook_for(t, res.name), res.hook or t.hook, t.name)
        setattr(owner, attr, wrapper)
        PATCHES[t.name] = (owner, attr, current, wrapper)
        hooks.ROUTE = "finder"
        log.debug("kvcanary: patched %s", res.name)


def install(binding=None):
    """Install the finder (idempotent); returns it, or None when hooks are off."""
    global _finder
    if _finder is not None:
        return _finder
    if binding is not None:
        settings = binding.settings
    else:
        from ..config import Settings

        settings = Settings.from_env()
    if not settings.enabled:
        return None
    if settings.instrument("graphdiff"):
        os.environ["SGLANG_FORCE_COARSE_WAR_BARRIER"] = "1"
    warn_forkserver(os.environ)
    f = Finder(binding)
    sys.meta_path.insert(0, f)
    _finder = f
    for modname in list(f.watch):
        mod = sys.modules.get(modname)
        if mod is not None:
            f.loaded(modname, mod)
    return f


FORKSERVER_ENV = ("SGLANG_FORKSERVER_FILE", "SGLANG_EARLY_FORKSERVER")


def warn_forkserver(environ) -> str:
    """Warn (once, returning the message; "" when there is nothing to say)
    when SGLang's early forkserver may start the schedulers (reference D6):
    with SGLANG_EARLY_FORKSERVER=1 and a shared daemon (SGLANG_FORKSERVER_FILE)
    they are forks of a process this sitecustomize never ran in, with the
    scheduler modules already imported, so this route hooks nothing there.
    Only the plugin route (kvcanary installed as a distribution, its entry
    point in group sglang.srt.plugins) reaches them."""
    daemon = environ.get("SGLANG_FORKSERVER_FILE", "")
    early = environ.get("SGLANG_EARLY_FORKSERVER", "").strip().lower() in ("1", "true", "yes", "on")
    if not daemon and not early:
        return ""
    what = ("SGLANG_FORKSERVER_FILE=%s" % daemon) if daemon else "SGLANG_EARLY_FORKSERVER=1"
    msg = ("kvcanary: %s: schedulers forked from SGLang's forkserver daemon never run this sitecustomize, so "
           "kvcanary's import hook patches nothing in them; pip install kvcanary's Python package "
           "(runtime/pyhook, README \"Two ways in\") so SGLang's plugin route loads it in every scheduler" % what)
    log.warning(msg)
    return msg


def uninstall(restore: bool = False) -> None:
    """Remove the finder; with restore, put back every original it replaced."""
    global _finder
    if _finder is not None:
        try:
            sys.meta_path.remove(_finder)
        except ValueError:
            pass
        _finder = None
    if restore:
        for name, (owner, attr, original, wrapper) in list(PATCHES.items()):
            if (owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)) is wrapper:
                setattr(owner, attr, original)
            del PATCHES[name]
        if hooks.ROUTE == "finder":
            hooks.ROUTE = None

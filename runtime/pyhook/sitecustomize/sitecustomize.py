"""kvcanary's sitecustomize (put on PYTHONPATH by `kvcanary wrap`).

Every interpreter started with this directory on PYTHONPATH, including the
scheduler processes SGLang spawns (they inherit PYTHONPATH), runs it at
start-up. When KVCANARY_ADDR is set it installs kvcanary's import hook
(kvcanary.sglang.finder), which patches SGLang's hook targets as their modules
are imported. Without KVCANARY_ADDR it does nothing of its own.

Python imports only the first `sitecustomize` on sys.path, so this one would
hide a user's or the distribution's (Debian ships one). It therefore runs the
next sitecustomize found on sys.path after this directory, exactly once.

Nothing here may stop the interpreter: any failure prints one line to stderr.
"""

import os
import sys

_KVCANARY_SITECUSTOMIZE = True  # marker: a chained copy of this file is skipped


def _kvcanary_install():
    if not os.environ.get("KVCANARY_ADDR"):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)  # runtime/pyhook: the directory holding kvcanary/
    try:
        import kvcanary  # noqa: F401
    except ImportError:
        if os.path.isdir(os.path.join(root, "kvcanary")):
            sys.path.append(root)
    from kvcanary.sglang import finder

    finder.install()


def _kvcanary_chain():
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    after = False
    for entry in list(sys.path):
        try:
            d = os.path.realpath(os.path.abspath(entry or os.getcwd()))
        except (OSError, ValueError):
            continue
        if d == here:
            after = True
            continue
        if not after:
            continue
        for cand in (os.path.join(d, "sitecustomize.py"), os.path.join(d, "sitecustomize", "__init__.py")):
            if not os.path.isfile(cand):
                continue
            try:
                with open(cand, "rb") as fh:
                    src = fh.read()
            except OSError:
                continue
            if b"_KVCANARY_SITECUSTOMIZE" in src:
                break  # another copy of this file: keep looking further down
            import importlib.util

            spec = importlib.util.spec_from_file_location("_kvcanary_chained_sitecustomize", cand)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["_kvcanary_chained_sitecustomize"] = mod
            spec.loader.exec_module(mod)
            return


try:
    _kvcanary_install()
except Exception as _e:  # noqa: BLE001
    sys.stderr.write("kvcanary: sitecustomize could not install the import hook (%s: %s); "
                     "running without kvcanary\n" % (type(_e).__name__, _e))
try:
    _kvcanary_chain()
except Exception as _e:  # noqa: BLE001
    sys.stderr.write("kvcanary: the next sitecustomize on sys.path raised %s: %s\n"
                     % (type(_e).__name__, _e))

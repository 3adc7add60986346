"""`python3 -m kvcanary.sglang check [--json]`: which hook targets resolve in
the installed SGLang.

Exit status: 0 every hooked target resolved, 1 some are missing or changed,
3 sglang is not importable, 2 usage.
"""

from __future__ import annotations

import json
import sys

from . import targets as T

USAGE = "usage: python3 -m kvcanary.sglang check [--json]"


def check() -> dict:
    """The report: {"sglang_version", "targets": [{"target", "hook",
    "instruments", "features", "ok", "error", "hooked"}]}. Raises ImportError
    when sglang is not importable."""
    import sglang  # noqa: F401

    rows = []
    for t in T.TARGETS:
        res = T.resolve(t)
        rows.append({"target": t.name, "hook": (res.hook or t.hook) if t.hooked else "none", "resolved": res.name,
                     "instruments": [i for i in t.instruments if i != "replay"],
                     "features": list(t.features), "ok": res.ok, "error": res.error,
                     "hooked": t.hooked, "reads": t.reads})
    return {"sglang_version": T.sglang_version(), "targets": rows, "pool_class": pool_class()}


def pool_class() -> str:
    """The DSA pool class this SGLang has: DSATokenToKVPool, or its former
    name NSATokenToKVPool (kept upstream as an alias); "" when neither."""
    for name in T.POOL_CLASSES:
        try:
            mod, rest = T.split_module(name)
            obj = mod
            for a in rest:
                obj = getattr(obj, a)
            return name
        except Exception:  # noqa: BLE001
            continue
    return ""


def exit_code(report: dict) -> int:
    return 0 if all(r["ok"] for r in report["targets"] if r["hooked"]) else 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "check" or any(a not in ("--json",) for a in argv[1:]):
        print(USAGE, file=sys.stderr)
        return 2
    as_json = "--json" in argv[1:]
    try:
        report = check()
    except Exception as e:  # noqa: BLE001 - any failure to import sglang
        if as_json:
            print(json.dumps({"sglang_version": "", "targets": [], "error": "sglang is not importable: %s" % e}))
        else:
            print("sglang is not importable: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 3
    code = exit_code(report)
    if as_json:
        print(json.dumps(report, indent=2))
        return code
    print("SGLang %s (DSA pool: %s)" % (report["sglang_version"] or "?",
                                        report["pool_class"].rsplit(".", 1)[-1] or "none found"))
    for r in report["targets"]:
        status = "ok" if r["ok"] else "MISSING"
        if not r["hooked"]:
            status = "read" if r["ok"] else "missing (not hooked)"
        print("%-8s %-6s %s  [%s]" % (status, r["hook"], r.get("resolved") or r["target"], ",".join(r["features"]) or "-"))
        if not r["ok"]:
            print("         %s" % r["error"])
    missing = [r for r in report["targets"] if r["hooked"] and not r["ok"]]
    if missing:
        feats = sorted({f for r in missing for f in r["features"]})
        print("%d target(s) missing; kvcanary runs without: %s" % (len(missing), ", ".join(feats)))
    else:
        print("all %d hooked targets resolve" % sum(1 for r in report["targets"] if r["hooked"]))
    return code


if __name__ == "__main__":
    sys.exit(main())

"""`python3 -m kvcanary.sglang check [--json] [--model PATH] [--fp4-indexer]`:
which hook targets resolve in the installed SGLang, which index-K pools it
has, and each instrument feature on or off with the reason.

The pool kinds: "dsa" (DSATokenToKVPool), "v4" (DeepSeekV4TokenToKVPool's C4
indexer) and "hybrid" (a DSA pool inside HybridLinearKVPool). With --model
(a model directory or its config.json) check says which kind that model
gets, its layout and its index-K layer ids as the binding will report them
(model layer ids: for DeepSeek-V4 the layers whose compress_ratios entry is
4), read from the config; the binding reads the same from the live pool
(access.find_index_k) and logs it at start-up.

Exit status: 0 every hooked target resolved, 1 some are missing or changed,
3 sglang is not importable, 2 usage (or an unreadable --model).
"""

from __future__ import annotations

import json
import sys

from . import targets as T

USAGE = "usage: python3 -m kvcanary.sglang check [--json] [--model PATH] [--fp4-indexer]"

KIND_OF_CLASS = {"DSATokenToKVPool": "dsa", "NSATokenToKVPool": "dsa", "DeepSeekV4TokenToKVPool": "v4",
                 "HybridLinearKVPool": "hybrid"}


def check(model=None, fp4_indexer: bool = False, settings=None) -> dict:
    """The report: {"sglang_version", "targets": [{"target", "hook",
    "instruments", "features", "ok", "error", "hooked"}], "pool_class" (the
    first pool class found, "" none), "pools": [{"class", "kind"}] (every pool
    class this SGLang has), "model": {"kind", "layout", "layers", "source"}
    (with `model`), "features": [{"feature", "on", "reason"}]}. Raises
    ImportError when sglang is not importable, ValueError for an unreadable
    model config."""
    import sglang  # noqa: F401

    from ..config import Settings

    settings = settings or Settings.from_env()
    rows, res_of = [], {}
    for t in T.TARGETS:
        res = T.resolve(t)
        res_of[t.name] = res
        rows.append({"target": t.name, "hook": t.hook if t.hooked else "none",
                     "instruments": [i for i in t.instruments if i != "replay"],
                     "features": list(t.features), "ok": res.ok, "error": res.error,
                     "hooked": t.hooked, "reads": t.reads})
    pools = pool_classes()
    m = model_index_k(model, fp4_indexer) if model else None
    return {"sglang_version": T.sglang_version(), "targets": rows,
            "pool_class": pools[0]["class"] if pools else "", "pools": pools, "model": m,
            "features": feature_states(settings, res_of, m["kind"] if m else "")}


def pool_classes() -> list:
    """[{"class": dotted name, "kind": "dsa" | "v4" | "hybrid"}] of the pool
    classes this SGLang has (DSATokenToKVPool or its former name
    NSATokenToKVPool, DeepSeekV4TokenToKVPool, HybridLinearKVPool)."""
    out = []
    for name in T.POOL_CLASSES:
        try:
            mod, rest = T.split_module(name)
            obj = mod
            for a in rest:
                obj = getattr(obj, a)
        except Exception:  # noqa: BLE001
            continue
        out.append({"class": name, "kind": KIND_OF_CLASS.get(name.rsplit(".", 1)[-1], "")})
    return out


def pool_class() -> str:
    """The first pool class this SGLang has; "" when none."""
    p = pool_classes()
    return p[0]["class"] if p else ""


def model_index_k(path: str, fp4_indexer: bool = False) -> dict:
    """What the binding will find for the model at `path` (a directory with
    config.json, or the file): kind, layout, index-K layer ids (model ids),
    from the config's architectures, compress_ratios and num_hidden_layers."""
    import json
    import os

    f = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(f) as fh:
            cfg = json.load(fh)
    except (OSError, ValueError) as e:
        raise ValueError("--model %s: cannot read a model config: %s" % (path, e)) from None
    arch = ",".join(cfg.get("architectures") or [])
    n = cfg.get("num_hidden_layers")
    if "DeepseekV4" in arch or "compress_ratios" in cfg:
        ratios = list(cfg.get("compress_ratios") or [])
        if isinstance(n, int):
            ratios = ratios[:n]  # the last entry may be the MTP placeholder
        return {"kind": "v4", "architecture": arch, "layout": "fp4" if fp4_indexer else "fp8",
                "layers": [L for L, r in enumerate(ratios) if r == 4], "page_tokens": 256,
                "source": f, "note": "C4 layers (compress_ratio 4), 64 C4 slots a 256-token page; "
                                     "a fork's bf16 index-K is told apart only by the live pool"}
    if not isinstance(n, int):
        raise ValueError("--model %s: config has no num_hidden_layers" % f)
    kind = "dsa"
    layers = list(range(n))
    full = cfg.get("full_attention_layer_ids") or cfg.get("full_attention_layers")
    if isinstance(full, list):
        kind, layers = "hybrid", [int(x) for x in full]
    return {"kind": kind, "architecture": arch, "layout": "fp8", "layers": layers, "page_tokens": 64,
            "source": f, "note": "layers with a 0-row buffer (skip_topk_layers) are left out by the live pool"}


NOTES = {
    "graphdiff.topk": "opt-in: set KVCANARY_GRAPHDIFF_LAYERS (wrap --graphdiff-layers); installing a capturer "
                      "changes the captured graph",
}


def feature_states(settings, res_of: dict, kind: str = "") -> list:
    """[{"feature", "on", "reason"}] for every feature of the table: on when
    its instrument is enabled (KVCANARY_INSTRUMENTS, as a run with a collector
    address such as wrap's would have it), its target resolved and the engine
    has what it observes."""
    out = []
    enabled = settings.instruments
    for t in T.TARGETS:
        for f in t.features:
            inst = f.split(".", 1)[0]
            res = res_of.get(t.name)
            on, why = True, "enabled; its target resolves"
            if inst == "replay":
                if not ("canary" in enabled or "graphdiff" in enabled):
                    on, why = False, "canary and graphdiff are both off (KVCANARY_INSTRUMENTS)"
            elif inst not in enabled:
                on, why = False, "%s is not in KVCANARY_INSTRUMENTS" % inst
            if on and res is not None and not res.ok:
                on, why = False, "target missing: %s (%s)" % (t.name, res.error)
            if on and f == "graphdiff.topk" and not settings.graphdiff_layers:
                on, why = False, NOTES[f]
            if on and f == "canary.between" and kind == "v4":
                on, why = False, "not applicable: DeepSeek-V4 has no IndexKeyCache.move"
            if on and f == "graphdiff.topk":
                why = "on: " + NOTES[f].split("; ", 1)[1]
            out.append({"feature": f, "on": on, "reason": why})
    return out


def exit_code(report: dict) -> int:
    return 0 if all(r["ok"] for r in report["targets"] if r["hooked"]) else 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "check":
        print(USAGE, file=sys.stderr)
        return 2
    as_json, fp4, model, rest = False, False, None, argv[1:]
    while rest:
        a = rest.pop(0)
        if a == "--json":
            as_json = True
        elif a == "--fp4-indexer":
            fp4 = True
        elif a == "--model" and rest:
            model = rest.pop(0)
        elif a.startswith("--model="):
            model = a.split("=", 1)[1]
        else:
            print(USAGE, file=sys.stderr)
            return 2
    if model is not None:
        try:
            model_index_k(model, fp4)
        except ValueError as e:
            print(str(e), file=sys.stderr)
            return 2
    try:
        report = check(model, fp4)
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
    pools = ", ".join("%s (%s)" % (p["class"].rsplit(".", 1)[-1], p["kind"]) for p in report["pools"])
    print("SGLang %s; index-K pools: %s" % (report["sglang_version"] or "?", pools or "none found"))
    m = report.get("model")
    if m:
        print("model %s: pool kind %s, layout %s, %s layer ids %s (%s)" % (
            m["source"], m["kind"], m["layout"], "C4" if m["kind"] == "v4" else "DSA",
            ",".join(str(x) for x in m["layers"]) or "none", m["note"]))
    for r in report["targets"]:
        status = "ok" if r["ok"] else "MISSING"
        if not r["hooked"]:
            status = "read" if r["ok"] else "missing (not hooked)"
        print("%-8s %-6s %s  [%s]" % (status, r["hook"], r["target"], ",".join(r["features"]) or "-"))
        if not r["ok"]:
            print("         %s" % r["error"])
    missing = [r for r in report["targets"] if r["hooked"] and not r["ok"]]
    if missing:
        feats = sorted({f for r in missing for f in r["features"]})
        print("%d target(s) missing; kvcanary runs without: %s" % (len(missing), ", ".join(feats)))
    else:
        print("all %d hooked targets resolve" % sum(1 for r in report["targets"] if r["hooked"]))
    for f in report["features"]:
        print("%-4s %-22s %s" % ("on" if f["on"] else "off", f["feature"], f["reason"]))
    return code


if __name__ == "__main__":
    sys.exit(main())

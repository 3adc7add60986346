"""The ONE table of SGLang hook targets, and their resolution.

Every place kvcanary touches SGLang is a row here: the dotted name, the hook
type, the features (instrument parts) that need it, what the hook reads, and
the parameter names the hook relies on. Both ways in (the plugin entry point
and the sitecustomize finder) apply hooks from this table, and `python3 -m
kvcanary.sglang check` prints it.

Names come from kvcanary's SGLang hooks reference, notes read from SGLang's
source (main, 2026-08 to 2026-12, at the commits the notes name).
SGLang renames things often, so every target is resolved at start-up: the
module is imported, the attribute path walked (aliases tried in order), and the
function's leading parameter names compared with `params`. A missing or changed
target disables only the features listed on its row, with one log line naming
the target and sglang.__version__.

Features are "<instrument>.<part>": disabling "canary.between" keeps the replay
canary; an instrument is on when it is enabled in KVCANARY_INSTRUMENTS and the
feature's own target resolved.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import types
from dataclasses import dataclass, field

log = logging.getLogger("kvcanary")

BEFORE, AFTER, AROUND = "BEFORE", "AFTER", "AROUND"


@dataclass(frozen=True)
class Target:
    name: str  # dotted path: module.Class.method
    hook: str  # BEFORE | AFTER | AROUND
    features: tuple  # features this target carries, e.g. ("checksum.sent",)
    reads: str  # what the hook reads (documentation; printed by check)
    params: tuple  # expected leading parameter names, self included
    aliases: tuple = ()  # older/newer dotted names of the same function, tried in order
    hooked: bool = True  # False: read for documentation only, never patched
    needs: tuple = ()  # other dotted names the hook uses (resolved with the target)
    # strict: parameters after `params` must have defaults. Off where SGLang's
    # own signature has required ones the hook only passes through.
    strict: bool = True

    @property
    def instruments(self) -> tuple:
        return tuple(sorted({f.split(".", 1)[0] for f in self.features}))


TARGETS: tuple = (
    Target(
        "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.send_kv_chunk",
        AFTER, ("checksum.sent",),
        "req (bootstrap_room, rid, origin_input_ids, kv.req_pool_idx|req_pool_idx), last_chunk; "
        "self.req_to_token_pool, self.token_to_kv_pool_allocator.get_kvcache(), self.ps.tp_rank",
        ("self", "req", "last_chunk", "end_idx")),
    Target(
        "sglang.srt.disaggregation.decode.DecodeTransferQueue.pop_transferred",
        AFTER, ("checksum.transferred", "canary.transfer"),
        "returned List[Req]; self.scheduler (pools, ps), self.queue (requests still in flight: "
        "the canary's transfer pages)",
        ("self", "rids_to_check")),
    Target(
        "sglang.srt.disaggregation.decode.SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch",
        BEFORE, ("checksum.admitted",),
        "self.waiting_queue (the requests about to be admitted), running_batch.batch_size(), "
        "self.max_running_requests, pools as for send_kv_chunk",
        ("self", "running_batch")),
    Target(
        "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.execute",
        AROUND, ("graphdiff.rerun",),
        "forward_batch (req_pool_indices, seq_lens[_cpu], out_cache_loc, rids, batch_size), "
        "self.model_runner (req_to_token_pool, token_to_kv_pool, eager_runner, forward_pass_id), "
        "self.raw_bs/self.bs after the call, result.next_token_logits",
        ("self", "forward_batch", "pp_proxy_tensors")),
    Target(
        "sglang.srt.mem_cache.index_key_cache.IndexKeyCache.move",
        BEFORE, ("canary.between",),
        "tgt_loc (slots written between forwards: expected pages tgt_loc // 64)",
        ("self", "tgt_loc", "src_loc")),
    Target(
        "sglang.srt.model_executor.model_runner.ModelRunner.init_indexer_capturer",
        AFTER, ("graphdiff.topk",),
        "sglang.srt.state_capturer.indexer_topk.{get,set}_global_indexer_capturer "
        "(a capturer chaining to SGLang's is installed before graph capture)",
        ("self",),
        needs=("sglang.srt.state_capturer.indexer_topk.get_global_indexer_capturer",
               "sglang.srt.state_capturer.indexer_topk.set_global_indexer_capturer")),
    Target(
        "sglang.srt.model_executor.model_runner.ModelRunner._forward_raw",
        AROUND, ("canary.replay", "replay.step"),
        "decode-mode forward_batch (as for execute); the result's can_run_graph (graph replay or "
        "eager_runner.execute: the canary brackets both), self.decode_cuda_graph_runner.raw_bs/bs "
        "after a graph step (padding)",
        ("self", "forward_batch"), strict=False),
)

# The module that provides the indexer capturer's getter and setter.
CAPTURER_MODULE = "sglang.srt.state_capturer.indexer_topk"

# Pool class names: DSA (current) and NSA (its former name, kept as an alias
# upstream), DeepSeek-V4's pool (its C4 indexer) and the hybrid
# linear-attention wrapper (a DSA pool inside). Only reported by `check`;
# pools are reached through attributes (access.find_index_k), never by class.
POOL_CLASSES = (
    "sglang.srt.mem_cache.memory_pool.DSATokenToKVPool",
    "sglang.srt.mem_cache.memory_pool.NSATokenToKVPool",
    "sglang.srt.mem_cache.deepseek_v4_memory_pool.DeepSeekV4TokenToKVPool",
    "sglang.srt.mem_cache.memory_pool.HybridLinearKVPool",
)


def by_name(name: str) -> Target:
    for t in TARGETS:
        if t.name == name:
            return t
    raise KeyError("no target %r in kvcanary.sglang.targets" % name)


def sglang_version() -> str:
    """sglang.__version__, "unknown" when it has none, "" when not importable."""
    try:
        import sglang  # noqa: F401
    except Exception:  # noqa: BLE001
        return ""
    v = getattr(sglang, "__version__", None)
    if v is None:
        try:
            from sglang.version import __version__ as v  # type: ignore
        except Exception:  # noqa: BLE001
            v = "unknown"
    return str(v)


@dataclass
class Resolved:
    """The outcome of resolving one target."""

    target: Target
    ok: bool
    error: str = ""
    name: str = ""  # the dotted name that resolved (an alias, possibly)
    owner: object = None  # the class (or module) holding the attribute
    attr: str = ""  # the attribute name on owner
    func: object = field(default=None, repr=False)  # the plain function found there


def split_module(dotted: str, modules: dict | None = None):
    """Import the longest importable module prefix of `dotted`.

    Returns (module, remaining attribute names). `modules` maps module names to
    already imported modules (the finder passes the module being loaded).
    Raises ImportError naming the name when no prefix imports.
    """
    parts = dotted.split(".")
    last_err = None
    for i in range(len(parts) - 1, 0, -1):
        modname = ".".join(parts[:i])
        if modules and modname in modules:
            return modules[modname], parts[i:]
    for i in range(len(parts) - 1, 0, -1):
        modname = ".".join(parts[:i])
        try:
            return importlib.import_module(modname), parts[i:]
        except ModuleNotFoundError as e:
            # Only "this very module is absent" means: try a shorter prefix.
            if e.name and (modname == e.name or modname.startswith(e.name + ".")):
                last_err = e
                continue
            raise
    raise ImportError("no module of %r imports: %s" % (dotted, last_err))


def _raw_attr(owner, name):
    """The attribute as stored (staticmethod/classmethod unwrapped)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in klass.__dict__:
                raw = klass.__dict__[name]
                if isinstance(raw, (staticmethod, classmethod)):
                    return raw.__func__
                return raw
    return getattr(owner, name)


def check_params(func, params: tuple, strict: bool = True) -> str:
    """"" when func's leading parameters are `params` (more are allowed if
    they have defaults or are *args/**kwargs), else what differs."""
    try:
        sig = inspect.signature(inspect.unwrap(func))
    except (TypeError, ValueError) as e:
        return "no signature: %s" % e
    have = list(sig.parameters.values())
    names = [p.name for p in have]
    for i, want in enumerate(params):
        if i >= len(have) or have[i].kind in (inspect.Parameter.VAR_POSITIONAL,
                                              inspect.Parameter.VAR_KEYWORD):
            return "signature (%s) lacks parameter %d %r" % (", ".join(names), i + 1, want)
        if have[i].name != want:
            return "signature (%s): parameter %d is %r, want %r" % (
                ", ".join(names), i + 1, have[i].name, want)
    for p in have[len(params):] if strict else ():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if p.default is inspect.Parameter.empty:
            return "signature (%s): extra required parameter %r" % (", ".join(names), p.name)
    return ""


def resolve(target: Target, modules: dict | None = None) -> Resolved:
    """Resolve `target` (then its aliases): import, walk, check parameters.

    Never raises: failures are in Resolved.error.
    """
    errors = []
    for dotted in (target.name,) + target.aliases:
        try:
            obj, rest = split_module(dotted, modules)
            owner = obj
            for i, a in enumerate(rest):
                owner = obj
                if not hasattr(obj, a):
                    if isinstance(obj, types.ModuleType):
                        raise AttributeError("module %s has no attribute or submodule %r" % (obj.__name__, a))
                    raise AttributeError("%s.%s has no attribute %r" % (
                        getattr(obj, "__module__", "?"), getattr(obj, "__qualname__", repr(obj)), a))
                obj = getattr(obj, a)
            func = _raw_attr(owner, rest[-1]) if rest else obj
            if not callable(func):
                raise TypeError("%s is not callable" % dotted)
            bad = check_params(func, target.params, strict=target.hooked and target.strict)
            if bad:
                raise TypeError(bad)
            for need in target.needs:
                m, r = split_module(need, modules)
                for a in r:
                    if not hasattr(m, a):
                        raise AttributeError("needs %s: no attribute %r" % (need, a))
                    m = getattr(m, a)
            return Resolved(target, True, name=dotted, owner=owner, attr=rest[-1], func=func)
        except Exception as e:  # noqa: BLE001 - any failure means "missing"
            errors.append("%s: %s" % (dotted, e) if dotted != target.name else str(e))
    return Resolved(target, False, error="; ".join(errors))


def resolve_all(modules: dict | None = None) -> list:
    return [resolve(t, modules) for t in TARGETS]


def module_of(dotted: str) -> str:
    """The module part of a target name: the components before the first
    capitalised one (the class). Used by the finder, which must know which
    import to wait for without importing anything itself."""
    parts = dotted.split(".")
    for i, p in enumerate(parts):
        if p[:1].isupper():
            return ".".join(parts[:i])
    return ".".join(parts[:-1])

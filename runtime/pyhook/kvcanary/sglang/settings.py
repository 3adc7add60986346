"""The engine's own settings, read from inside a scheduler process.

Each hooked scheduler process reports, once, the settings it runs with in a
`run.start` event: a RunConfig (runtime/hook/event.go) whose every known
value has provenance "engine", plus the process's TP rank. The names are the
reference's (sglang-dsv4.md, "Engine settings a hook can read"):

- cuda_graph          not server_args.disable_cuda_graph (the decode graph
                      backend "disabled" in versions that renamed the flag)
- cuda_graph_max_bs   server_args.cuda_graph_max_bs (or _decode)
- multi_stream_overlap  SGLANG_OPT_USE_MULTI_STREAM_OVERLAP as SGLang reads it
                      (sglang.srt.environ.envs; default True; False on HIP)
- index_k_dtype       the layout of the index-K buffers the binding detects
- disaggregation      server_args.disaggregation_mode ("pd" or "none")
- max_running_requests, tp_size, model (server_args.model_path);
  extra.nnodes and extra.node_rank when several nodes share the TP ranks
- extra.fp4_indexer, extra.speculative_algorithm, extra.architecture,
  extra.sglang_version, extra.multi_stream_bs_limit

What cannot be read is left out (unknown), never guessed. Nothing here
raises into the engine.
"""

from __future__ import annotations

import logging
import os
import socket

from . import access as A
from . import targets as T

log = logging.getLogger("kvcanary")

ENGINE = "engine"  # the provenance of every value reported here
OVERLAP_ENV = "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def model_runner_of(obj):
    """The target ModelRunner reachable from a hooked method's self (a
    Scheduler, DecodeTransferQueue, ModelRunner or DecodeCudaGraphRunner);
    None when there is none. A draft runner (is_draft_worker) is never
    returned: its pool and capturer are the draft's."""
    cands = [obj, getattr(obj, "model_runner", None)]
    for s in (obj, getattr(obj, "scheduler", None)):
        w = getattr(s, "tp_worker", None) if s is not None else None
        if w is not None:
            cands.append(getattr(w, "model_runner", None))
    for c in cands:
        if c is not None and hasattr(c, "token_to_kv_pool") and not is_draft(c):
            return c
    return None


def is_draft(mr) -> bool:
    """A speculative draft ModelRunner (model_runner.is_draft_worker)."""
    return getattr(mr, "is_draft_worker", False) is True


def server_args_of(obj, mr=None):
    """server_args of the hooked object, its scheduler or its ModelRunner;
    None for objects that reach none (an IndexKeyCache): the report waits for
    a hook whose object knows the pool too."""
    for o in (obj, getattr(obj, "scheduler", None), mr):
        sa = getattr(o, "server_args", None) if o is not None else None
        if sa is not None:
            return sa
    return None


def _parse_bool(v):
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    return None


def multi_stream_overlap():
    """SGLANG_OPT_USE_MULTI_STREAM_OVERLAP as this process's SGLang reads
    it: through sglang.srt.environ.envs when it defines the variable (its
    default is the version's), else the environment with the default True
    most versions have. HIP forces it off. None when unreadable."""
    try:
        import torch

        if getattr(torch.version, "hip", None):
            return False
    except Exception:  # noqa: BLE001
        pass
    try:
        from sglang.srt.environ import envs  # type: ignore

        var = getattr(envs, OVERLAP_ENV, None)
        if var is not None:
            return _parse_bool(var.get())
    except Exception:  # noqa: BLE001
        pass
    if OVERLAP_ENV in os.environ:
        return _parse_bool(os.environ[OVERLAP_ENV])
    return True


def multi_stream_bs_limit():
    """MQALayer's _multi_stream_bs_limit: 128 on Blackwell (sm100, sm120),
    64 elsewhere; None without a CUDA device."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, _ = torch.cuda.get_device_capability()
        return 128 if major in (10, 12) else 64
    except Exception:  # noqa: BLE001
        return None


def tp_rank_of(obj, mr=None):
    """The TP rank (ps.tp_rank, tp_rank, runtime_context), None when unknown."""
    for o in (obj, getattr(obj, "scheduler", None), mr):
        if o is None:
            continue
        ps = getattr(o, "ps", None)
        r = getattr(ps, "tp_rank", None) if ps is not None else None
        if r is None:
            r = getattr(o, "tp_rank", None)
        if isinstance(r, int) and r >= 0:
            return r
    try:
        from sglang.srt.runtime_context import get_parallel  # type: ignore

        return int(get_parallel().tp_rank)
    except Exception:  # noqa: BLE001
        return None


def engine_config(obj):
    """(config, tp_rank): the RunConfig (JSON form) of the process owning
    obj, every value with provenance "engine"; None when no server_args is
    reachable."""
    mr = model_runner_of(obj)
    sa = server_args_of(obj, mr)
    if sa is None:
        return None, None
    cfg = {"engine": "sglang"}
    prov = {}
    extra = {}

    def put(name, value):
        cfg[name] = value
        prov[name] = ENGINE

    def put_extra(key, value):
        extra[key] = str(value)
        prov["extra." + key] = ENGINE

    mp = getattr(sa, "model_path", None)
    if isinstance(mp, str) and mp:
        cfg["model"] = mp
    graphs = None
    dis = getattr(sa, "disable_cuda_graph", None)
    if isinstance(dis, bool):
        graphs = not dis
    backend = getattr(sa, "cuda_graph_backend_decode", None)
    if isinstance(backend, str) and backend:
        graphs = backend.lower() != "disabled" and graphs is not False
    if graphs is not None:
        put("cuda_graph", graphs)
    for name in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"):
        v = getattr(sa, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            put("cuda_graph_max_bs", v)
            break
    ov = multi_stream_overlap()
    if ov is not None:
        put("multi_stream_overlap", ov)
        lim = multi_stream_bs_limit()
        if lim is not None:
            put_extra("multi_stream_bs_limit", lim)
    layout = index_k_layout(obj, mr)
    if layout:
        put("index_k_dtype", layout)
    mode = getattr(sa, "disaggregation_mode", None)
    mode = getattr(mode, "value", mode)
    if isinstance(mode, str) and mode:
        put("disaggregation", "pd" if mode.lower() in ("prefill", "decode") else
            "none" if mode.lower() in ("null", "none") else mode)
    mrr = getattr(sa, "max_running_requests", None)
    if isinstance(mrr, int) and not isinstance(mrr, bool) and mrr > 0:
        put("max_running_requests", mrr)
    tps = getattr(sa, "tp_size", None)
    if isinstance(tps, int) and not isinstance(tps, bool) and tps > 0:
        put("tp_size", tps)
    # Several nodes share the TP ranks (--nnodes, --node-rank): this node
    # runs its own slice of them, which is what a collector on it can see.
    nn, nr = getattr(sa, "nnodes", None), getattr(sa, "node_rank", None)
    if isinstance(nn, int) and not isinstance(nn, bool) and nn > 1 and isinstance(nr, int) and 0 <= nr < nn:
        put_extra("nnodes", nn)
        put_extra("node_rank", nr)
    fp4 = getattr(sa, "enable_deepseek_v4_fp4_indexer", None)
    if isinstance(fp4, bool):
        put_extra("fp4_indexer", "true" if fp4 else "false")
    if hasattr(sa, "speculative_algorithm"):
        alg = getattr(sa, "speculative_algorithm", None)
        alg = getattr(alg, "name", alg)
        put_extra("speculative_algorithm", "none" if alg in (None, "") else alg)
    arch = None
    try:
        arch = mr.model_config.hf_config.architectures if mr is not None else None
    except Exception:  # noqa: BLE001
        arch = None
    if isinstance(arch, (list, tuple)) and arch:
        put_extra("architecture", ",".join(str(a) for a in arch))
    ver = T.sglang_version()
    if ver:
        put_extra("sglang_version", ver)
    if extra:
        cfg["extra"] = extra
    cfg["provenance"] = prov
    cfg["seed"] = 0
    return cfg, tp_rank_of(obj, mr)


def index_k_layout(obj, mr=None):
    """The layout name of the index-K buffers the binding detects on the
    process's pool (access.index_buffers / layout_name), None when none."""
    pool = getattr(mr, "token_to_kv_pool", None) if mr is not None else None
    if pool is None:
        for o in (obj, getattr(obj, "scheduler", None)):
            if o is not None and hasattr(o, "token_to_kv_pool_allocator"):
                pool = A.kv_pool_of_scheduler(o)
                break
    try:
        bufs = A.index_buffers(pool)
        return A.layout_name(bufs) if bufs else None
    except Exception:  # noqa: BLE001
        return None


def run_start_body(obj, tool: str):
    """The run.start body for the process owning obj, None when its
    settings cannot be read (no server_args reachable)."""
    cfg, rank = engine_config(obj)
    if cfg is None:
        return None
    body = {"tool": tool, "config": cfg, "host": {"hostname": socket.gethostname()}}
    if rank is not None:
        body["tp_rank"] = rank
    return body

#!/usr/bin/env python3
"""The stand-in engine: prefill -> PD transfer -> decode, on CPU torch.

A launcher (this script) builds a seeded workload, computes each request's
expected output script with a clean private model, then spawns (multiprocessing
"spawn", as SGLang does) one prefill scheduler process and --tp decode
scheduler processes (attention-TP ranks holding replicated index-K), each
running sglang.srt.managers.scheduler.run_scheduler_process (which calls
load_plugins() first). It waits for their records and writes the ground truth
(--truth FILE) so tests can assert detectors exactly.

Workload (--requests N): request 0 has a 4-token prompt and is placed first in
the decode pool (page 1: its slots are the pool's smallest, so with --spec the
buggy page-indexed move stays in bounds and lands on other requests' pages);
requests 1..N-2 (or 1..N-1 when N < 3) are the first wave, with prompt lengths
from --prompt-len; the last request (N >= 3) is "late": its prefill starts
after the decode ranks ran their first step, so its pages land while others
decode. Request i produces 1 + --decode-steps + i tokens (the first from
prefill), so batches shrink and both the graph path (batch <= --cuda-graph-max-bs,
padded to 1/2/4/..) and the eager path run.

Exit status: 0 when every process finished (whatever the outputs: faults are
for detectors to find), 1 when a process failed or hung, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import queue as queue_mod
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

FAULTS = ("none", "transfer-corrupt", "spec-move", "replay-alias")
PAGE = 64
R0_PROMPT_LEN = 4


def parse_args(argv):
    p = argparse.ArgumentParser(prog="engine.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=8, help="number of requests (default 8)")
    p.add_argument("--decode-steps", type=int, default=8, help="decode steps of request 0; request i runs this + i (default 8)")
    p.add_argument("--prompt-len", default="780:1100", help="first-wave and late prompt lengths MIN:MAX (default 780:1100)")
    p.add_argument("--tp", type=int, default=1, help="decode attention-TP ranks (processes), default 1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--req-kv-variant", choices=("base", "new"), default="base",
                   help="base: req.req_pool_idx; new: req.kv.req_pool_idx")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--spec", action="store_true", help="request 0 decodes speculatively (draft slot, then IndexKeyCache.move)")
    p.add_argument("--model", choices=("dsa", "v4", "hybrid"), default="dsa",
                   help="dsa: DSATokenToKVPool, 64-token pages; v4: DeepSeekV4TokenToKVPool (C4 indexer, 256-token "
                        "pages); hybrid: the DSA pool inside a HybridLinearKVPool (full-attention model layers 0,2,3,5)")
    p.add_argument("--index-k-dtype", choices=("fp8", "fp4", "bf16"), default="fp8",
                   help="V4 index-K layout (fp4: --enable-deepseek-v4-fp4-indexer; bf16: a fork's)")
    p.add_argument("--hisparse", action="store_true", help="V4: the C4 attention pool is HiSparse's")
    p.add_argument("--cuda-graph-max-bs", type=int, default=4)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--enable-return-indexer-topk", action="store_true")
    p.add_argument("--chunk-size", type=int, default=512, help="chunked prefill size in tokens (default 512)")
    p.add_argument("--transfer-gap-ms", type=float, default=2.0, help="pause between the late request's chunks")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before the launcher gives up on its processes")
    p.add_argument("--truth", metavar="FILE", help="write the ground-truth JSON here")
    p.add_argument("--log-level", default="info", help="scheduler processes' log level (SGLang-style lines on stderr)")
    p.add_argument("--quiet", action="store_true", help="no summary line (scheduler logs follow --log-level)")
    a = p.parse_args(argv)
    try:
        lo, hi = (int(x) for x in a.prompt_len.split(":"))
        if not 1 <= lo <= hi:
            raise ValueError
    except ValueError:
        p.error("--prompt-len %r: want MIN:MAX with 1 <= MIN <= MAX" % a.prompt_len)
    a.prompt_lo, a.prompt_hi = lo, hi
    if a.requests < 1:
        p.error("--requests %d: want >= 1" % a.requests)
    if a.tp < 1:
        p.error("--tp %d: want >= 1" % a.tp)
    if a.decode_steps < 1:
        p.error("--decode-steps %d: want >= 1" % a.decode_steps)
    if a.model == "v4" and (a.spec or a.fault in ("spec-move", "replay-alias")):
        p.error("--model v4: no --spec, spec-move or replay-alias (V4 has no IndexKeyCache.move; its graph "
                "fault is the multi-stream overlap, SGLANG_OPT_USE_MULTI_STREAM_OVERLAP)")
    if a.model != "v4" and (a.index_k_dtype != "fp8" or a.hisparse):
        p.error("--index-k-dtype/--hisparse are for --model v4 (the DSA stand-in stores fp8)")
    if a.model == "hybrid" and a.spec:
        p.error("--model hybrid: no --spec (the stand-in's speculative move reaches the DSA pool directly)")
    if a.fault == "spec-move" and not a.spec:
        p.error("--fault spec-move needs --spec (the buggy move runs only for speculative requests)")
    return a


def build_workload(a):
    from sglang.srt.models.dsa_standin import VOCAB

    rng = random.Random(a.seed)
    specs = []
    for i in range(a.requests):
        L = R0_PROMPT_LEN if i == 0 else rng.randint(a.prompt_lo, a.prompt_hi)
        specs.append({
            "rid": "r%d" % i,
            "room": rng.getrandbits(63),
            "prompt": [rng.randrange(VOCAB) for _ in range(L)],
            "max_new_tokens": 1 + a.decode_steps + i,
            "late": a.requests >= 3 and i == a.requests - 1,
            "spec": i == 0,
        })
    return specs


def pages_for(n, page=PAGE):
    return (n + page - 1) // page


def main(argv=None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    mp.set_start_method("spawn", force=True)

    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import PortArgs, ServerArgs

    load_plugins()
    t0 = time.monotonic()
    specs = build_workload(a)
    if a.model == "v4":
        from sglang.srt.models import v4_standin

        page = 256
        expected = {s["rid"]: v4_standin.reference_script(s["prompt"], s["max_new_tokens"], a.index_k_dtype) for s in specs}
        live_layers = list(v4_standin.C4_LAYERS)
    else:
        from sglang.srt.models.dsa_standin import SKIP_TOPK_LAYERS, reference_script

        page = PAGE
        expected = {s["rid"]: reference_script(s["prompt"], s["max_new_tokens"]) for s in specs}
        live_layers = [i for i, skip in enumerate(SKIP_TOPK_LAYERS) if not skip]
        if a.model == "hybrid":
            from sglang.srt.models.dsa_standin import HYBRID_FULL_ATTENTION_LAYERS

            live_layers = [HYBRID_FULL_ATTENTION_LAYERS[i] for i in live_layers]

    decode_need = sum(pages_for(len(s["prompt"]) + s["max_new_tokens"] + 2, page) for s in specs)
    r0_alloc = len(specs[0]["prompt"]) + specs[0]["max_new_tokens"] + 2
    decode_pages = max(decode_need + 8, pages_for(PAGE + r0_alloc, page) + 8)
    prefill_pages = sum(pages_for(len(s["prompt"]), page) for s in specs) + 16

    corrupt = None
    if a.fault == "transfer-corrupt":
        rng = random.Random(a.seed * 31 + 7)
        cands = [s for s in specs[1:] if not s["late"]] or specs
        victim = cands[rng.randrange(len(cands))]
        # an entry holding index-K of the prompt (V4: C4 entries, 64 a page)
        entries = pages_for(len(victim["prompt"]) // 4, PAGE) if a.model == "v4" else pages_for(len(victim["prompt"]))
        corrupt = {"room": victim["room"], "rid": victim["rid"], "layer": live_layers[rng.randrange(len(live_layers))],
                   "entry": rng.randrange(entries), "rank": 0}

    base = ServerArgs(tp_size=a.tp, cuda_graph_max_bs=a.cuda_graph_max_bs, disable_cuda_graph=a.disable_cuda_graph,
                      enable_return_indexer_topk=a.enable_return_indexer_topk, chunked_prefill_size=a.chunk_size,
                      max_running_requests=max(16, a.requests), context_length=max(len(s["prompt"]) + s["max_new_tokens"] + 2 for s in specs),
                      standin_fault=a.fault, standin_spec=a.spec, standin_req_kv_variant=a.req_kv_variant,
                      standin_seed=a.seed, standin_log_level=a.log_level, standin_transfer_gap_ms=a.transfer_gap_ms, standin_corrupt=corrupt,
                      page_size=page, standin_model=a.model, standin_index_k_dtype=a.index_k_dtype,
                      standin_hisparse=a.hisparse,
                      model_path="standin/tiny-dsv4" if a.model == "v4" else "standin/tiny-dsa")
    prefill_args = dataclasses.replace(base, disaggregation_mode="prefill", tp_size=1, standin_pool_pages=prefill_pages)
    decode_args = dataclasses.replace(base, disaggregation_mode="decode", standin_pool_pages=decode_pages)

    ctx = mp.get_context("spawn")
    port = PortArgs(requests=specs, result_queue=ctx.Queue(), transfer_queues=[ctx.Queue() for _ in range(a.tp)],
                    decode_started=ctx.Event(), tp_barrier=ctx.Barrier(a.tp),
                    tp_poll_array=ctx.Array("i", a.tp * len(specs), lock=False))
    from sglang.srt.managers.scheduler import run_scheduler_process

    procs = [ctx.Process(target=run_scheduler_process, args=(prefill_args, port, 0, 0, 0, 0, None, None), name="prefill-tp0")]
    for r in range(a.tp):
        procs.append(ctx.Process(target=run_scheduler_process, args=(decode_args, port, r, r, 0, 0, None, None), name="decode-tp%d" % r))
    for p in procs:
        p.start()

    results, failed = [], []
    deadline = time.monotonic() + a.timeout
    while len(results) < len(procs):
        try:
            res = port.result_queue.get(timeout=0.5)
        except queue_mod.Empty:
            if time.monotonic() > deadline:
                failed.append("timeout after %.0fs with %d/%d process records" % (a.timeout, len(results), len(procs)))
                break
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead and port.result_queue.empty():
                time.sleep(0.5)
                if port.result_queue.empty():
                    failed.append("process %s exited with status %s" % (dead[0].name, dead[0].exitcode))
                    break
            continue
        if "error" in res:
            failed.append("%s rank %s failed:\n%s" % (res["side"], res["rank"], res["error"]))
            break
        results.append(res)
    for p in procs:
        p.join(timeout=5 if not failed else 0.5)
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(2)
    if failed:
        for f in failed:
            print("engine: %s" % f, file=sys.stderr)
        return 1

    truth = compile_truth(a, specs, expected, results, corrupt, decode_pages, prefill_pages, time.monotonic() - t0)
    if a.truth:
        with open(a.truth, "w") as f:
            json.dump(truth, f, indent=1, sort_keys=True)
    if not a.quiet:
        ok = sum(1 for r in truth["requests"] if r["match"])
        graph = sum(1 for s in truth["ranks"][0]["steps"] if s["graph"]) if truth["ranks"] else 0
        print("engine: %d/%d requests match their expected script; fault=%s spec=%s tp=%d; decode steps %d (%d graph); %.2fs"
              % (ok, len(specs), a.fault, a.spec, a.tp, len(truth["ranks"][0]["steps"]) if truth["ranks"] else 0, graph, truth["wall_s"]))
    return 0


def compile_truth(a, specs, expected, results, corrupt, decode_pages, prefill_pages, wall):
    import sglang

    prefill = next(r for r in results if r["side"] == "prefill")
    decodes = sorted((r for r in results if r["side"] == "decode"), key=lambda r: r["rank"])
    reqs = []
    for s in specs:
        outs = {str(d["rank"]): d["outputs"].get(s["rid"]) for d in decodes}
        reqs.append({"rid": s["rid"], "room": str(s["room"]), "prompt_len": len(s["prompt"]),
                     "max_new_tokens": s["max_new_tokens"], "late": s["late"], "spec": s["spec"] and a.spec,
                     "expected": expected[s["rid"]], "outputs": outs,
                     "match": all(o == expected[s["rid"]] for o in outs.values())})
    corrupted = [c for d in decodes for c in d["corrupted"]]
    return {
        "sglang_version": sglang.__version__,
        "args": {k: v for k, v in vars(a).items() if k not in ("truth",)},
        "fault": a.fault,
        "page_size": 256 if a.model == "v4" else PAGE,
        "model": a.model,
        "index_k_dtype": a.index_k_dtype,
        "decode_pool_pages": decode_pages,
        "prefill_pool_pages": prefill_pages,
        "requests": reqs,
        "sent": prefill["sent"],
        "transfer_corrupt": corrupted[0] if corrupted else None,
        "transfer_corrupt_planned": corrupt,
        "ranks": [{"rank": d["rank"], "pid": d["pid"], "transferred": d["transferred"], "steps": d["steps"],
                   "replayed_forward_pass_ids": [s["forward_pass_id"] for s in d["steps"] if s["graph"]],
                   "moves": d["moves"], "page_tables": d["page_tables"]} for d in decodes],
        "prefill_page_tables": prefill["page_tables"],
        "prefill_pid": prefill["pid"],
        "wall_s": round(wall, 3),
    }


if __name__ == "__main__":
    sys.exit(main())

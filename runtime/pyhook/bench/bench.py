#!/usr/bin/env python3
"""Benchmarks of the in-engine package (figures for README.md "Cost model").

    /usr/bin/python3 runtime/pyhook/bench/bench.py [--reps 7] [--json]

Measures, as medians of --reps repetitions:
- bsum throughput on torch CPU (GB/s of index-K bytes digested) for a flat
  stream, a 61-layer room and the canary's whole-page digests, against
  tensor.sum() on the same bytes (the memory-bound ceiling of one pass);
- kernel launches per page_bsums / room_digest call (counted with the torch
  profiler) and the bytes each digested page costs in memory traffic;
- emitter: events/s from one thread to a collector process that keeps up, and
  the per-call µs of emit when the queue is full (a stalled collector).

CPU is for tests; production digests run on CUDA, where the same ops are
memory-bound kernels (README "Cost model" turns these counts into time).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from kvcanary import digest  # noqa: E402
from kvcanary.digest import LAYOUTS, page_bsums, room_digest, bsum_bytes  # noqa: E402
from kvcanary.emitter import Emitter, hex64, dec64  # noqa: E402


_SYNC = lambda: None  # noqa: E731 - torch.cuda.synchronize when timing a GPU


def median_time(fn, reps):
    fn()  # warm-up (caches, allocator)
    _SYNC()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        _SYNC()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def bench_digests(reps, device="cpu", layers=8, arena_pages=128):
    out = {"device": str(device)}
    g = torch.Generator().manual_seed(1)
    # flat stream, 64 MiB
    n = 64 << 20
    stream = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).to(device)
    t = median_time(lambda: bsum_bytes(stream), reps)
    out["bsum_stream_gbs"] = n / t / 1e9
    words = stream.view(torch.int64)
    t_sum = median_time(lambda: words.sum(), reps)
    out["tensor_sum_gbs"] = n / t_sum / 1e9

    # a room: `layers` layers (V3.2 has 61) × 4096 tokens fp8, slots scattered over the arena
    fp8 = LAYOUTS["fp8"]
    seq_len = 4096
    bufs = [(l, torch.randint(0, 256, (arena_pages, fp8.page_bytes), dtype=torch.uint8, generator=g).to(device))
            for l in range(layers)]
    pages = torch.randperm(arena_pages, generator=g)[:seq_len // 64]
    slots = (pages[torch.arange(seq_len) // 64] * 64 + torch.arange(seq_len) % 64).to(torch.int32).to(device)
    room_bytes = layers * seq_len * fp8.token_bytes
    t = median_time(lambda: room_digest(bufs, slots, "fp8"), reps)
    out["room_digest_gbs"] = room_bytes / t / 1e9
    out["room_digest_ms"] = t * 1e3
    t = median_time(lambda: room_digest(bufs, slots, "fp8", page_digests=False), reps)
    out["room_digest_no_pages_gbs"] = room_bytes / t / 1e9

    # canary: one snapshot, whole pages, `layers` × `arena_pages`
    allp = torch.arange(arena_pages, device=device)
    canary_bytes = layers * arena_pages * fp8.page_bytes
    t = median_time(lambda: page_bsums(bufs, allp), reps)
    out["page_bsums_gbs"] = canary_bytes / t / 1e9
    out["page_bsums_ms"] = t * 1e3
    out["page_bsums_us_per_page_layer"] = t / (layers * arena_pages) * 1e6

    # kernel launches (profiler: ops that read or write tensor memory)
    out["launches"] = {
        "page_bsums_1_group": count_kernels(lambda: page_bsums(bufs, allp)),
        "page_bsums_per_layer_groups": count_kernels(lambda: page_bsums(bufs, allp, max_bytes=1)),
        "room_digest_1_group": count_kernels(lambda: room_digest(bufs, slots, "fp8")),
        "room_digest_no_pages_1_group": count_kernels(lambda: room_digest(bufs, slots, "fp8", page_digests=False)),
        "layers": layers,
    }
    out["traffic_bytes_per_page"] = {name: page_traffic(lo) for name, lo in LAYOUTS.items()}
    out["traffic_room_factor"] = {"with_page_bsum": room_traffic_factor(True),
                                  "without_page_bsum": room_traffic_factor(False)}
    out["deepseek_v32_launches"] = deepseek_launches()
    # DeepSeek-V4-Flash: 21 C4 layers, 1024 page rows of 64 C4 slots (64 × 4k tokens), rooms of 1024 C4 entries
    out["deepseek_v4_flash_launches"] = deepseek_launches(layers=21, live_pages=1024, seq_len=1024)
    return out


def deepseek_launches(layers=61, live_pages=4096, seq_len=4096):
    """Kernel launches of one canary snapshot and one room digest at
    DeepSeek-V3.2's shape (61 layers; 64 requests × 4k tokens = 4096 live pages
    per layer), counted with small arenas and the grouping the default
    512 MB budget gives at the real size."""
    fp8 = LAYOUTS["fp8"]
    per_group = max(1, digest.DEFAULT_MAX_BYTES // (live_pages * fp8.page_bytes * digest._TEMP_FACTOR))
    groups = -(-layers // per_group)
    small_pages = 2
    bufs = [(l, torch.zeros((small_pages, fp8.page_bytes), dtype=torch.uint8)) for l in range(layers)]
    mb = per_group * small_pages * fp8.page_bytes * digest._TEMP_FACTOR  # same grouping on the small arena
    snap = count_kernels(lambda: page_bsums(bufs, torch.arange(small_pages), max_bytes=mb))
    per_room_group = max(1, digest.DEFAULT_MAX_BYTES // (seq_len * fp8.token_bytes * digest._TEMP_FACTOR))
    slots = torch.arange(64, dtype=torch.int32) % (small_pages * 64)
    room = count_kernels(lambda: room_digest(bufs, slots, "fp8"))
    return {"layers_per_group": per_group, "groups": groups, "canary_snapshot": snap["total"],
            "room_digest_groups": -(-layers // per_room_group), "room_digest": room["total"]}


def room_traffic_factor(pages):
    """Traffic of room_digest per byte of the room's stream (eager): gather of
    K and scales, token-order cat, stack (6×); the room pass: XOR 2, mix 25,
    sum 1 (28×); with page_bsum the per-entry pass again plus its zero-padded
    copy (31×)."""
    return 6 + 28 + (31 if pages else 0)


# aten ops that launch no kernel: views, shape changes, allocation without init
NO_KERNEL = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::slice", "aten::select",
             "aten::as_strided", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::t",
             "aten::transpose", "aten::empty", "aten::empty_strided", "aten::alias", "aten::detach",
             "aten::resize_", "aten::lift_fresh", "aten::to", "aten::_unsafe_view", "aten::narrow",
             "aten::empty_like", "aten::result_type", "aten::is_nonzero", "aten::size", "aten::stride",
             "aten::contiguous", "aten::chunk", "aten::split", "aten::unbind", "aten::set_"}


def count_kernels(fn):
    """Ops of one call that launch a device kernel (outermost aten ops that are
    not views or bare allocations: a cat's inner copy is not counted twice)."""
    from torch.profiler import profile, ProfilerActivity
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    counts = {}
    for e in prof.events():
        if _counted(e) and not _nested(e):
            counts[e.name] = counts.get(e.name, 0) + 1
    return {"total": sum(counts.values()), "by_op": dict(sorted(counts.items()))}


def _counted(e):
    return e.name.startswith("aten::") and e.name not in NO_KERNEL


def _nested(e):
    p = e.cpu_parent
    while p is not None:
        if _counted(p):
            return True
        p = p.cpu_parent
    return False


def page_traffic(lo):
    """Memory traffic (bytes read + written) per digested page per layer by the
    eager torch implementation, from its op sequence: gather, token-order copy
    (fp8 only), XOR with the position constants, mix (3 × shift, mask, xor;
    2 × multiply), sum. The position constants (8.4/16 KB) stay in L2 and are
    not counted. A fused kernel would read the page once: page_bytes."""
    p = lo.page_bytes
    gather = 2 * p
    reorder = 2 * p if lo.scale_bytes else 0
    xor_pos = 2 * p
    mix = 3 * (2 * p + 2 * p + 3 * p) + 2 * (2 * p)
    total = gather + reorder + xor_pos + mix + p
    return {"page_bytes": p, "eager": total, "factor": round(total / p, 1), "fused": p}


# --- emitter ---------------------------------------------------------------------

SINK = r"""
import socket, sys, os
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.bind(path); s.listen(4)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    n = 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        n += b.count(b"\n")
    print(n, flush=True)
"""


def checksum_body(i):
    return {"room": dec64((1 << 63) + i), "side": "decode", "seq_len": 4096, "pages": 64,
            "bsum": hex64(i * 0x9E3779B97F4A7C15), "xxh3": hex64(0), "dtype": "fp8", "request": "req-%d" % i,
            "rank": 0, "stage": "transferred", "layers": list(range(61)),
            "layer_bsum": [hex64(i + l) for l in range(61)], "page_bsum": [hex64(i - p) for p in range(64)]}


def replay_body(i):
    return {"step": i, "bs": 64, "bucket": 64, "mode": "graph", "dur_ns": 30_000_000}


def bench_emitter(reps, n_events):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "sink.sock")
    sink = subprocess.Popen([sys.executable, "-c", SINK, path], stdout=subprocess.PIPE, text=True)
    assert sink.stdout.readline().strip() == "ready"
    out = {}
    try:
        for name, make in (("replay", replay_body), ("room.checksum_61_layers", checksum_body)):
            rates, emit_us = [], []
            for _ in range(reps):
                em = Emitter("unix://" + path, queue_size=1 << 20)
                bodies = [make(i) for i in range(n_events)]
                t0 = time.perf_counter()
                for b in bodies:
                    em.emit(name.split("_")[0], b)
                t_emit = time.perf_counter() - t0
                em.close(timeout=60)
                t_all = time.perf_counter() - t0
                got = int(sink.stdout.readline())
                assert got == n_events + 1, (got, n_events)  # + run.end
                rates.append(n_events / t_all)
                emit_us.append(t_emit / n_events * 1e6)
            out[name] = {"events_per_s": statistics.median(rates), "emit_call_us": statistics.median(emit_us)}
        # latency of emit on a "step thread" that does 200 µs of Python work between
        # emits while the writer encodes 61-layer checksums (GIL sharing), against
        # the same loop with a no-op emitter (the machine's own jitter)
        for name, addr in (("emit_while_writer_encodes", "unix://" + path), ("baseline_noop_emitter", None)):
            em = Emitter(addr, queue_size=1 << 20)
            bodies = [checksum_body(i) for i in range(n_events // 4)]
            lat = []
            for b in bodies:
                t = time.perf_counter()
                em.emit("room.checksum", b)
                lat.append(time.perf_counter() - t)
                t2 = time.perf_counter()
                while time.perf_counter() - t2 < 0.0002:
                    pass
            em.close(timeout=60)
            if addr:
                sink.stdout.readline()
            lat.sort()
            out[name] = {"p50_us": lat[len(lat) // 2] * 1e6, "p99_us": lat[int(len(lat) * 0.99)] * 1e6,
                         "p999_us": lat[int(len(lat) * 0.999)] * 1e6, "max_us": lat[-1] * 1e6, "calls": len(lat)}
    finally:
        sink.kill()
        sink.wait()
        os.unlink(path)

    # queue full: a collector that accepts and never reads
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    srv.bind(path)
    srv.listen(1)
    em = Emitter("unix://" + path, queue_size=64, write_timeout=600)
    body = replay_body(0)
    deadline = time.monotonic() + 30
    while not (em._sending and len(em._q) >= em.queue_size) and time.monotonic() < deadline:
        em.emit("replay", body)
    per_call = []
    for _ in range(max(5, reps)):
        t0 = time.perf_counter()
        for _ in range(10_000):
            em.emit("replay", body)
        per_call.append((time.perf_counter() - t0) / 10_000 * 1e6)
    worst = 0.0
    for _ in range(10_000):
        t0 = time.perf_counter()
        em.emit("replay", body)
        worst = max(worst, time.perf_counter() - t0)
    out["queue_full"] = {"emit_call_us": statistics.median(per_call), "max_call_us_of_10000": worst * 1e6,
                         "writer_blocked": em._sending}
    em.close(timeout=0.1)
    srv.close()
    os.unlink(path)
    os.rmdir(d)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions per figure (median); at least 5")
    ap.add_argument("--events", type=int, default=20000, help="events per emitter throughput run")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--device", default="cpu",
                    help="device of the digest figures: cpu (default) or cuda[:N] (the GPU self-test)")
    ap.add_argument("--layers", type=int, default=8, help="layers of the digest figures (61 on a GPU: V3.2)")
    ap.add_argument("--pages", type=int, default=128, help="arena pages per layer (4096 on a GPU: 64 × 4k tokens)")
    a = ap.parse_args()
    if a.reps < 5:
        ap.error("--reps %d: want at least 5 (figures are medians)" % a.reps)
    if a.pages < 64:
        ap.error("--pages %d: want at least 64 (a 4096-token room)" % a.pages)
    global _SYNC
    if a.device.startswith("cuda"):
        if not torch.cuda.is_available():
            ap.error("--device %s: torch sees no CUDA device" % a.device)
        _SYNC = torch.cuda.synchronize
    res = {"torch": torch.__version__, "threads": torch.get_num_threads(), "python": sys.version.split()[0],
           "digests": bench_digests(a.reps, a.device, a.layers, a.pages), "emitter": bench_emitter(a.reps, a.events)}
    if a.json:
        print(json.dumps(res, indent=2))
        return
    dg, em = res["digests"], res["emitter"]
    print("torch %s, %d thread(s), median of %d" % (res["torch"], res["threads"], a.reps))
    print("bsum flat stream        %8.3f GB/s   (tensor.sum on the same bytes: %.2f GB/s)"
          % (dg["bsum_stream_gbs"], dg["tensor_sum_gbs"]))
    print("digests on %s" % dg["device"])
    print("room_digest %2d layers   %8.3f GB/s   (without page_bsum: %.3f GB/s)"
          % (a.layers, dg["room_digest_gbs"], dg["room_digest_no_pages_gbs"]))
    print("page_bsums (canary)     %8.3f GB/s   (%.1f µs per page per layer; one snapshot of %d layers × %d pages "
          "%.2f ms)" % (dg["page_bsums_gbs"], dg["page_bsums_us_per_page_layer"], a.layers, a.pages,
                         dg["page_bsums_ms"]))
    print("room_digest of 4096 tokens × %d layers: %.2f ms" % (a.layers, dg["room_digest_ms"]))
    la = dg["launches"]
    print("kernels per call (%d layers): page_bsums %d (one group), %d (a group per layer); room_digest %d, "
          "without pages %d" % (la["layers"], la["page_bsums_1_group"]["total"],
                                la["page_bsums_per_layer_groups"]["total"], la["room_digest_1_group"]["total"],
                                la["room_digest_no_pages_1_group"]["total"]))
    ds = dg["deepseek_v32_launches"]
    print("DeepSeek-V3.2 shape: canary snapshot %d launches (%d groups of %d layers), room digest %d launches"
          % (ds["canary_snapshot"], ds["groups"], ds["layers_per_group"], ds["room_digest"]))
    print("room_digest traffic: %d× the room's bytes with page_bsum, %d× without"
          % (dg["traffic_room_factor"]["with_page_bsum"], dg["traffic_room_factor"]["without_page_bsum"]))
    for name, tr in dg["traffic_bytes_per_page"].items():
        print("traffic per %s page per layer: %d B eager (%.1f× the page), %d B fused"
              % (name, tr["eager"], tr["factor"], tr["fused"]))
    for name in ("replay", "room.checksum_61_layers"):
        print("emitter %-24s %9.0f events/s end to end, emit call %.2f µs"
              % (name, em[name]["events_per_s"], em[name]["emit_call_us"]))
    for name in ("emit_while_writer_encodes", "baseline_noop_emitter"):
        x = em[name]
        print("%-26s p50 %.2f µs, p99 %.2f µs, p99.9 %.1f µs, max %.0f µs (%d calls)"
              % (name, x["p50_us"], x["p99_us"], x["p999_us"], x["max_us"], x["calls"]))
    q = em["queue_full"]
    print("emitter queue full      %8.2f µs per emit (median), worst of 10000 calls %.0f µs, writer blocked: %s"
          % (q["emit_call_us"], q["max_call_us_of_10000"], q["writer_blocked"]))


if __name__ == "__main__":
    main()

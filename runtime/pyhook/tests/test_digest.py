"""Digests on torch against the Go-generated vectors and a word-by-word
pure-Python reference of checksum/SPEC.md §2 and CONTRACT §2 (spec v1.1).
The reference lives here only: the package computes with torch."""

import json
import os
import random

import pytest
import torch

from conftest import REPO
from kvcanary import digest
from kvcanary.digest import (LAYOUTS, bsum_bytes, combine_layers, page_bsums, room_digest,
                             room_digest_v10, token_stream, u64, u64s)

M = (1 << 64) - 1
K = 0x9E3779B97F4A7C15
VECTORS = os.path.join(REPO, "checksum", "testdata", "vectors.json")
VECTORS_LAYERS = os.path.join(REPO, "checksum", "testdata", "vectors_layers.json")


# --- the reference (Python integers, word by word) ------------------------------

def ref_mix(z):
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M
    z ^= z >> 31
    return z


def ref_bsum(b: bytes, pos: int = 0) -> int:
    b = b + bytes(-len(b) % 8)
    s = 0
    for i in range(len(b) // 8):
        w = int.from_bytes(b[8 * i:8 * i + 8], "little")
        s += ref_mix(w ^ (((pos + i + 1) * K) & M))
    return s & M


def ref_arena(dtype: str, seed: int, pages: int) -> bytes:
    """SPEC §5 generator: splitmix64's output stream, little-endian words."""
    x = seed & M
    out = bytearray()
    for _ in range(pages * LAYOUTS[dtype].page_bytes // 8):
        x = (x + K) & M
        out += ref_mix(x).to_bytes(8, "little")
    return bytes(out)


def ref_token(arena: bytes, dtype: str, page: int, slot: int) -> bytes:
    lo = LAYOUTS[dtype]
    base = page * lo.page_bytes
    k = arena[base + slot * lo.k_bytes: base + (slot + 1) * lo.k_bytes]
    if lo.scale_bytes:
        s0 = base + 64 * lo.k_bytes + slot * lo.scale_bytes
        k += arena[s0:s0 + lo.scale_bytes]
    return k


def ref_stream(arena, dtype, pages, seq_len) -> bytes:
    return b"".join(ref_token(arena, dtype, pages[t // 64], t % 64) for t in range(seq_len))


def ref_room_pages(arena, dtype, pages, seq_len) -> list:
    """Per page-table entry bsum of the room's part of the stream, pos 0."""
    return [ref_bsum(ref_stream(arena, dtype, pages, seq_len)[64 * i * LAYOUTS[dtype].token_bytes:
                                                            min(64 * i + 64, seq_len) * LAYOUTS[dtype].token_bytes])
            for i in range(-(-seq_len // 64))]


def ref_page_bsum(arena, dtype, p) -> int:
    return ref_bsum(b"".join(ref_token(arena, dtype, p, s) for s in range(64)))


def ref_combine(digests, layers) -> int:
    return sum(ref_mix((d ^ ((l + 1) * K)) & M) for d, l in zip(digests, layers)) & M


def to_tensor(arena: bytes, dtype: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(arena), dtype=torch.uint8).view(-1, LAYOUTS[dtype].page_bytes)


def slots_of(pages, seq_len, dtype=torch.int32) -> torch.Tensor:
    t = torch.arange(seq_len)
    return (torch.tensor(pages, dtype=torch.int64)[t // 64] * 64 + t % 64).to(dtype) if seq_len else \
        torch.zeros(0, dtype=dtype)


def H(v: int) -> str:
    return "0x%016x" % v


# --- the reference itself --------------------------------------------------------

def test_reference_known_value():
    assert ref_mix(K) == 0xE220A8397B1DCDAF  # SPEC §2
    assert ref_bsum(bytes(8)) == 0xE220A8397B1DCDAF


# --- int64 as uint64 ---------------------------------------------------------------

def test_int64_wraps_like_uint64():
    rnd = random.Random(7)
    vals = [0, 1, M, 1 << 63, (1 << 63) - 1, K] + [rnd.getrandbits(64) for _ in range(2000)]
    t = torch.tensor([digest._s64(v) for v in vals], dtype=torch.int64)
    got = u64s(digest.mix_(t.clone()))
    assert got == [ref_mix(v) for v in vals]
    # wrapping sum and multiply
    assert u64(t.sum()) == sum(vals) & M
    assert u64s(t * digest.C1) == [(v * 0xBF58476D1CE4E5B9) & M for v in vals]


def test_u64():
    assert u64(torch.tensor(-1)) == M
    assert u64(-2) == M - 1
    assert u64s(torch.tensor([-1, 5])) == [M, 5]
    assert u64s(None) == []


# --- bsum_bytes ------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 132, 1000, 8448])
@pytest.mark.parametrize("pos", [0, 3, 1056])
def test_bsum_bytes_matches_reference(n, pos):
    b = bytes(random.Random(n * 31 + pos).getrandbits(8) for _ in range(n))
    t = torch.tensor(list(b), dtype=torch.uint8)
    got = bsum_bytes(t, pos)
    assert got.dtype == torch.int64 and got.dim() == 0
    assert u64(got) == ref_bsum(b, pos)


def test_bsum_bytes_additive_and_non_contiguous():
    b = bytes(random.Random(1).getrandbits(8) for _ in range(4096))
    t = torch.tensor(list(b), dtype=torch.uint8)
    assert u64(bsum_bytes(t[:2048]) + bsum_bytes(t[2048:], 256)) == u64(bsum_bytes(t))
    strided = torch.stack((t, t), dim=1)[:, 0]  # non-contiguous view of the same bytes
    assert not strided.is_contiguous()
    assert u64(bsum_bytes(strided)) == ref_bsum(b)
    assert t.tolist() == list(b)  # the input is never modified


def test_bsum_bytes_rejects_other_dtypes():
    with pytest.raises(ValueError, match="1-D uint8"):
        bsum_bytes(torch.zeros(8, dtype=torch.int32))


# --- v1.0 vectors (Go-generated) ------------------------------------------------

def _vectors():
    with open(VECTORS) as f:
        return json.load(f)


@pytest.mark.parametrize("case", _vectors(), ids=lambda c: c["name"])
def test_vectors_v10(case):
    dtype = case["dtype"]
    arena = ref_arena(dtype, case["seed"], case["arena_pages"])
    buf = to_tensor(arena, dtype)
    slots = slots_of(case["pages"], case["seq_len"])
    bsum, pb = room_digest_v10(buf, slots, dtype)
    assert H(u64(bsum)) == case["bsum"]
    assert len(pb) == -(-case["seq_len"] // 64)
    # the room's per-entry page_bsum has no Go vector in v1.0: the reference
    assert [H(v) for v in u64s(pb)] == [H(v) for v in ref_room_pages(arena, dtype, case["pages"], case["seq_len"])]
    # whole-page bsum, SPEC §4 PageBsum
    pages = torch.tensor(case["pages"], dtype=torch.int64)
    assert [H(v) for v in u64s(page_bsums(buf, pages))] == case["page_bsum"]
    # token_stream is the SPEC §1 stream
    if case["seq_len"]:
        st = token_stream(buf, slots, dtype)
        assert st.shape == (case["seq_len"], LAYOUTS[dtype].token_bytes)
        assert bytes(st.reshape(-1).tolist()) == ref_stream(arena, dtype, case["pages"], case["seq_len"])


def test_vectors_cover_both_dtypes():
    assert {c["dtype"] for c in _vectors()} == {"bf16", "fp8"}


# --- v1.1 multi-layer: Go vectors when present, else the reference ------------------

def _layer_arenas(dtype, seed, num_layers, arena_pages):
    return {l: ref_arena(dtype, seed + l, arena_pages) for l in range(num_layers)}


def _check_layers_case(case, expect_go=True):
    dtype = case["dtype"]
    arenas = _layer_arenas(dtype, case["seed"], case["num_layers"], case["arena_pages"])
    bufs = [(l, to_tensor(arenas[l], dtype)) for l in case["layers"]]
    slots = slots_of(case["pages"], case["seq_len"])
    d = room_digest(bufs, slots, dtype)
    assert d.layers == case["layers"]
    assert [H(v) for v in u64s(d.layer_bsum)] == case["layer_bsum"]
    assert H(u64(d.bsum)) == case["bsum"]
    assert [H(v) for v in u64s(d.page_bsum)] == case["page_bsum"]
    assert d.seq_len == case["seq_len"] and d.pages == -(-case["seq_len"] // 64)


def _ref_layers_case(name, dtype, seed, num_layers, layers, arena_pages, pages, seq_len):
    arenas = _layer_arenas(dtype, seed, num_layers, arena_pages)
    lb = [ref_bsum(ref_stream(arenas[l], dtype, pages, seq_len)) for l in layers]
    parts = [ref_room_pages(arenas[l], dtype, pages, seq_len) for l in layers]
    pb = [ref_combine([p[i] for p in parts], layers) for i in range(-(-seq_len // 64))]
    return {"name": name, "dtype": dtype, "seed": seed, "num_layers": num_layers, "layers": layers,
            "arena_pages": arena_pages, "pages": pages, "seq_len": seq_len,
            "layer_bsum": [H(v) for v in lb], "bsum": H(ref_combine(lb, layers)), "page_bsum": [H(v) for v in pb]}


# The same shapes CONTRACT §2 asks of the Go vectors, computed by the reference.
REF_LAYER_CASES = [
    ("bf16 3 layers, partial last page", "bf16", 11, 3, [0, 1, 2], 4, [3, 0, 2], 150),
    ("fp8 odd seq_len, non-contiguous layers", "fp8", 5, 6, [1, 3, 4], 5, [4, 1, 3], 131),
    ("fp8 single layer", "fp8", 9, 2, [1], 2, [1], 64),
    ("fp8 4 pages non-ascending, layer 0 skipped", "fp8", 21, 4, [1, 2, 3], 6, [5, 2, 2, 0], 200),
    ("bf16 one token", "bf16", 3, 2, [0, 1], 2, [1], 1),
]


@pytest.mark.parametrize("args", REF_LAYER_CASES, ids=lambda a: a[0])
def test_layers_against_reference(args):
    _check_layers_case(_ref_layers_case(*args))


def test_layers_vectors_from_go():
    if not os.path.exists(VECTORS_LAYERS):
        pytest.skip("checksum/testdata/vectors_layers.json not on this branch yet (generated by the Go side, "
                    "merged by the lead); test_layers_against_reference covers the same cases meanwhile")
    with open(VECTORS_LAYERS) as f:
        cases = json.load(f)
    assert {c["dtype"] for c in cases} == {"bf16", "fp8"}
    for case in cases:
        _check_layers_case(case)


def test_single_layer_digest_equals_v10_layer_digest():
    arena = ref_arena("fp8", 4, 3)
    buf = to_tensor(arena, "fp8")
    slots = slots_of([2, 0], 100)
    d = room_digest([(7, buf)], slots, "fp8")
    b10, pb10 = room_digest_v10(buf, slots, "fp8")
    assert u64(d.layer_bsum[0]) == u64(b10)
    assert u64(d.bsum) == ref_combine([u64(b10)], [7])
    assert u64s(d.page_bsum) == [ref_combine([p], [7]) for p in u64s(pb10)]


def test_transferred_room_same_digest_in_other_slots():
    """The PD property: the same tokens held in other pages digest the same."""
    src = bytearray(ref_arena("fp8", 8, 6))
    dst = bytearray(len(src))
    lo = LAYOUTS["fp8"]
    src_pages, dst_pages, seq_len = [1, 4, 2], [5, 0, 3], 170
    for t in range(seq_len):
        sp, dp, s = src_pages[t // 64], dst_pages[t // 64], t % 64
        for off, size in ((s * 128, 128), (64 * 128 + s * 4, 4)):
            dst[dp * lo.page_bytes + off: dp * lo.page_bytes + off + size] = \
                src[sp * lo.page_bytes + off: sp * lo.page_bytes + off + size]
    a = room_digest([(0, to_tensor(src, "fp8")), (3, to_tensor(src, "fp8"))], slots_of(src_pages, seq_len), "fp8")
    b = room_digest([(0, to_tensor(dst, "fp8")), (3, to_tensor(dst, "fp8"))], slots_of(dst_pages, seq_len), "fp8")
    assert u64(a.bsum) == u64(b.bsum)
    assert u64s(a.page_bsum) == u64s(b.page_bsum)
    # one flipped byte of token 70 on layer 3 changes layer 3 and entry 1 only
    layer0 = to_tensor(bytes(dst), "fp8")
    dst[dst_pages[1] * lo.page_bytes + 6 * 128 + 5] ^= 0x10
    c = room_digest([(0, layer0), (3, to_tensor(dst, "fp8"))], slots_of(dst_pages, seq_len), "fp8")
    assert u64(c.layer_bsum[0]) == u64(a.layer_bsum[0]) and u64(c.layer_bsum[1]) != u64(a.layer_bsum[1])
    diff = [i for i, (x, y) in enumerate(zip(u64s(a.page_bsum), u64s(c.page_bsum))) if x != y]
    assert diff == [1]


def test_zero_row_buffers_skipped_and_layer_order_checked():
    buf = to_tensor(ref_arena("fp8", 2, 2), "fp8")
    empty = torch.zeros((0, 8448), dtype=torch.uint8)
    slots = slots_of([1], 10)
    d = room_digest([(0, empty), (1, buf), (2, empty)], slots, "fp8")
    assert d.layers == [1]
    assert u64(d.bsum) == u64(room_digest([(1, buf)], slots, "fp8").bsum)
    none = room_digest([(0, empty)], slots, "fp8")
    assert none.layers == [] and u64(none.bsum) == 0 and u64s(none.page_bsum) == [0]
    with pytest.raises(ValueError, match="ascending"):
        room_digest([(2, buf), (1, buf)], slots, "fp8")
    with pytest.raises(ValueError, match="layer 1 buffer"):
        room_digest([(1, torch.zeros((2, 16384), dtype=torch.uint8))], slots, "fp8")


def test_empty_room():
    buf = to_tensor(ref_arena("bf16", 2, 2), "bf16")
    d = room_digest([(0, buf), (5, buf)], slots_of([], 0), "bf16")
    assert u64s(d.layer_bsum) == [0, 0]
    assert u64(d.bsum) == ref_combine([0, 0], [0, 5])  # the v1.1 formula, even for an empty room
    assert d.page_bsum.numel() == 0 and d.pages == 0
    b, pb = room_digest_v10(buf, slots_of([], 0), "bf16")
    assert u64(b) == 0 and pb.numel() == 0


def test_slot_dtypes_and_no_page_digests():
    buf = to_tensor(ref_arena("bf16", 6, 3), "bf16")
    want = room_digest([(0, buf)], slots_of([2, 1], 90, torch.int64), "bf16")
    got = room_digest([(0, buf)], slots_of([2, 1], 90, torch.int32), "bf16", page_digests=False)
    assert got.page_bsum is None and u64(got.bsum) == u64(want.bsum)


def test_layer_groups_give_the_same_result():
    arenas = _layer_arenas("fp8", 30, 5, 3)
    bufs = [(l, to_tensor(arenas[l], "fp8")) for l in range(5)]
    slots = slots_of([2, 0, 1], 150)
    one = room_digest(bufs, slots, "fp8")
    many = room_digest(bufs, slots, "fp8", max_bytes=1)  # one layer per group
    assert u64s(one.layer_bsum) == u64s(many.layer_bsum) and u64(one.bsum) == u64(many.bsum)
    assert u64s(one.page_bsum) == u64s(many.page_bsum)
    pages = torch.tensor([2, 0, 1, 2])
    assert u64s(page_bsums(bufs, pages)) == u64s(page_bsums(bufs, pages, max_bytes=1))


def test_page_bsums_combined_over_layers():
    arenas = _layer_arenas("fp8", 40, 3, 4)
    bufs = [(l, to_tensor(arenas[l], "fp8")) for l in (0, 2)]
    pages = [3, 0, 3]
    got = u64s(page_bsums(bufs, torch.tensor(pages, dtype=torch.int32)))
    want = [ref_combine([ref_page_bsum(arenas[l], "fp8", p) for l in (0, 2)], [0, 2]) for p in pages]
    assert got == want
    assert page_bsums([], torch.tensor([1, 2])).tolist() == [0, 0]
    # a change anywhere in a page, on any layer, changes that page's digest only
    before = page_bsums(bufs, torch.arange(4))
    bufs[1][1][1, 8448 - 1] ^= 1  # the last scale byte of page 1 on layer 2
    after = page_bsums(bufs, torch.arange(4))
    assert (before != after).tolist() == [False, True, False, False]


def test_combine_layers_matches_reference():
    vals = [random.Random(3).getrandbits(64) for _ in range(4)]
    t = torch.tensor([digest._s64(v) for v in vals], dtype=torch.int64)
    assert u64(combine_layers(t, [0, 5, 6, 60])) == ref_combine(vals, [0, 5, 6, 60])


def test_results_stay_on_device_as_int64():
    buf = to_tensor(ref_arena("fp8", 1, 2), "fp8")
    d = room_digest([(0, buf)], slots_of([1], 70 - 64), "fp8")
    for t in (d.layer_bsum, d.bsum, d.page_bsum, page_bsums(buf, torch.tensor([0]))):
        assert isinstance(t, torch.Tensor) and t.dtype == torch.int64 and t.device == buf.device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: CPU results only")
def test_cuda_matches_cpu():
    arenas = _layer_arenas("fp8", 50, 3, 4)
    cpu = [(l, to_tensor(arenas[l], "fp8")) for l in range(3)]
    gpu = [(l, b.cuda()) for l, b in cpu]
    slots = slots_of([3, 1], 100)
    a, b = room_digest(cpu, slots, "fp8"), room_digest(gpu, slots.cuda(), "fp8")
    assert u64(a.bsum) == u64(b.bsum) and u64s(a.page_bsum) == u64s(b.page_bsum)
    pages = torch.tensor([0, 3])
    assert u64s(page_bsums(cpu, pages)) == u64s(page_bsums(gpu, pages.cuda()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the no-sync check needs one")
def test_cuda_digests_never_synchronize():
    """torch's sync debug mode turns any synchronizing call (a .item(), a
    pageable copy, a nonzero) inside the digests into an error."""
    arenas = _layer_arenas("fp8", 60, 3, 4)
    gpu = [(l, to_tensor(arenas[l], "fp8").cuda()) for l in range(3)]
    slots = slots_of([3, 1], 100).cuda()
    pages = torch.tensor([0, 3]).cuda()
    room_digest(gpu, slots, "fp8")  # warm the constant caches
    page_bsums(gpu, pages)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        d = room_digest(gpu, slots, "fp8")
        p = page_bsums(gpu, pages)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert d.bsum.is_cuda and p.is_cuda

"""Index-K digests with torch ops on the pool's own device.

`bsum` is exactly checksum/SPEC.md §2 (v1.0) and its multi-layer extension
(spec v1.1, CONTRACT §2): the splitmix64 finalizer of each little-endian
64-bit word XOR ((position+1)·K), summed mod 2^64. Everything here is a batch
of elementwise torch ops and reductions — no per-token Python loop, no host
sync: results are int64 device tensors holding the two's complement of the
uint64 digest; `u64` turns one into a Python int on the host, which the caller
does off the step thread (after a non_blocking copy and an event, on CUDA).

torch 1.13 has no uint64, so the arithmetic runs on int64: `*`, `+`, `^` and
`sum` wrap mod 2^64 exactly like uint64 (two's complement), and a logical
right shift is the arithmetic shift with the sign-extended high bits masked
off: `(z >> s) & (2^(64-s) - 1)`. The test suite checks both against Python
integers and against the Go-generated vectors.

Layouts (per layer buffer, 64 slots per page, SPEC §1):
fp8 132 B/slot, page 8448 B = 64×128 B of K then 64×4 B fp32 scales;
fp4 68 B/slot, page 4352 B = 64×64 B packed e2m1 then 64×4 B ue8m0 scales
(DeepSeek-V4's C4 indexer, SPEC §10);
bf16 256 B/slot, page 16384 B. A slot is a token (DSA) or a C4 entry (V4):
the digest does not care, the binding derives the slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

TOKENS_PER_PAGE = 64
_M64 = (1 << 64) - 1


def _s64(v: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    v &= _M64
    return v - (1 << 64) if v >> 63 else v


K = _s64(0x9E3779B97F4A7C15)
C1 = _s64(0xBF58476D1CE4E5B9)
C2 = _s64(0x94D049BB133111EB)
_SHIFTS = ((30, C1), (27, C2), (31, None))
# 2^(64-s) - 1: keeps the bits a logical shift by s leaves, drops the sign fill
_MASK = {s: (1 << (64 - s)) - 1 for s, _ in _SHIFTS}

# Elementwise kernels per word (for the cost model; see README "Cost model"):
# XOR with the position constant (1), mix (3 × shift+mask+xor, 2 × mul = 11).
KERNELS_PER_PASS = 12


@dataclass(frozen=True)
class Layout:
    token_bytes: int
    k_bytes: int
    page_bytes: int
    name: str = ""

    @property
    def scale_bytes(self) -> int:
        return self.token_bytes - self.k_bytes

    @property
    def page_words(self) -> int:
        """64-bit words in one page's token-order stream (1056 fp8, 544 fp4, 2048 bf16)."""
        return TOKENS_PER_PAGE * self.token_bytes // 8


LAYOUTS = {
    "fp8": Layout(token_bytes=132, k_bytes=128, page_bytes=8448, name="fp8"),
    "fp4": Layout(token_bytes=68, k_bytes=64, page_bytes=4352, name="fp4"),
    "bf16": Layout(token_bytes=256, k_bytes=256, page_bytes=16384, name="bf16"),
}


def layout_of(layout) -> Layout:
    """A Layout, or its name ("fp8", "fp4", "bf16")."""
    if isinstance(layout, Layout):
        return layout
    try:
        return LAYOUTS[layout]
    except KeyError:
        raise ValueError("index-K layout %r: want one of %s" % (layout, ", ".join(LAYOUTS))) from None


# --- the mix -------------------------------------------------------------------


def mix_(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer on an int64 tensor, in place; returns z."""
    for s, c in _SHIFTS:
        t = z >> s  # arithmetic on int64 ...
        t.bitwise_and_(_MASK[s])  # ... made logical
        z.bitwise_xor_(t)
        if c is not None:
            z.mul_(c)
    return z


_pk_cache: dict = {}


def _cache_key(device) -> tuple:
    """(device, current stream): the constants are made and freed on the
    stream that reads them. One stream's cached tensor replaced while another
    stream still reads it would be freed under that reader (checksums run on
    the scheduler's stream, the canary on the forward stream)."""
    d = torch.device(device)
    if d.type == "cuda":
        return (str(d), torch.cuda.current_stream(d).cuda_stream)
    return (str(d), 0)


def _pos_consts(device, n: int) -> torch.Tensor:
    """((i+1)·K) for i in [0, n) on `device`: a view of a cached tensor that
    grows by doubling, computed on the device (no host-to-device copy); one
    per device and stream (_cache_key)."""
    key = _cache_key(device)
    t = _pk_cache.get(key)
    if t is None or t.numel() < n:
        size = max(n, 2 * (t.numel() if t is not None else 1024))
        t = torch.arange(1, size + 1, dtype=torch.int64, device=device).mul_(K)
        _pk_cache[key] = t
    return t[:n]


def _words(b: torch.Tensor, owned: bool = False) -> torch.Tensor:
    """uint8 [..., nbytes] → int64 [..., ceil(nbytes/8)] little-endian words,
    a short final word zero-padded at its high end (SPEC §2). The result is a
    tensor the caller may overwrite: a copy unless `owned` (b is the caller's
    own contiguous temporary)."""
    nbytes = b.shape[-1]
    if nbytes == 0:
        return torch.zeros(b.shape[:-1] + (0,), dtype=torch.int64, device=b.device)
    pad = -nbytes % 8
    if pad:
        b = torch.cat((b, b.new_zeros(b.shape[:-1] + (pad,))), dim=-1)
    elif not owned or not b.is_contiguous():
        b = b.clone(memory_format=torch.contiguous_format)
    return b.view(torch.int64)


def _terms_sum(w: torch.Tensor, pk: torch.Tensor) -> torch.Tensor:
    """Σ over the last dim of mix(w XOR pk); w is overwritten."""
    w.bitwise_xor_(pk)
    return mix_(w).sum(-1)


def bsum_bytes(stream: torch.Tensor, pos: int = 0) -> torch.Tensor:
    """bsum of a uint8 1-D byte stream whose first word has position `pos`
    (SPEC §2 `BsumBytes`) → int64 0-d tensor on stream.device."""
    if stream.dtype != torch.uint8 or stream.dim() != 1:
        raise ValueError("bsum_bytes: want a 1-D uint8 tensor, got %s %s" % (stream.dtype, tuple(stream.shape)))
    w = _words(stream)
    n = w.numel()
    if pos == 0:
        pk = _pos_consts(stream.device, n)
    else:
        pk = torch.arange(pos + 1, pos + n + 1, dtype=torch.int64, device=stream.device).mul_(K)
    return _terms_sum(w, pk)


# --- gathering -------------------------------------------------------------------


def _check_buf(buf: torch.Tensor, layout: Layout, what: str = "buf") -> None:
    if buf.dtype != torch.uint8 or buf.dim() != 2 or buf.shape[1] != layout.page_bytes:
        raise ValueError("%s: want uint8 [num_pages, %d] for layout %s, got %s %s"
                         % (what, layout.page_bytes, layout.name or layout.token_bytes, buf.dtype,
                            tuple(buf.shape)))


def _token_major(pages: torch.Tensor, layout: Layout) -> torch.Tensor:
    """uint8 [..., page_bytes] pages in memory order → [..., 64, token_bytes]
    in token order (fp8: each token's K then its scale)."""
    if layout.scale_bytes == 0:
        return pages.reshape(pages.shape[:-1] + (TOKENS_PER_PAGE, layout.token_bytes))
    kb = TOKENS_PER_PAGE * layout.k_bytes
    k = pages[..., :kb].reshape(pages.shape[:-1] + (TOKENS_PER_PAGE, layout.k_bytes))
    s = pages[..., kb:].reshape(pages.shape[:-1] + (TOKENS_PER_PAGE, layout.scale_bytes))
    return torch.cat((k, s), dim=-1)


def _slot_index(slots: torch.Tensor):
    """(slot, page, offset) as int64 tensors: computed once per room, shared by its layers."""
    s = slots.to(torch.int64)
    page = torch.div(s, TOKENS_PER_PAGE, rounding_mode="floor")
    return s, page, s - page * TOKENS_PER_PAGE


def _gather_tokens(buf: torch.Tensor, idx, layout: Layout, out: torch.Tensor) -> None:
    """Write the room's tokens of `buf` into out [seq_len, token_bytes] in
    position order: one gather kernel (bf16), or K, scales and their
    interleave (fp8, three)."""
    s, page, off = idx
    if layout.scale_bytes == 0:
        torch.index_select(buf.view(-1, layout.token_bytes), 0, s, out=out)
        return
    kb = TOKENS_PER_PAGE * layout.k_bytes
    k = buf[:, :kb].view(buf.shape[0], TOKENS_PER_PAGE, layout.k_bytes)[page, off]
    sc = buf[:, kb:].view(buf.shape[0], TOKENS_PER_PAGE, layout.scale_bytes)[page, off]
    torch.cat((k, sc), dim=1, out=out)


def token_stream(buf: torch.Tensor, slots: torch.Tensor, layout) -> torch.Tensor:
    """The room's tokens of one layer buffer in position order.

    buf: uint8 [num_pages, page_bytes]; slots: integer tensor [seq_len] (a
    req_to_token row: page = slot // 64, offset = slot % 64), on buf's device.
    → uint8 [seq_len, token_bytes] (fp8: 128 K bytes then 4 scale bytes).
    """
    layout = layout_of(layout)
    _check_buf(buf, layout)
    out = torch.empty((int(slots.shape[0]), layout.token_bytes), dtype=torch.uint8, device=buf.device)
    _gather_tokens(buf, _slot_index(slots), layout, out)
    return out


# --- rooms -----------------------------------------------------------------------


@dataclass
class RoomDigest:
    """Digests of one room, as int64 device tensors (u64() for the host value).

    layers: the layer ids digested (ascending; 0-row buffers skipped);
    layer_bsum: int64 [len(layers)], v1.0 bsum of the room on each layer;
    bsum: int64 [], the layer-combined room bsum (spec v1.1);
    page_bsum: int64 [npages] per page-table entry, layer-combined, or None;
    seq_len, pages: the room's length and page-table entries.
    """

    layers: list
    layer_bsum: torch.Tensor
    bsum: torch.Tensor
    page_bsum: torch.Tensor | None
    seq_len: int
    pages: int


_lc_cache: dict = {}
_lc_pinned: dict = {}


def _layer_consts(layers: Sequence[int], device) -> torch.Tensor:
    """((layer+1)·K) per layer id, int64 on `device`, cached (one small copy
    per distinct layer list and device, then none)."""
    key = (_cache_key(device), tuple(layers))
    t = _lc_cache.get(key)
    if t is None:
        vals = [_s64((l + 1) * 0x9E3779B97F4A7C15) for l in layers]
        if torch.device(device).type == "cuda":
            # pinned + non_blocking: no synchronizing pageable copy on the step thread
            # (the pinned source must outlive the copy: kept until the cache drops it)
            src = torch.tensor(vals, dtype=torch.int64).pin_memory()
            t = src.to(device, non_blocking=True)
            _lc_pinned[key] = src
        else:
            t = torch.tensor(vals, dtype=torch.int64, device=device)
        if len(_lc_cache) > 256:
            _lc_pinned.clear()
            _lc_cache.clear()
        _lc_cache[key] = t
    return t


def combine_layers(layer_digests: torch.Tensor, layers: Sequence[int]) -> torch.Tensor:
    """Spec v1.1 combination: Σ_j mix(d_j XOR ((layers[j]+1)·K)) over dim 0.
    layer_digests int64 [L] or [L, N] → [] or [N]."""
    lc = _layer_consts(layers, layer_digests.device)
    if layer_digests.dim() == 2:
        lc = lc[:, None]
    z = layer_digests.bitwise_xor(lc)
    return mix_(z).sum(0)


# Peak temporaries of one group, in units of the group's gathered bytes: the
# gather, the token-order copy (or the page-entry words) and one shift temporary.
_TEMP_FACTOR = 4
DEFAULT_MAX_BYTES = 512 << 20


def _group(bufs: list, bytes_per_layer: int, max_bytes: int) -> list:
    """Split layers into groups whose temporaries stay under max_bytes (at
    least one layer per group). Fewer groups: fewer kernel launches."""
    size = max(1, max_bytes // max(1, bytes_per_layer * _TEMP_FACTOR))
    return [bufs[i:i + size] for i in range(0, len(bufs), size)]


def _room_layers(bufs, slots, layout: Layout, page_digests: bool, max_bytes: int):
    """Per-layer v1.0 bsum [L] and per-entry partial bsums [L, npages] (or None)."""
    seq_len = int(slots.shape[0])
    npages = -(-seq_len // TOKENS_PER_PAGE)
    nbytes = seq_len * layout.token_bytes
    n = -(-nbytes // 8)  # words of the stream (the last one zero-padded)
    pw = layout.page_words
    padded = npages * TOKENS_PER_PAGE * layout.token_bytes  # whole page-table entries
    dev = bufs[0].device
    if seq_len == 0:  # an empty room: bsum 0 on every layer (SPEC §2), no entries
        return (torch.zeros(len(bufs), dtype=torch.int64, device=dev),
                torch.zeros((len(bufs), 0), dtype=torch.int64, device=dev) if page_digests else None)
    idx = _slot_index(slots)
    lbs, parts = [], []
    for group in _group(bufs, max(1, padded), max_bytes):
        g = len(group)
        st = torch.empty((g, padded), dtype=torch.uint8, device=dev)
        st[:, nbytes:].zero_()  # past seq_len: zero bytes (the last word's padding; no terms)
        for i, b in enumerate(group):
            _gather_tokens(b, idx, layout, st[i, :nbytes].view(seq_len, layout.token_bytes))
        words = st.view(torch.int64)  # [g, npages·pw]
        if page_digests:
            # entry i: words [i·pw, (i+1)·pw) of the stream, positions from 0
            wp = words.clone().view(g, npages, pw)
            wp.bitwise_xor_(_pos_consts(dev, pw))
            mix_(wp)
            wp.view(g, -1)[:, n:] = 0  # words past the stream's end are not terms
            parts.append(wp.sum(-1))
        lbs.append(_terms_sum(words[:, :n], _pos_consts(dev, n)))
    lb = torch.cat(lbs)
    return lb, (torch.cat(parts) if page_digests else None)


def room_digest(buffers: Sequence[tuple], slots: torch.Tensor, layout, page_digests: bool = True,
                max_bytes: int = DEFAULT_MAX_BYTES) -> RoomDigest:
    """Spec v1.1 room digest over layer buffers.

    buffers: (layer_id, buf) pairs, layer ids ascending; a 0-row buffer
    (skip_topk_layers) is skipped and not listed in `layers`. slots: the
    room's req_to_token row [seq_len] on the buffers' device. Layers are
    processed in groups whose temporaries stay near `max_bytes` (fewer
    groups, fewer kernel launches; see README "Cost model").
    """
    layout = layout_of(layout)
    used = [(int(l), b) for l, b in buffers if b.shape[0] > 0]
    ids = [l for l, _ in used]
    if ids != sorted(set(ids)):
        raise ValueError("room_digest: layer ids %s are not ascending and distinct" % ids)
    for l, b in used:
        _check_buf(b, layout, "layer %d buffer" % l)
    seq_len = int(slots.shape[0])
    npages = -(-seq_len // TOKENS_PER_PAGE)
    dev = used[0][1].device if used else slots.device
    if not used:
        z = torch.zeros((), dtype=torch.int64, device=dev)
        pb = torch.zeros(npages, dtype=torch.int64, device=dev) if page_digests else None
        return RoomDigest([], torch.zeros(0, dtype=torch.int64, device=dev), z, pb, seq_len, npages)
    lb, parts = _room_layers([b for _, b in used], slots, layout, page_digests, max_bytes)
    bsum = combine_layers(lb, ids)
    pb = combine_layers(parts, ids) if page_digests else None
    return RoomDigest(ids, lb, bsum, pb, seq_len, npages)


def room_digest_v10(buf: torch.Tensor, slots: torch.Tensor, layout, page_digests: bool = True):
    """Single buffer, spec v1.0 meaning: (bsum int64[], page_bsum int64[npages]
    per page-table entry, or None)."""
    layout = layout_of(layout)
    _check_buf(buf, layout)
    if buf.shape[0] == 0 or slots.shape[0] == 0:
        npages = -(-int(slots.shape[0]) // TOKENS_PER_PAGE)
        z = torch.zeros((), dtype=torch.int64, device=buf.device)
        return z, (torch.zeros(npages, dtype=torch.int64, device=buf.device) if page_digests else None)
    lb, parts = _room_layers([buf], slots, layout, page_digests, 1 << 62)
    return lb[0], (parts[0] if page_digests else None)


# --- whole pages (the canary) ----------------------------------------------------


def page_bsums(buffers, pages: torch.Tensor, layout=None, max_bytes: int = DEFAULT_MAX_BYTES) -> torch.Tensor:
    """Whole-page bsum (all 64 slots, token order, positions from 0: SPEC §4
    PageBsum) of each page in `pages`, layer-combined as in spec v1.1 →
    int64 [len(pages)] on the buffers' device. The canary's page digest.

    buffers: (layer_id, buf) pairs as for room_digest (0-row buffers skipped),
    or one bare buffer (then the plain v1.0 PageBsum, not combined).
    pages: integer tensor of page indices on the buffers' device.
    layout: inferred from the page size (8448 fp8, 4352 fp4, 16384 bf16) when None.
    """
    single = isinstance(buffers, torch.Tensor)
    pairs = [(0, buffers)] if single else [(int(l), b) for l, b in buffers if b.shape[0] > 0]
    pages = pages.to(torch.int64)
    if not pairs:
        return torch.zeros(pages.shape[0], dtype=torch.int64, device=pages.device)
    if layout is None:
        by_size = {l.page_bytes: l for l in LAYOUTS.values()}
        width = pairs[0][1].shape[-1]
        if width not in by_size:
            raise ValueError("page_bsums: page of %d bytes is no known layout (8448 fp8, 4352 fp4, 16384 bf16)" % width)
        layout = by_size[width]
    layout = layout_of(layout)
    for l, b in pairs:
        _check_buf(b, layout, "layer %d buffer" % l)
    dev = pairs[0][1].device
    npg = pages.shape[0]
    pw = layout.page_words
    out = []
    for group in _group(pairs, max(1, npg) * layout.page_bytes, max_bytes):
        g = torch.empty((len(group), npg, layout.page_bytes), dtype=torch.uint8, device=dev)
        for i, (_, b) in enumerate(group):
            torch.index_select(b, 0, pages, out=g[i])  # the gather: one read of each page
        # token order (fp8: a fresh copy from cat; bf16: memory order already), ours to overwrite
        w = _token_major(g, layout).reshape(len(group), npg, layout.page_bytes).view(torch.int64)
        w.bitwise_xor_(_pos_consts(dev, pw))
        out.append(mix_(w).sum(-1))  # [G, P]
    per_layer = torch.cat(out)
    if single:
        return per_layer[0]
    return combine_layers(per_layer, [l for l, _ in pairs])


# --- host ------------------------------------------------------------------------


def u64(t) -> int:
    """An int64 0-d tensor (or int) → the uint64 value as a Python int.
    On CUDA this waits for the tensor: call it off the step thread."""
    if isinstance(t, torch.Tensor):
        t = t.item()
    return int(t) & _M64


def u64s(t) -> list:
    """An int64 1-d tensor → list of uint64 Python ints (one device→host copy)."""
    if t is None:
        return []
    return [v & _M64 for v in (t.tolist() if isinstance(t, torch.Tensor) else t)]

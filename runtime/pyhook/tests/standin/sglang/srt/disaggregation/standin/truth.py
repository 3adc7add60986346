"""What the stand-in engine records for its ground truth (not SGLang API)."""

from __future__ import annotations

import hashlib

import torch


def room_layer_digests(pool, slots: torch.Tensor) -> dict:
    """{layer id: sha256 hex} of the token-order index-K stream (128 K bytes
    then 4 scale bytes per token) of ``slots`` on every layer with rows."""
    out = {}
    if hasattr(pool, "index_pools"):  # DeepSeek-V4: the C4 entries of the prompt
        ip = pool.index_pools[4]
        n = slots.shape[0] // 4 * 4
        c4 = slots[3:n:4].long() // 4
        for layer, item in enumerate(pool.layer_mapping):
            if item.compress_ratio != 4:
                continue
            k, s = ip.read(item.compress_layer_id, c4)
            parts = [k] if s is None else [k, s]
            out[str(layer)] = hashlib.sha256(torch.cat(parts, dim=1).contiguous().numpy().tobytes()).hexdigest()
        return out
    if hasattr(pool, "full_kv_pool"):  # HybridLinearKVPool: model layer ids
        model = {d: m for m, d in pool.full_attention_layer_id_mapping.items()}
        return {str(model[int(d)]): v for d, v in room_layer_digests(pool.full_kv_pool, slots).items()}
    ikc = pool.index_key_cache
    for layer, buf in enumerate(pool.index_k_with_scale_buffer):
        if buf.shape[0] == 0:
            continue
        flat = buf.view(-1)
        k = flat[ikc.k_byte_index(slots)]
        s = flat[ikc.scale_byte_index(slots)]
        out[str(layer)] = hashlib.sha256(torch.cat([k, s], dim=1).contiguous().numpy().tobytes()).hexdigest()
    return out

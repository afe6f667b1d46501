"""Lesson 7's step 1: what a tensor costs stored as F16, Q8_0 or Q4_K_M (llama.cpp's recipe), and what a token reads."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from bytesup.gguf.sizes import block_shape, type_bytes
from bytesup.model import configs
from bytesup.model import param_counts as pc

GiB = 2**30  # memory capacities on spec sheets
GB = 1e9  # bandwidths, and the "GB" of tables for a reader
QUANTS = ("F16", "Q8_0", "Q4_K_M")
KV_CACHE_TYPE = "F16"  # llama.cpp's default cache type (--cache-type-k/-v f16)


# --- 1. what a tensor costs ------------------------------------------------------------------------


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of the layers that get more bits: the first eighth, the last eighth and
    every third layer in between (src/llama-quant.cpp, ``use_more_bits``; integer division as in C)."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


# What llama.cpp falls back to when a row's length is not a whole number of the type's blocks
# (src/llama-quant.cpp, tensor_type_fallback): a 32-weight type of about as many bits.
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def fallback(type_name: str, row_length: int) -> str:
    if row_length % block_shape(type_name)[0] == 0:
        return type_name
    other = FALLBACK[type_name]
    return other if row_length % block_shape(other)[0] == 0 else "F16"


def q4_k_m_types(tensors: Sequence[tuple[str, tuple[int, ...]]], n_heads: int = 0, n_kv_heads: int = 0) -> list[str]:
    """The ggml type llama.cpp's quantizer gives each tensor for LLAMA_FTYPE_MOSTLY_Q4_K_M.

    A transcription of ``llama_tensor_get_type_impl`` and ``tensor_type_fallback`` in llama.cpp's
    src/llama-quant.cpp (ggml-org/llama.cpp), for a model without experts, read for the Q4_K_M branch:

      * vectors (norms, 1-D) are not quantized: F32;
      * output.weight, and token_embd.weight when there is no output.weight (tied embeddings):
        Q6_K, or Q8_0 when a row is not a whole number of 256-weight blocks;
      * attn_v.weight: Q6_K in the "use more bits" layers (counted over the attn_v tensors in
        order), else Q4_K; in a 70B llama (80 blocks with grouped-query attention: llama.cpp's
        LLM_TYPE_70B, src/llama-model.cpp) Q4_K becomes Q5_K, attn_v being 8 times smaller there;
      * ffn_down.weight: Q6_K in the "use more bits" layers, else Q4_K;
      * every other matrix (token_embd of an untied model, attn_q, attn_k, attn_output, ffn_gate,
        ffn_up): Q4_K;
      * then the fallback for rows that are not whole 256-weight blocks: Q4_K -> Q5_0, Q6_K -> Q8_0.

    ``tensors``: (GGUF name, numpy-order shape) in file order; a row's length is the last dimension.
    """
    names = [name for name, _ in tensors]
    tied = "output.weight" not in names
    n_attn_v = sum("attn_v.weight" in n for n in names)
    n_ffn_down = sum("ffn_down" in n for n in names)
    n_blocks = len({int(m.group(1)) for n in names if (m := re.match(r"blk\.(\d+)\.", n))})
    is_70b = n_blocks == 80 and 0 < n_kv_heads < n_heads
    i_attn_v = i_ffn_down = 0
    types = []
    for name, shape in tensors:
        if len(shape) < 2 or not name.endswith("weight") or "_norm.weight" in name:
            types.append("F32")
            continue
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            kind = "Q6_K" if shape[-1] % block_shape("Q4_K")[0] == 0 else "Q8_0"
        elif "attn_v.weight" in name:
            kind = "Q6_K" if use_more_bits(i_attn_v, n_attn_v) else "Q4_K"
            if is_70b and kind == "Q4_K":
                kind = "Q5_K"
            i_attn_v += 1
        elif "ffn_down" in name:
            kind = "Q6_K" if use_more_bits(i_ffn_down, n_ffn_down) else "Q4_K"
            i_ffn_down += 1
        else:
            kind = "Q4_K"
        types.append(fallback(kind, shape[-1]))
    return types


def storage_types(a: configs.Architecture, quant: str) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, ggml type) of every tensor of a published model stored as F16, Q8_0 or Q4_K_M.

    F16 and Q8_0 store every matrix in that type and the norm vectors in F32 (llama.cpp's
    converter); Q4_K_M follows ``q4_k_m_types``.
    """
    shapes = configs.llama_tensor_shapes(a)
    if quant == "Q4_K_M":
        types = q4_k_m_types(shapes, a.n_heads, a.n_kv_heads)
    elif quant in ("F16", "Q8_0"):
        types = [quant if len(shape) == 2 else "F32" for _, shape in shapes]
    else:
        raise ValueError(f"storage {quant!r}: expected one of {', '.join(QUANTS)}")
    return [(name, shape, t) for (name, shape), t in zip(shapes, types)]


def weights_bytes(tensors: Sequence[tuple[str, tuple[int, ...], str]]) -> int:
    """Σ over the tensors of type_bytes(type, number of weights)."""
    return sum(type_bytes(t, math.prod(shape)) for _, shape, t in tensors)


def read_per_token(rows: Sequence[Mapping]) -> int:
    """Bytes one generated token reads from a tensor table (param_counts.per_token_reads: every tensor
    once, one row of token_embd, the whole table again as a tied output head)."""
    return sum(r["bytes_read"] for r in pc.per_token_reads(rows))

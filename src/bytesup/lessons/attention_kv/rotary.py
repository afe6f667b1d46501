"""Lesson 6's step 2: rope, the turn of each pair of dimensions, and the two row layouts of q and k."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from bytesup.lessons.attention_kv.by_hand import BLOCK, AttnWeights, HandAttention, causal_mask, kv_head
from bytesup.model.arch import ArchSpec

ROPE_PAIRS = (0, 1, 2, 4, 8, 16)  # pairs shown in the rope table (plus the last pair)
ROPE_POSITIONS = 8  # positions shown in the rope table


# --- 2. rope: the turn, and the two row layouts -------------------------------------------------


def rope_theta(spec: ArchSpec, block: int = BLOCK) -> np.ndarray:
    """Radians per position of each pair i: base^(-2i/n_rot) with the block's base (as forward.rope_angles)."""
    return spec.layer_rope_base(block) ** (-np.arange(0, spec.n_rot, 2, dtype=np.float64) / spec.n_rot)


def pair_angles(v: np.ndarray, layout: str = "adjacent") -> np.ndarray:
    """Angle of each rope pair of the last axis, in radians: (v0, v1), (v2, v3), ... ("adjacent"),
    or (v0, v_{n/2}), (v1, v_{n/2+1}), ... ("neox")."""
    v = v.astype(np.float64)
    if layout == "neox":
        half = v.shape[-1] // 2
        return np.arctan2(v[..., half:], v[..., :half])
    pairs = v.reshape(*v.shape[:-1], -1, 2)
    return np.arctan2(pairs[..., 1], pairs[..., 0])


def wrap(a: np.ndarray) -> np.ndarray:
    """An angle in (-pi, pi]."""
    return np.angle(np.exp(1j * np.asarray(a, dtype=np.float64)))


def rope_table(spec: ArchSpec, n_positions: int = ROPE_POSITIONS, pairs: Sequence[int] = ROPE_PAIRS) -> list[dict]:
    """For a few pairs i: radians per token, tokens per full turn, and the angle at positions 0..n-1,
    once for every rope base the model's layers use (Gemma 3: 10,000 on its sliding layers and the
    file's rope.freq_base on the global ones; llama: one base for every layer)."""
    rows = []
    for base, layers in rope_bases(spec).items():
        theta = rope_theta(spec, layers[0])
        chosen = sorted({i for i in pairs if i < len(theta)} | {len(theta) - 1})
        for i in chosen:
            dims = f"{i},{i + spec.n_rot // 2}" if spec.rope_layout == "neox" else f"{2 * i},{2 * i + 1}"
            row = {
                "layers": layer_kind(spec, layers[0]),
                "base": base,
                "pair": i,
                "dims": dims,
                "radians_per_token": theta[i],
                "tokens_per_turn": 2 * math.pi / theta[i],
            }
            row.update({f"pos_{p}": p * theta[i] for p in range(n_positions)})
            rows.append(row)
    return rows


def rope_bases(spec: ArchSpec) -> dict[float, list[int]]:
    """Each rope base the model uses -> the layers that use it, in layer order."""
    out: dict[float, list[int]] = {}
    for i in range(spec.n_layers):
        out.setdefault(spec.layer_rope_base(i), []).append(i)
    return out


def layer_kind(spec: ArchSpec, layer: int) -> str:
    """'every layer', or which kind a layer of a model with sliding-window layers is."""
    if not spec.sliding_layers:
        return "every layer"
    return f"sliding (window {spec.sliding_window})" if spec.is_sliding(layer) else "global"


def gguf_rows_to_hf(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo convert_hf_to_gguf.py's permutation of attn_q / attn_k rows: per head, GGUF row 2i is
    Hugging Face row i and GGUF row 2i+1 is Hugging Face row i + head_dim/2."""
    rows, cols = w.shape
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def rope_halves(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Hugging Face's rope (rotate_half): dimension i turns with dimension i + head_dim/2."""
    half = x.shape[-1] // 2
    c, s = cos[:, None, :], sin[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def hf_layout_scores(hand: HandAttention, w: AttnWeights, spec: ArchSpec) -> np.ndarray:
    """Block scores (n_heads, N, N) with the rows un-permuted and rope on halves, as transformers computes them."""
    n, hd = hand.xn.shape[0], spec.head_dim
    q = rope_halves((hand.xn @ gguf_rows_to_hf(w.wq, spec.n_heads).T).reshape(n, spec.n_heads, hd), hand.cos, hand.sin)
    k = rope_halves(
        (hand.xn @ gguf_rows_to_hf(w.wk, spec.n_kv_heads).T).reshape(n, spec.n_kv_heads, hd), hand.cos, hand.sin
    )
    s = np.stack([q[:, h] @ k[:, kv_head(h, spec)].T for h in range(spec.n_heads)]) * np.float32(1 / math.sqrt(hd))
    s[:, causal_mask(n)] = -np.inf
    return s

"""Lesson 6's steps 1 and 3: one block's attention by hand, checked against the package's block, and
what its heads look at."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bytesup.model.arch import ArchSpec
from bytesup.model.forward import KVCache, Model, attention_block, rms_norm, rope, rope_angles, softmax

BLOCK = 0  # the block whose attention is done by hand


# --- 1. one block's attention by hand ----------------------------------------------------------


@dataclass
class AttnWeights:
    """One block's attention weights, float32 copies (a streaming model reuses its buffers)."""

    attn_norm: np.ndarray  # (d_model,)
    wq: np.ndarray  # (n_heads * head_dim, d_model)
    wk: np.ndarray  # (n_kv_heads * head_dim, d_model)
    wv: np.ndarray  # (n_kv_heads * head_dim, d_model)
    wo: np.ndarray  # (d_model, n_heads * head_dim)
    # the table's optional roles, None where the architecture has none
    bq: np.ndarray | None = None  # qwen2: biases of Q, K, V
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None
    q_norm: np.ndarray | None = None  # gemma3: RMSNorm gain of each head's q and k, (head_dim,)
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None  # gemma3: RMSNorm of the output before the residual add

    @classmethod
    def of(cls, model: Model, block: int) -> AttnWeights:
        w = model.weights.block(block)

        def copy(a):
            return None if a is None else np.array(a, dtype=np.float32)

        return cls(
            *(
                copy(a)
                for a in (w.attn_norm, w.wq, w.wk, w.wv, w.wo, w.bq, w.bk, w.bv, w.q_norm, w.k_norm, w.post_attn_norm)
            )
        )


def kv_head(h: int, spec: ArchSpec) -> int:
    """The K/V head query head h reads: n_heads / n_kv_heads query heads share each one."""
    return h // spec.group


def causal_mask(n: int, window: int | None = None) -> np.ndarray:
    """(n, n) True where the key lies in the query's future (column > row): those scores become -inf.

    window: a sliding layer's query also does not see keys `window` or more positions back."""
    j, i = np.arange(n)[None, :], np.arange(n)[:, None]
    hidden = j > i
    if window is not None:
        hidden |= j <= i - window
    return hidden


@dataclass
class HandAttention:
    """Every intermediate of one block's attention for N tokens at positions 0..N-1."""

    x: np.ndarray  # (N, d_model) the block's input
    xn: np.ndarray  # (N, d_model) after attn_norm
    q: np.ndarray  # (N, n_heads, head_dim) before rope (after Gemma's per-head norm)
    k: np.ndarray  # (N, n_kv_heads, head_dim) before rope
    v: np.ndarray  # (N, n_kv_heads, head_dim) never rotated
    cos: np.ndarray  # (N, n_rot / 2)
    sin: np.ndarray
    q_rot: np.ndarray  # after rope
    k_rot: np.ndarray
    scores: np.ndarray  # (n_heads, N, N) q.k / sqrt(head_dim), future (and beyond the window) masked to -inf
    weights: np.ndarray  # (n_heads, N, N) softmax of each row
    heads: np.ndarray  # (N, n_heads, head_dim) each head's weighted sum of values
    out: np.ndarray  # (N, d_model) the output projection (RMS-normalized by post_attention_norm on Gemma)
    y: np.ndarray  # (N, d_model) x + out
    rope_base: float = 10000.0  # the block's rope base (Gemma: 10,000 on sliding layers)
    window: int | None = None  # the block's sliding window, None when it sees every earlier position


def attention_by_hand(x: np.ndarray, w: AttnWeights, spec: ArchSpec, block: int = BLOCK) -> HandAttention:
    """The attention half of block ``block``, one step per line and one head at a time (no cache),
    as the architecture table has it for this model."""
    n, hd = x.shape[0], spec.head_dim
    # attention RMSNorm
    xn = rms_norm(x, w.attn_norm, spec.rms_eps)
    # queries, keys, values: three matmuls (plus a bias each on qwen2), cut into heads
    Q, K, V = xn @ w.wq.T, xn @ w.wk.T, xn @ w.wv.T
    if w.bq is not None:
        Q, K, V = Q + w.bq, K + w.bk, V + w.bv
    q = Q.reshape(n, spec.n_heads, hd)
    k = K.reshape(n, spec.n_kv_heads, hd)
    v = V.reshape(n, spec.n_kv_heads, hd)
    if w.q_norm is not None:  # Gemma: RMSNorm of each head's q and k, over its head_dim numbers
        q, k = rms_norm(q, w.q_norm, spec.rms_eps), rms_norm(k, w.k_norm, spec.rms_eps)
    # rope: turn each pair of Q and K by an angle that grows with the position (this block's base)
    base, window = spec.layer_rope_base(block), spec.layer_window(block)
    cos, sin = rope_angles(np.arange(n), spec.n_rot, base)
    q_rot, k_rot = rope(q, cos, sin, spec.rope_layout), rope(k, cos, sin, spec.rope_layout)
    scores = np.empty((spec.n_heads, n, n), np.float32)
    weights = np.empty_like(scores)
    heads = np.empty((n, spec.n_heads, hd), np.float32)
    hidden = causal_mask(n, window)
    for h in range(spec.n_heads):
        g = kv_head(h, spec)  # grouped-query attention: the K/V head this query head shares
        # scores: every query against every key, scaled by 1/sqrt(head_dim)
        s = (q_rot[:, h] @ k_rot[:, g].T) * np.float32(spec.attn_scale)
        # causal mask: no token sees the ones after it (nor, on a sliding layer, those out of the window)
        s[hidden] = -np.inf
        scores[h] = s
        # softmax along each row: weights >= 0 that sum to 1
        weights[h] = softmax(s)
        # weighted sum of the values
        heads[:, h] = weights[h] @ v[:, g]
    # output projection back to the model's width (Gemma normalizes it), then the residual connection
    out = heads.reshape(n, spec.q_dim) @ w.wo.T
    if w.post_attn_norm is not None:
        out = rms_norm(out, w.post_attn_norm, spec.rms_eps)
    return HandAttention(x, xn, q, k, v, cos, sin, q_rot, k_rot, scores, weights, heads, out, x + out, base, window)


def package_block(model: Model, x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The package's attention_block on x at positions 0..N-1: (its output, the K and V it cached),
    K and V as (N, n_kv_heads, head_dim) like HandAttention's."""
    spec, n = model.spec, x.shape[0]
    cache = KVCache(spec, max_tokens=n)
    cos, sin = rope_angles(np.arange(n), spec.n_rot, spec.layer_rope_base(block))
    y = attention_block(x, model.weights.block(block), block, 0, cos, sin, spec, cache)
    return y, cache.k[block][:, :n].transpose(1, 0, 2), cache.v[block][:, :n].transpose(1, 0, 2)


# --- 3. what the heads look at ------------------------------------------------------------------


def token_label(text: str) -> str:
    """A token as an axis label: a leading or lone space shown as '␣', newlines as '\\n'."""
    return text.replace(" ", "\u2423").replace("\n", "\\n") or "\u2205"


def shown_heads(spec: ArchSpec) -> list[tuple[int, int]]:
    """(block, head) pairs drawn: the first, a middle and the last block; their first, middle and last head."""
    blocks = sorted({0, spec.n_layers // 2, spec.n_layers - 1})
    heads = sorted({0, spec.n_heads // 2, spec.n_heads - 1})
    return [(b, h) for b in blocks for h in heads]


def attention_top(attention: Sequence[np.ndarray], tokens: Sequence[str], spec: ArchSpec) -> list[dict]:
    """For every block and head: from the last position, the token it weighs most, and how much."""
    rows = []
    last = len(tokens) - 1
    for b, a in enumerate(attention):
        for h in range(spec.n_heads):
            row = np.asarray(a[h, last], dtype=np.float64)
            top = int(np.argmax(row))
            rows.append(
                {
                    "block": b,
                    "head": h,
                    "kv_head": kv_head(h, spec),
                    "top_position": top,
                    "top_token": tokens[top],
                    "top_weight": row[top],
                    "first_token_weight": row[0],
                    "self_weight": row[last],
                }
            )
    return rows

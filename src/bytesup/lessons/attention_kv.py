"""Lesson 6, "Attention and the KV cache": one block's attention by hand, what the heads look at,
and what remembering keys and values costs.

What is computed, in the lesson's order, on the real weights of the run's model:

  1. one block's attention by hand for the prompt: x (the block's input; block 0's is the
     embedding, times sqrt(d_model) on Gemma) -> RMSNorm -> Q, K, V (+ biases on qwen2) ->
     (Gemma: RMSNorm of each head's q and k) -> rope on Q and K with the block's own base ->
     scores q.k / sqrt(head_dim) -> causal mask (and the block's sliding window) -> softmax ->
     weighted sum of V -> output projection (-> post_attention_norm on Gemma) -> residual; query
     head h reads K/V head h // (n_heads / n_kv_heads) (grouped-query attention). Every switch is
     the architecture table's (bytesup.model.arch). Each step is checked against the package's
     attention_block (bytesup.model.forward) for that block;
  2. rope: the angle pair i of a head turns through at position p is p * base^(-2i/n_rot); on
     the real queries the measured turn is compared with that (pairs as the table's rope layout
     has them: adjacent on llama GGUFs, halves on NeoX-style ones), and on a llama GGUF the row
     layout (adjacent pairs) with Hugging Face's (halves) gives the same scores;
  3. attention patterns: the weights every head of every block gives to each earlier token,
     from one traced forward pass over the prompt;
  4. the KV cache's size: 2 x blocks x KV heads x head_dim x bytes per element per token of
     context, for this model, the course's specimen and Llama-3-8B, against their weights;
  5. measured: cached decode versus recomputing the whole prefix each step (time per token as
     the context grows, on a resident model), and the cached logits against a full recompute.

Arithmetic is float32 throughout, as in the forward pass. The cache here holds float32 K and V
(this NumPy decoder); llama.cpp keeps them as F16 by default, so its cache is half the size.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from bytesup.lessons import LessonInputError, figure
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model.arch import ARCHITECTURES, ArchSpec
from bytesup.model.configs import (
    DEEPSEEK_CODER_6_7B,
    LLAMA3_8B,
    Architecture,
    kv_bytes_per_token,
    llama_tensor_shapes,
    type_bytes,
)
from bytesup.model.forward import (
    KVCache,
    Model,
    attention_block,
    embed,
    ffn_block,
    rms_norm,
    rope,
    rope_angles,
    softmax,
    unembed,
)
from bytesup.model.tokenizer import Tokenizer
from bytesup.model.trace import Trace

SPEC = LessonSpec(
    id="06_attention_and_the_kv_cache",
    title="Attention and the KV cache",
    kind=SERIES,
    position=6,
    source=(
        "Lesson 6 of the LLM Basics series (its text is not among the course files here; the numbers"
        " are recomputed from the model and published configurations)"
    ),
    reads=("model_gguf", "metadata_json"),
    tables=("kv_cache_size.csv", "kv_cache_timing.csv", "rope_angles.csv", "attention_top.csv"),
    figures={
        "attention_patterns.png": (
            "Attention weights over the prompt for three heads of the first, a middle and the last block:"
            " row = the token asking, column = the token looked at; above the diagonal is the future, masked"
        ),
        "kv_cache_size.png": (
            "KV cache size (F16) against context length up to each model's limit, beside the size of its"
            " weights (dashed)"
        ),
        "kv_cache_timing.png": (
            "Time per generated token with the KV cache and without it (recomputing the whole prefix),"
            " as the context grows; measured on this machine"
        ),
    },
    headlines=(
        Headline("kv_bytes_per_token", "KV cache per token of context, this model, F16 (as llama.cpp)", "bytes", ",d"),
        Headline("kv_bytes_per_token_f32", "the same in float32, as this NumPy decoder keeps it", "bytes", ",d"),
        Headline("gqa_group_size", "query heads sharing one K/V head", "", "d"),
        Headline("kv_mb_at_context_length", "KV cache at this model's full context, F16", "MB", ".1f"),
        Headline(
            "kv_cache_equals_weights_tokens",
            "context at which the F16 cache is as big as the model file",
            "tokens",
            ",.0f",
        ),
        Headline(
            "specimen_kv_bytes_per_token", "KV cache per token, deepseek-coder-6.7b (32 KV heads), F16", "bytes", ",d"
        ),
        Headline("llama3_8b_kv_bytes_per_token", "KV cache per token, Llama-3-8B (8 KV heads), F16", "bytes", ",d"),
        Headline("kv_cache_max_abs_diff", "max |logit difference|, cached decode against full recompute", "", ".1e"),
        Headline("timing_cached_s_at_max", "time per token with the cache, longest context timed", "s", ".3g"),
        Headline(
            "timing_recompute_s_at_max", "time per token recomputing the prefix, longest context timed", "s", ".3g"
        ),
        Headline("timing_recompute_over_cached_at_max", "recompute over cached, longest context timed", "", ".1f"),
        Headline(
            "attention_first_position_share",
            "heads whose strongest link from the last token is the first token",
            "",
            "%",
        ),
        Headline(
            "hand_vs_block_max_abs_diff", "attention by hand against attention_block, max |difference|", "", ".1e"
        ),
    ),
    config_keys=("prompt", "forward"),
    architectures=tuple(ARCHITECTURES),  # attention_by_hand follows every row of the table
    runs_model=True,
    runtime=60,  # the specimen streams 7 GB per pass: a handful of passes
)

# Context lengths from the same published config.json files as bytesup.model.configs
# (max_position_embeddings); configs.Architecture does not carry them. None of these models uses a
# sliding window (no sliding_window key): their caches grow with every token up to the limit.
# How the course's comparison models are stored: the specimen as its Q8_0 GGUF (matrices Q8_0,
# norm vectors F32, as llama.cpp's quantizer leaves them), Llama-3-8B as published (BF16 throughout).
STORED_AS = {DEEPSEEK_CODER_6_7B.name: ("Q8_0", "F32"), LLAMA3_8B.name: ("BF16", "BF16")}

BLOCK = 0  # the block whose attention is done by hand
CONTEXTS = (8, 32, 64, 128)  # context lengths the timing runs at
REPEATS = 3  # timed repeats per context (median reported), after one warm-up
DECODE_STEPS = 4  # greedy steps decoded with the cache before comparing with a full recompute
ROPE_PAIRS = (0, 1, 2, 4, 8, 16)  # pairs shown in the rope table (plus the last pair)
ROPE_POSITIONS = 8  # positions shown in the rope table


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


def rope_table(
    spec: ArchSpec, n_positions: int = ROPE_POSITIONS, pairs: Sequence[int] = ROPE_PAIRS, block: int = BLOCK
) -> list[dict]:
    """For a few pairs i: radians per token, tokens per full turn, and the angle at positions 0..n-1
    (with block ``block``'s rope base)."""
    theta = rope_theta(spec, block)
    chosen = sorted({i for i in pairs if i < len(theta)} | {len(theta) - 1})
    rows = []
    for i in chosen:
        dims = f"{i},{i + spec.n_rot // 2}" if spec.rope_layout == "neox" else f"{2 * i},{2 * i + 1}"
        row = {"pair": i, "dims": dims, "radians_per_token": theta[i], "tokens_per_turn": 2 * math.pi / theta[i]}
        row.update({f"pos_{p}": p * theta[i] for p in range(n_positions)})
        rows.append(row)
    return rows


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


# --- 4. what the cache costs ----------------------------------------------------------------------


def architecture_of(spec: ArchSpec, name: str) -> Architecture:
    """This run's model as a configs.Architecture (for kv_bytes_per_token)."""
    return Architecture(
        name,
        d_model=spec.d_model,
        d_ff=spec.d_ff,
        n_layers=spec.n_layers,
        vocab=spec.vocab,
        n_heads=spec.n_heads,
        n_kv_heads=spec.n_kv_heads,
        head_dim=spec.head_dim,
        tied=spec.tied,
        source="this run's GGUF metadata",
    )


def kv_cache_bytes(bytes_per_token: int, tokens, window: int | None = None):
    """Cache bytes after `tokens` tokens of context. A sliding-window model keeps only the last
    `window` positions, so its cache stops growing there; window None: every position is kept."""
    tokens = np.asarray(tokens)
    kept = tokens if window is None else np.minimum(tokens, window)
    return bytes_per_token * kept


def stored_bytes(a: Architecture, matrices: str, vectors: str) -> int:
    """Bytes of a llama-style model's weights stored as `matrices` (2-D tensors) and `vectors` (norms)."""
    return sum(
        type_bytes(matrices if len(shape) == 2 else vectors, math.prod(shape)) for _, shape in llama_tensor_shapes(a)
    )


def kv_size_table(spec: ArchSpec, model: str, file_bytes: int, window: int | None = None) -> list[dict]:
    """Per model: KV bytes per token (F16, F32), the cache at its full context, its weights, and the
    context at which the F16 cache is as large as the weights."""
    entries = [(architecture_of(spec, model), spec.context_length, window, file_bytes, "the GGUF file")]
    for a in (DEEPSEEK_CODER_6_7B, LLAMA3_8B):
        matrices, vectors = STORED_AS[a.name]
        what = matrices if matrices == vectors else f"{matrices} (norms {vectors})"
        entries.append((a, a.context_length, None, stored_bytes(a, matrices, vectors), what))
    rows = []
    for a, context, win, weights, what in entries:
        per_token = kv_bytes_per_token(a, "F16")
        rows.append(
            {
                "model": a.name,
                "blocks": a.n_layers,
                "heads": a.n_heads,
                "kv_heads": a.n_kv_heads,
                "head_dim": a.head_dim,
                "kv_bytes_per_token_f16": per_token,
                "kv_bytes_per_token_f32": kv_bytes_per_token(a, "F32"),
                "context_length": context,
                "sliding_window": win,
                "kv_bytes_at_context_f16": int(kv_cache_bytes(per_token, context, win)),
                "weights_bytes": weights,
                "weights_stored_as": what,
                "cache_equals_weights_tokens": weights / per_token,
                "source": a.source,
            }
        )
    return rows


# --- 5. measured: with and without the cache ------------------------------------------------------


def recompute_last_logits(model: Model, ids) -> np.ndarray:
    """A decoder without a KV cache: every step runs the whole prefix through every block again
    and keeps the last position's logits. (attention_block writes K and V into a scratch cache that
    is thrown away afterwards.)"""
    spec, weights = model.spec, model.weights
    ids = np.asarray(ids, dtype=np.int64)
    scratch = KVCache(spec, max_tokens=len(ids))
    x = embed(weights, ids)
    if spec.embed_scale != 1.0:  # Gemma: the row times sqrt(d_model)
        x = x * np.float32(spec.embed_scale)
    for layer in range(spec.n_layers):
        w = weights.block(layer)
        cos, sin = rope_angles(np.arange(len(ids)), spec.n_rot, spec.layer_rope_base(layer))  # the layer's own base
        x = attention_block(x, w, layer, 0, cos, sin, spec, scratch)
        x = ffn_block(x, w, spec)
    return unembed(rms_norm(x[-1:], weights.output_norm, spec.rms_eps), weights, spec)[0]


def cache_check(model: Model, ids: Sequence[int], steps: int = DECODE_STEPS) -> tuple[dict, Trace, list[int]]:
    """Prefill the prompt (traced: residuals and attention weights), decode `steps` greedy tokens with
    the cache, then recompute all those tokens without it and compare the logits position by position."""
    n = len(ids)
    cache = model.new_cache(n + steps)
    trace = Trace(all_positions=True, keep_attention=True)
    logits = model.forward(ids, cache, trace=trace)[-1]
    seq, cached = list(ids), [logits]
    for _ in range(steps):
        seq.append(int(np.argmax(logits)))
        logits = model.forward(seq[-1:], cache)[0]  # one new token; the prefix's K and V come from the cache
        cached.append(logits)
    full = model.forward(seq)  # no cache: every position computed from scratch
    diffs = [float(np.abs(c - full[n - 1 + j]).max()) for j, c in enumerate(cached)]
    metrics = {
        "kv_cache_decode_steps": steps,
        "kv_cache_generated_ids": seq[n:],
        "kv_cache_max_abs_diff": diffs[-1],
        "kv_cache_max_abs_diff_all_steps": max(diffs),
        "kv_cache_same_next_token": int(np.argmax(cached[-1])) == int(np.argmax(full[-1])),
        "kv_cache_positions": cache.n,
        "kv_cache_float32_bytes_used": sum(2 * k[:, : cache.n].nbytes for k in cache.k),
    }
    return metrics, trace, seq


def _seconds(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def time_decode(
    model: Model, ids: Sequence[int], contexts: Sequence[int] = CONTEXTS, repeats: int = REPEATS
) -> list[dict]:
    """Seconds for one generated token at each context length n: with the cache (one token through
    the model, the n-1 before it cached) and without (the whole n-token prefix recomputed). The
    prompt's ids are repeated to fill the longest context. Median, min and max of `repeats` runs."""
    contexts = sorted({int(c) for c in contexts if 2 <= int(c) <= model.spec.context_length})
    if not contexts:
        return []
    seq = np.resize(np.asarray(ids, dtype=np.int64), contexts[-1])
    cache = model.new_cache(contexts[-1])
    model.forward(seq[: contexts[0] - 1], cache)
    model.forward(seq[contexts[0] - 1 : contexts[0]], cache)  # warm-up
    cache.n = contexts[0] - 1
    recompute_last_logits(model, seq[: contexts[0]])  # warm-up
    rows = []
    for n in contexts:
        if cache.n < n - 1:
            model.forward(seq[cache.n : n - 1], cache)  # fill the cache up to n-1 positions (not timed)
        cached = []
        for _ in range(repeats):
            cached.append(_seconds(model.forward, seq[n - 1 : n], cache))  # one new token, n - 1 cached
            cache.n = n - 1  # forget that token again, so every repeat decodes the same step
        recomputed = [_seconds(recompute_last_logits, model, seq[:n]) for _ in range(repeats)]
        rows.append(
            {
                "context": n,
                "repeats": repeats,
                "cached_median_s": float(np.median(cached)),
                "cached_min_s": min(cached),
                "cached_max_s": max(cached),
                "recompute_median_s": float(np.median(recomputed)),
                "recompute_min_s": min(recomputed),
                "recompute_max_s": max(recomputed),
                "recompute_over_cached": float(np.median(recomputed) / np.median(cached)),
            }
        )
    return rows


# --- the whole lesson ---------------------------------------------------------------------------


def encode_prompt(metadata: Mapping, prompt: str) -> tuple[list[int], list[str]]:
    """The prompt's token ids and each token's text."""
    tok = Tokenizer.from_metadata(metadata)
    ids = tok.encode(prompt)
    if not ids:
        raise LessonInputError(f"prompt {prompt!r} encodes to no tokens; set config key 'prompt' to some text")
    return ids, [tok.token_text(i) for i in ids]


def resident_budget_bytes(forward: Mapping | None) -> int:
    try:
        return int(float((forward or {})["resident_budget_mb"]) * 2**20)
    except (KeyError, TypeError, ValueError):
        raise LessonInputError(
            f"config key forward.resident_budget_mb: expected a number of MB, got {forward!r}"
        ) from None


def run(
    model_gguf: str | os.PathLike,
    metadata: Mapping,
    prompt: str,
    forward: Mapping | None = None,
    *,
    model_name: str = "this model",
    block: int = BLOCK,
    contexts: Sequence[int] = CONTEXTS,
    repeats: int = REPEATS,
    decode_steps: int = DECODE_STEPS,
    window: int | None = None,
) -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports, and what its cells show, each computed once.

    tables: "spec", "ids", "tokens", "weights" (block's AttnWeights), "hand" (HandAttention),
    "package" (attention_block's y, K, V), "attention" (per block, heads x N x N), "attention_top",
    "rope", "kv_size", "timing" (rows; [] when the model streams), "mode".
    window: the model's sliding window (None for llama: the cache keeps every position).
    """
    ids, tokens = encode_prompt(metadata, prompt)
    with Model.from_gguf(model_gguf, resident_budget_bytes=resident_budget_bytes(forward)) as model:
        spec = model.spec
        if not 0 <= block < spec.n_layers:
            raise LessonInputError(f"block {block} does not exist; the model has blocks 0..{spec.n_layers - 1}")
        check, trace, _ = cache_check(model, ids, decode_steps)
        x = np.array(trace.residual[block])  # the block's input: after the embedding for block 0
        w = AttnWeights.of(model, block)
        hand = attention_by_hand(x, w, spec, block)
        y_pkg, k_pkg, v_pkg = package_block(model, x, block)
        timing = time_decode(model, ids, contexts, repeats) if model.mode == "resident" else []
        mode = model.mode
    attention = [np.asarray(a) for a in trace.attention]

    m: dict = {
        "prompt": prompt,
        "prompt_ids": ids,
        "prompt_tokens": tokens,
        "n_prompt_tokens": len(ids),
        "architecture": spec.arch,
        "block_count": spec.n_layers,
        "embedding_length": spec.d_model,
        "head_count": spec.n_heads,
        "head_count_kv": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "rope_dimension_count": spec.n_rot,
        "rope_freq_base": spec.rope_base,
        "context_length": spec.context_length,
        "weights_mode": mode,
        # grouped-query attention
        "gqa_group_size": spec.group,
        "gqa_kv_head_of_query_head": [kv_head(h, spec) for h in range(spec.n_heads)],
    }
    # 1. by hand against the package
    last = len(ids) - 1
    m.update(
        {
            "hand_block": block,
            "hand_q_shape": list(hand.q.shape),
            "hand_k_shape": list(hand.k.shape),
            "hand_scores_last_head0": [None if not np.isfinite(s) else s for s in hand.scores[0, last]],
            "hand_weights_last_head0": hand.weights[0, last],
            "hand_weights_row_sums_max_abs_err": np.abs(hand.weights.sum(-1) - 1).max(),
            "hand_masked_weight_max": hand.weights[:, causal_mask(len(ids), hand.window)].max(initial=0.0),
            "hand_rope_base": hand.rope_base,
            "hand_window": hand.window,
            "rope_layout": spec.rope_layout,
            "hand_qk_norm": w.q_norm is not None,
            "hand_post_attention_norm": w.post_attn_norm is not None,
            "attention_scale": spec.attn_scale,
            "hand_out_last_first3": hand.out[last, :3],
            "hand_vs_block_max_abs_diff": np.abs(hand.y - y_pkg).max(),
            "hand_k_vs_cache_max_abs_diff": np.abs(hand.k_rot - k_pkg).max(),
            "hand_v_vs_cache_max_abs_diff": np.abs(hand.v - v_pkg).max(),
            "hand_weights_vs_trace_max_abs_diff": np.abs(hand.weights - attention[block]).max(),
            "block_attention_y_last_first3": y_pkg[last, :3],
        }
    )
    # 2. rope on the real queries: the turn of each pair of query head 0 at each position
    theta = rope_theta(spec, block)
    layout = spec.rope_layout
    turned = wrap(pair_angles(hand.q_rot[:, 0, : spec.n_rot], layout) - pair_angles(hand.q[:, 0, : spec.n_rot], layout))
    expected = wrap(np.outer(np.arange(len(ids)), theta))
    m.update(
        {
            "rope_radians_per_token_first_pair": theta[0],
            "rope_radians_per_token_last_pair": theta[-1],
            "rope_tokens_per_turn_first_pair": 2 * math.pi / theta[0],
            "rope_tokens_per_turn_last_pair": 2 * math.pi / theta[-1],
            "rope_turn_max_abs_err": np.abs(wrap(turned - expected)).max(),
            "rope_norm_change_max_rel": np.abs(
                np.linalg.norm(hand.q_rot, axis=-1) / np.linalg.norm(hand.q, axis=-1) - 1
            ).max(),
        }
    )
    # a llama GGUF permutes Q/K rows for adjacent pairs; a NeoX-style file keeps Hugging Face's rows (nothing to undo)
    m["rope_layouts_scores_max_abs_diff"] = None
    if layout == "adjacent" and w.q_norm is None and w.bq is None:
        hf = hf_layout_scores(hand, w, spec)
        visible = ~causal_mask(len(ids), hand.window)
        m["rope_layouts_scores_max_abs_diff"] = np.abs(hf[:, visible] - hand.scores[:, visible]).max()
    # 3. what the heads look at
    top = attention_top(attention, tokens, spec)
    m["attention_first_position_share"] = float(np.mean([r["top_position"] == 0 for r in top]))
    m["attention_self_share"] = float(np.mean([r["top_position"] == last for r in top]))
    by = {(r["block"], r["head"]): r for r in top}
    m["attention_top_shown"] = [
        {
            "block": b,
            "head": h,
            "position": by[b, h]["top_position"],
            "token": by[b, h]["top_token"],
            "weight": by[b, h]["top_weight"],
        }
        for b, h in shown_heads(spec)
    ]
    # 4. the cache's size
    file_bytes = os.path.getsize(model_gguf)
    size = kv_size_table(spec, model_name, file_bytes, window)
    this, specimen, llama = size
    m.update(
        {
            "kv_bytes_per_token": this["kv_bytes_per_token_f16"],
            "kv_bytes_per_token_f32": this["kv_bytes_per_token_f32"],
            "kv_bytes_at_context_length": this["kv_bytes_at_context_f16"],
            "kv_mb_at_context_length": this["kv_bytes_at_context_f16"] / 1e6,
            "kv_sliding_window": window,
            "model_file_bytes": file_bytes,
            "kv_cache_equals_weights_tokens": this["cache_equals_weights_tokens"],
            "specimen_kv_bytes_per_token": specimen["kv_bytes_per_token_f16"],
            "specimen_kv_bytes_at_context_length": specimen["kv_bytes_at_context_f16"],
            "specimen_context_length": specimen["context_length"],
            "specimen_weights_bytes": specimen["weights_bytes"],
            "specimen_cache_equals_weights_tokens": specimen["cache_equals_weights_tokens"],
            "llama3_8b_kv_bytes_per_token": llama["kv_bytes_per_token_f16"],
            "llama3_8b_kv_bytes_at_context_length": llama["kv_bytes_at_context_f16"],
            "llama3_8b_context_length": llama["context_length"],
            "llama3_8b_weights_bytes": llama["weights_bytes"],
            "llama3_8b_cache_equals_weights_tokens": llama["cache_equals_weights_tokens"],
            # without grouped-query attention (as many K/V heads as query heads) the cache would be this much larger
            "kv_bytes_per_token_without_gqa": kv_bytes_per_token(
                replace(architecture_of(spec, model_name), n_kv_heads=spec.n_heads)
            ),
        }
    )
    # 5. measured
    m.update(check)
    m.update(timing_metrics(timing, mode))
    tables = {
        "spec": spec,
        "ids": ids,
        "tokens": tokens,
        "weights": w,
        "hand": hand,
        "package": (y_pkg, k_pkg, v_pkg),
        "attention": attention,
        "attention_top": top,
        "rope": rope_table(spec, block=block),
        "kv_size": size,
        "timing": timing,
        "mode": mode,
        "trace": trace,
    }
    return m, tables


def timing_metrics(rows: Sequence[Mapping], mode: str) -> dict:
    """The timing table's medians as lists, and the longest context's numbers; None when not timed."""
    if not rows:
        why = "model streams its weights: timing runs on a resident model only" if mode != "resident" else "no context"
        return {
            "timing_done": False,
            "timing_skipped": why,
            "timing_contexts": [],
            "timing_cached_median_s": [],
            "timing_recompute_median_s": [],
            "timing_cached_min_s": [],
            "timing_recompute_min_s": [],
            "timing_cached_s_at_max": None,
            "timing_recompute_s_at_max": None,
            "timing_recompute_over_cached_at_max": None,
            "timing_max_context": None,
        }
    return {
        "timing_done": True,
        "timing_skipped": None,
        "timing_repeats": rows[0]["repeats"],
        "timing_contexts": [r["context"] for r in rows],
        "timing_cached_median_s": [r["cached_median_s"] for r in rows],
        "timing_recompute_median_s": [r["recompute_median_s"] for r in rows],
        "timing_cached_min_s": [r["cached_min_s"] for r in rows],  # the least disturbed runs, beside the medians
        "timing_recompute_min_s": [r["recompute_min_s"] for r in rows],
        "timing_max_context": rows[-1]["context"],
        "timing_cached_s_at_max": rows[-1]["cached_median_s"],
        "timing_recompute_s_at_max": rows[-1]["recompute_median_s"],
        "timing_recompute_over_cached_at_max": rows[-1]["recompute_over_cached"],
    }


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """Check the lesson's claims (published configurations) against this run's metrics."""
    context = claims_mod.run_context(model, sha256, metadata)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- figures ------------------------------------------------------------------------------------


def plot_attention(attention: Sequence[np.ndarray], tokens: Sequence[str], spec: ArchSpec, title: str = ""):
    """Heatmaps of the shown heads' attention weights over the prompt (rows: queries, columns: keys)."""
    pairs = shown_heads(spec)
    blocks = sorted({b for b, _ in pairs})
    heads = sorted({h for _, h in pairs})
    n = len(tokens)
    labels = [token_label(t) for t in tokens]
    fig, axes = figure(
        len(blocks), len(heads), figsize=(7.0, 1.2 + 2.0 * len(blocks)), squeeze=False, layout="constrained"
    )
    image = None
    for r, b in enumerate(blocks):
        for c, h in enumerate(heads):
            ax = axes[r][c]
            a = np.asarray(attention[b][h], dtype=np.float64)
            shown = np.ma.masked_where(causal_mask(n), a)  # the masked future stays blank
            image = ax.imshow(shown, vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_title(f"block {b}, head {h} (KV {kv_head(h, spec)})", fontsize=8)
            ax.set_xticks(range(n), labels if r == len(blocks) - 1 else [""] * n, rotation=60, fontsize=7, ha="right")
            ax.set_yticks(range(n), labels if c == 0 else [""] * n, fontsize=7)
            if n <= 8:
                for i in range(n):
                    for j in range(i + 1):
                        ax.text(
                            j,
                            i,
                            f"{a[i, j]:.2f}",
                            ha="center",
                            va="center",
                            fontsize=6,
                            color="white" if a[i, j] < 0.6 else "black",
                        )
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.supxlabel("key: the token looked at", fontsize=8)
    fig.supylabel("query: the token asking", fontsize=8)
    return fig


def _bytes_label(v: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} B"


def plot_kv_size(rows: Sequence[Mapping], title: str = ""):
    """Cache size (F16) against context length, log-log, with each model's weights as a dashed line."""
    from matplotlib.ticker import FuncFormatter

    fig, ax = figure()
    for i, r in enumerate(rows):
        colour = f"C{i}"
        t = np.unique(np.geomspace(16, r["context_length"], 200).astype(int))
        ax.plot(
            t,
            kv_cache_bytes(r["kv_bytes_per_token_f16"], t, r["sliding_window"]),
            color=colour,
            lw=2,
            label=f"{r['model']}: {r['kv_bytes_per_token_f16']:,} B/token ({r['kv_heads']} KV heads)",
        )
        ax.axhline(
            r["weights_bytes"],
            color=colour,
            ls="--",
            lw=1,
            label=f"{r['model']} weights, {r['weights_stored_as']}: {_bytes_label(r['weights_bytes'])}",
        )
        if r["cache_equals_weights_tokens"] <= r["context_length"]:  # the cache outgrows the weights here
            ax.plot(r["cache_equals_weights_tokens"], r["weights_bytes"], "o", color=colour, ms=5)
            ax.annotate(
                f"{r['cache_equals_weights_tokens']:,.0f}",
                (r["cache_equals_weights_tokens"], r["weights_bytes"]),
                textcoords="offset points",
                xytext=(-4, 6),
                ha="right",
                fontsize=7,
                color=colour,
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [2**k for k in range(4, 1 + int(math.log2(max(r["context_length"] for r in rows))), 2)]
    ax.set_xticks(ticks, [f"{t // 1024}k" if t >= 1024 else str(t) for t in ticks])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _bytes_label(v)))
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("KV cache (solid) and weights (dashed)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=6.5, loc="upper left")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_timing(rows: Sequence[Mapping], title: str = ""):
    """Seconds per generated token, with and without the cache, against the context length."""
    fig, ax = figure()
    if rows:
        n = [r["context"] for r in rows]
        for key, label, colour in (
            ("recompute", "without the cache: whole prefix recomputed", "C3"),
            ("cached", "with the KV cache: one token through the model", "C0"),
        ):
            med = np.array([r[f"{key}_median_s"] for r in rows])
            lo = med - np.array([r[f"{key}_min_s"] for r in rows])
            hi = np.array([r[f"{key}_max_s"] for r in rows]) - med
            ax.errorbar(n, med, yerr=[lo, hi], marker="o", color=colour, capsize=3, label=f"{label} (median, min-max)")
        ax.set_xticks(n)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="upper left")
    else:
        ax.text(0.5, 0.5, "not timed: the model streams its weights", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("seconds per generated token")
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig

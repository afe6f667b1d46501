"""Lesson 6's steps 4 and 5: what the KV cache costs, and decode measured with and without it."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import numpy as np

from bytesup.gguf.sizes import type_bytes
from bytesup.model.arch import ArchSpec
from bytesup.model.configs import (
    DEEPSEEK_CODER_6_7B,
    LLAMA3_8B,
    Architecture,
    KVLayers,
    context_for_kv_share,
    kv_bytes_per_token,
    kv_cache_bytes,
    kv_layers,
    llama_tensor_shapes,
    spec_kv_layers,
)
from bytesup.model.forward import (
    KVCache,
    Model,
    attention_block,
    embed,
    ffn_block,
    rms_norm,
    rope_angles,
    unembed,
)
from bytesup.model.trace import Trace

# The comparison models use no sliding window: their caches grow with every token up to their
# context (configs.Architecture.context_length, the published max_position_embeddings). How the
# course's comparison models are stored: the specimen as its Q8_0 GGUF (matrices Q8_0,
# norm vectors F32, as llama.cpp's quantizer leaves them), Llama-3-8B as published (BF16 throughout).
STORED_AS = {DEEPSEEK_CODER_6_7B.name: ("Q8_0", "F32"), LLAMA3_8B.name: ("BF16", "BF16")}
CONTEXTS = (8, 32, 64, 128)  # context lengths the timing runs at
REPEATS = 3  # timed repeats per context (median reported), after one warm-up
DECODE_STEPS = 4  # greedy steps decoded with the cache before comparing with a full recompute


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


def stored_bytes(a: Architecture, matrices: str, vectors: str) -> int:
    """Bytes of a llama-style model's weights stored as `matrices` (2-D tensors) and `vectors` (norms)."""
    return sum(
        type_bytes(matrices if len(shape) == 2 else vectors, math.prod(shape)) for _, shape in llama_tensor_shapes(a)
    )


def cache_equals_weights_tokens(layers: KVLayers, weights_bytes: int, context_length: int) -> int | None:
    """The shortest context (tokens) at which the cache holds as many bytes as the weights, or None
    when it never does within the model's context: a model whose sliding layers stop growing at
    their window may stay below its weights however long the text."""
    return context_for_kv_share(layers, weights_bytes, 0.5, context_length)


# kv_size_table's columns as kv_cache_size.csv writes them (kv_layers, the per-layer list, stays out)
KV_SIZE_COLUMNS = (
    "model",
    "blocks",
    "heads",
    "kv_heads",
    "head_dim",
    "sliding_window",
    "global_layers",
    "kv_bytes_per_token_f16",
    "kv_bytes_per_token_f32",
    "context_length",
    "kv_bytes_at_context_f16",
    "kv_bytes_at_context_if_every_layer_grew_f16",
    "weights_bytes",
    "weights_stored_as",
    "cache_equals_weights_tokens",
    "cache_at_context_over_weights",
    "source",
)


def kv_size_table(spec: ArchSpec, model: str, file_bytes: int) -> list[dict]:
    """Per model: KV bytes per token (F16, F32) while every layer still grows, the cache at its full
    context counted layer by layer (a sliding-window layer keeps only its window: on Gemma 3 only
    the global layers hold the whole context), its weights, and the context at which the F16 cache
    is as large as the weights (None: never, within the model's context)."""
    entries = [(architecture_of(spec, model), spec.context_length, spec_kv_layers(spec), file_bytes, "the GGUF file")]
    for a in (DEEPSEEK_CODER_6_7B, LLAMA3_8B):
        matrices, vectors = STORED_AS[a.name]
        what = matrices if matrices == vectors else f"{matrices} (norms {vectors})"
        layers = kv_layers(a.n_layers, a.n_kv_heads, a.head_dim, a.head_dim)
        entries.append((a, a.context_length, layers, stored_bytes(a, matrices, vectors), what))
    rows = []
    for a, context, layers, weights, what in entries:
        windows = {w for _, w in layers if w is not None}
        at_context = kv_cache_bytes(layers, context)
        per_token = kv_bytes_per_token(a, "F16")
        rows.append(
            {
                "model": a.name,
                "blocks": a.n_layers,
                "heads": a.n_heads,
                "kv_heads": a.n_kv_heads,
                "head_dim": a.head_dim,
                "sliding_window": min(windows) if windows else None,
                "global_layers": sum(w is None for _, w in layers),
                "kv_bytes_per_token_f16": per_token,
                "kv_bytes_per_token_f32": kv_bytes_per_token(a, "F32"),
                "context_length": context,
                "kv_bytes_at_context_f16": at_context,
                "kv_bytes_at_context_if_every_layer_grew_f16": per_token * context if windows else None,
                "weights_bytes": weights,
                "weights_stored_as": what,
                "cache_equals_weights_tokens": cache_equals_weights_tokens(layers, weights, context),
                "cache_at_context_over_weights": at_context / weights,
                "source": a.source,
                "kv_layers": layers,
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

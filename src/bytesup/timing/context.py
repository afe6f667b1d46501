"""Decode across context: what the KV cache adds to the bytes a token reads, measured.

At batch 1 a decode step reads every weight once, and also the keys and values of every position
already in the cache: at context T each block reads T x n_kv_heads x head_dim keys and as many
values (on a sliding-window layer, only the last `window` positions). So

    bytes per token = weight bytes + KV bytes(T),    KV bytes(T) = sum over blocks of
                      min(T, window) x bytes per position of one block (configs.kv_bytes)

and the ceiling tokens/s = read bandwidth / that sum falls as T grows. `decode_by_context()` times
the project's decoder at contexts 0, 512, 2,048 and 8,192 (capped at the model's context length and
at a memory budget for the cache), with the cache filled with random keys and values: a step's time
depends on how many positions it reads, not on what they hold, and filling 8,192 positions by a real
prefill would cost minutes of quadratic attention the measurement does not need.
"""

from __future__ import annotations

import logging

import numpy as np

from bytesup.model.configs import context_for_kv_share, kv_cache_bytes, spec_kv_layers
from bytesup.model.forward import flops_per_token
from bytesup.timing.measure import summarize
from bytesup.timing.steps import NumpyDecoder

log = logging.getLogger(__name__)

DECODE_CONTEXTS = (0, 512, 2048, 8192)
KV_BUDGET_BYTES = 1 << 30  # the largest float32 KV cache the sweep fills (about 8,192 positions of a 0.5B model)
KV_ITEM_TYPE = "F32"  # the NumPy decoder keeps its cache in float32
KV_VISIBLE_SHARE = 0.10  # the KV cache's share of a step's bytes from which the lessons call it visible


def kv_bytes_read(shape, positions: int, cache_type: str = KV_ITEM_TYPE) -> int:
    """Bytes of keys and values one decode step reads when the cache holds `positions` positions
    (this step's own included): every block reads them all, a sliding-window layer (an ArchSpec's
    layer_window) only its last `window` (configs.kv_cache_bytes, layer by layer)."""
    return kv_cache_bytes(spec_kv_layers(shape, cache_type), positions)


def kv_share(weight_bytes: int, kv: int) -> float:
    """The KV cache's share of the bytes one decode step reads."""
    return kv / (weight_bytes + kv) if weight_bytes + kv else 0.0


def context_for_share(shape, weight_bytes: int, share: float, limit: int, cache_type: str = KV_ITEM_TYPE) -> int | None:
    """The fewest positions in the cache at which its keys and values are `share` of the bytes a
    decode step reads (configs.context_for_kv_share), or None when that takes more than `limit`."""
    return context_for_kv_share(spec_kv_layers(shape, cache_type), weight_bytes, share, limit)


def contexts_for(
    spec, steps: int, wanted=DECODE_CONTEXTS, kv_budget: int = KV_BUDGET_BYTES
) -> tuple[list[int], list[str]]:
    """The contexts the sweep can time (each step plus its `steps` timed tokens within the model's
    context length, the cache within `kv_budget`), and one line per context left out or lowered."""
    out, notes = [], []
    limit = spec.context_length - steps
    for c in sorted({int(c) for c in wanted}):
        use = min(c, limit)
        if use < 0:
            notes.append(
                f"context {c}: the model's context length {spec.context_length} leaves no room for {steps} steps"
            )
            continue
        if use < c:
            notes.append(f"context {c} capped at {use}: the model's context length is {spec.context_length}")
        need = kv_bytes_read(spec, use + steps)
        if need > kv_budget:
            notes.append(
                f"context {c}: a float32 KV cache of {need / 1e6:,.0f} MB is over the sweep's {kv_budget / 1e6:,.0f} MB"
            )
            continue
        if use not in out:
            out.append(use)
    return out, notes


def fill_cache(cache, spec, positions: int, seed: int) -> None:
    """Put `positions` positions of random keys and values in every block of a fresh cache.

    One random (n_kv_heads, positions, head_dim) block of keys and one of values, appended to every
    layer through the cache's own append (so its layout is the one decode reads).
    """
    if positions <= 0:
        return
    rng = np.random.default_rng(seed)
    shape = (spec.n_kv_heads, positions, spec.head_dim)
    k = rng.standard_normal(shape, dtype=np.float32)
    v = rng.standard_normal(shape, dtype=np.float32)
    for layer in range(spec.n_layers):
        cache.append(layer, k, v, 0)
    cache.n = positions


def time_steps_at(model, context: int, steps: int, warmup: int, first_id: int, seed: int) -> list[float]:
    """Seconds of each of `steps` decode steps after `warmup` untimed ones, the cache holding
    `context` positions before the first."""
    with NumpyDecoder(model, context + warmup + steps) as dec:
        fill_cache(dec.cache, model.spec, context, seed)
        dec.start_at(first_id)
        return [dec.step() for _ in range(warmup + steps)][warmup:]


def context_row(spec, context: int, steps: int, warmup: int, weight_bytes: int, stats: dict) -> dict:
    """One measured context: tokens/s, the weights' and the KV cache's bytes per token (the mean over
    the timed steps), their sum and the GB/s it implies; FLOPs per token at the mean context."""
    read = [kv_bytes_read(spec, context + warmup + i + 1) for i in range(steps)]
    kv = int(round(sum(read) / len(read)))
    mean_context = context + warmup + (steps + 1) / 2
    tps = 1.0 / stats["median_s"]
    return {
        "context": context,
        "steps": steps,
        "mean_positions_read": mean_context,
        "median_s": stats["median_s"],
        "rel_iqr": stats["rel_iqr"],
        "noisy": stats["noisy"],
        "tokens_per_s": tps,
        "weight_bytes_per_token": weight_bytes,
        "kv_bytes_per_token": kv,
        "bytes_per_token": weight_bytes + kv,
        "kv_share_of_bytes": kv_share(weight_bytes, kv),
        "gbps": (weight_bytes + kv) * tps / 1e9,
        "flops_per_token": flops_per_token(spec, int(round(mean_context))),
    }


def decode_by_context(
    model, contexts, steps: int, warmup: int, noisy_spread: float, weight_bytes: int, first_id: int, seed: int
) -> list[dict]:
    """context_row() for each context, timed one after the other (each in a fresh cache)."""
    rows = []
    for c in contexts:
        stats = summarize(time_steps_at(model, c, steps, warmup, first_id, seed), noisy_spread)
        rows.append(context_row(model.spec, c, steps, warmup, weight_bytes, stats))
        log.info(
            "context %d: %.1f tokens/s, KV %.1f%% of the bytes read",
            c,
            rows[-1]["tokens_per_s"],
            100 * rows[-1]["kv_share_of_bytes"],
        )
    return rows

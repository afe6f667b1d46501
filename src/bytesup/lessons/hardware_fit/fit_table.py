"""Lesson 7's step 3: the fit of every model, storage type and context on every device, and its ceiling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.lessons.hardware_fit.catalog import Device
from bytesup.lessons.hardware_fit.storage import GB
from bytesup.model.configs import kv_cache_bytes
from bytesup.timing.ceiling import CONTEXT_4K, tokens_per_s

CONTEXTS = {"4k": CONTEXT_4K, "32k": 32768, "128k": 131072}


# --- 3. the fit ---------------------------------------------------------------------------------------


FIT_COLUMNS = (
    "model_key",
    "model",
    "quant",
    "context",
    "context_tokens",
    "context_capped",
    "sliding_window",
    "device",
    "device_name",
    "weights_bytes",
    "kv_cache_bytes",
    "total_bytes",
    "total_gb",
    "device_memory_bytes",
    "fits",
    "left_bytes",
    "read_per_token_bytes",
    "bandwidth_gbps",
    "ceiling_tps",
)


def fit_rows(models: Sequence[Mapping], devices: Sequence[Device]) -> list[dict]:
    """One row per (model, storage, context, device): memory needed, fits, what is left, the ceiling.

    The context is capped at the model's published maximum (context_capped says when); the cache
    counts each layer's positions (a sliding layer its window's); the ceiling
    (bytesup.timing.ceiling.tokens_per_s: weights as stored plus the cache at that context) is for
    the last token of that context, when the whole cache is read along with the weights.
    """
    rows = []
    for m in models:
        for label, requested in CONTEXTS.items():
            cap = m.get("max_context")
            tokens = min(requested, cap) if cap else requested
            kv = kv_cache_bytes(m["kv_layers"], tokens)  # layer by layer: a sliding layer keeps its window
            total = m["weights_bytes"] + kv
            read = m["read_per_token_bytes"] + kv
            for d in devices:
                fits = None if d.memory_bytes is None else total <= d.memory_bytes
                rows.append(
                    {
                        "model_key": m["key"],
                        "model": m["model"],
                        "quant": m["quant"],
                        "context": label,
                        "context_tokens": tokens,
                        "context_capped": tokens < requested,
                        "sliding_window": m.get("sliding_window"),
                        "device": d.key,
                        "device_name": d.name,
                        "weights_bytes": m["weights_bytes"],
                        "kv_cache_bytes": kv,
                        "total_bytes": total,
                        "total_gb": total / GB,
                        "device_memory_bytes": d.memory_bytes,
                        "fits": fits,
                        "left_bytes": None if d.memory_bytes is None else d.memory_bytes - total,
                        "read_per_token_bytes": read,
                        "bandwidth_gbps": d.bandwidth_gbps,
                        "ceiling_tps": tokens_per_s(d.bandwidth_gbps, m["read_per_token_bytes"], kv),
                    }
                )
    return rows


def find_row(rows: Sequence[Mapping], model_key: str, context: str, device: str) -> dict | None:
    return next(
        (r for r in rows if r["model_key"] == model_key and r["context"] == context and r["device"] == device), None
    )

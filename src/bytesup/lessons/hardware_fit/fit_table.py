"""Lesson 7's step 3: the fit of every model, storage type and context on every device, and its ceiling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.lessons.hardware_fit.catalog import Device
from bytesup.lessons.hardware_fit.storage import GB

CONTEXTS = {"4k": 4096, "32k": 32768, "128k": 131072}


# --- 3. the fit ---------------------------------------------------------------------------------------


def kv_cache_bytes(kv_bytes_per_token: int, context: int) -> int:
    """The whole cache at `context` tokens."""
    return kv_bytes_per_token * context


def ceiling_tps(bandwidth_gbps: float | None, bytes_per_token: int) -> float | None:
    """tokens/s ceiling: bandwidth / bytes read per token."""
    if bandwidth_gbps is None or bytes_per_token <= 0:
        return None
    return bandwidth_gbps * GB / bytes_per_token


FIT_COLUMNS = (
    "model_key",
    "model",
    "quant",
    "context",
    "context_tokens",
    "context_capped",
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

    The context is capped at the model's published maximum (context_capped says when); the ceiling is
    for the last token of that context, when the whole cache is read along with the weights.
    """
    rows = []
    for m in models:
        for label, requested in CONTEXTS.items():
            cap = m.get("max_context")
            tokens = min(requested, cap) if cap else requested
            kv = kv_cache_bytes(m["kv_bytes_per_token"], tokens)
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
                        "ceiling_tps": ceiling_tps(d.bandwidth_gbps, read),
                    }
                )
    return rows


def find_row(rows: Sequence[Mapping], model_key: str, context: str, device: str) -> dict | None:
    return next(
        (r for r in rows if r["model_key"] == model_key and r["context"] == context and r["device"] == device), None
    )

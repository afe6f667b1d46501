"""The one tokens/s ceiling of decode at batch 1, used by lesson 7 and the capstone.

Generating one token reads every weight once and the whole KV cache once, so no decoder can make
tokens faster than

    ceiling (tokens/s) = bandwidth / (weight bytes a token reads + KV cache bytes at the context)

A ceiling is only meaningful with its three choices named, and every caller names them:

  * the bandwidth: which measurement (STREAM copy, a read-only kernel, the decode job's own read
    ceiling) or which published figure; it is a parameter here, in decimal GB/s (1e9 bytes/s);
  * the weights' bytes: as stored in the file (what a decoder that reads the quantized blocks
    streams) or as float32 (what a decoder that keeps dequantized float32 weights streams, as
    this project's NumPy decoder does); the two differ by the file's bits per weight;
  * the context: how many tokens the KV cache already holds (0: the weights alone, the first
    generated token's ceiling); its bytes come from bytesup.model.configs.kv_cache_bytes, layer by
    layer, so a sliding-window layer counts only its window.

Two ceilings for one model on one device differ only through these three, and the lessons say
which one moved.
"""

from __future__ import annotations

GB = 1e9  # decimal, as STREAM and the course count bandwidth

STORED, FLOAT32 = "as stored", "as float32"  # the two ways of counting the weights' bytes
CONTEXT_4K = 4096  # the context of lesson 7's headline ceilings, which the capstone sets beside its own


def tokens_per_s(bandwidth_gbps: float | None, weight_bytes: int | None, kv_bytes: int = 0) -> float | None:
    """The ceiling: bandwidth / (weight bytes + KV cache bytes) read per generated token.

    None when the bandwidth was not measured (or is not positive) or there is nothing to read.
    """
    if not bandwidth_gbps or bandwidth_gbps <= 0 or weight_bytes is None:
        return None
    read = weight_bytes + kv_bytes
    if read <= 0:
        return None
    return bandwidth_gbps * GB / read


def ms_per_token(ceiling_tps: float | None) -> float | None:
    """The same limit as a floor on the time per token, in milliseconds."""
    return 1e3 / ceiling_tps if ceiling_tps else None

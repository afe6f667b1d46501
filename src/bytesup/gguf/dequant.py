"""Dequantization: GGUF tensor bytes back to float32 weights, and the yardstick it is held to.

dequantize() runs the fast version of the type's record (bytesup.gguf.quants.QUANTS: one record
per type, each with a clear and a fast dequantizer, both bit-exact against gguf-py) and hands any
other type to gguf.quants.dequantize, saying so in the log. reference_dequantize() is gguf-py on
the same bytes; bit_equal() is the project's one test of "bit-exact".
"""

from __future__ import annotations

import logging

import numpy as np
from gguf import quants as gguf_quants

from bytesup.gguf import sizes
from bytesup.gguf.quants import QUANTS

log = logging.getLogger(__name__)


def _flat_bytes(raw: np.ndarray, type_name: str, shape) -> np.ndarray:
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise ValueError(f"{type_name}: expected uint8 bytes, got {raw.dtype}")
    n = sizes.tensor_bytes(type_name, shape)
    if raw.size != n:
        raise ValueError(f"{type_name}: shape {tuple(shape)} needs {n} bytes, got {raw.size}")
    return raw.reshape(-1)


def dequantizer_used(type_name: str) -> str:
    """'hand' when bytesup has its own dequantizer for this type, else 'fallback' (gguf.quants)."""
    return "hand" if type_name in QUANTS else "fallback"


def reference_dequantize(raw: np.ndarray, type_name: str, shape) -> np.ndarray:
    """gguf.quants.dequantize on the same bytes, as float32 in numpy shape (the yardstick)."""
    qtype = sizes.ggml_type(type_name)
    flat = _flat_bytes(raw, type_name, shape)
    shape = tuple(shape)
    if flat.size == 0:
        return np.zeros(shape, np.float32)
    rows = flat.reshape(-1, sizes.tensor_bytes(type_name, shape[-1:]))  # gguf-py wants rows of bytes
    result = gguf_quants.dequantize(rows, qtype)  # raises NotImplementedError for unsupported types
    return np.require(result, np.float32, ["C", "W", "O"]).reshape(shape)


def bit_equal(a, b) -> bool:
    """Same shape and identical float32 bits: the project's one test of "bit-exact".

    Stricter than ==: -0.0 and +0.0 differ, and two NaNs are equal only with the same payload.
    """
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def dequantize(raw: np.ndarray, type_name: str, shape, threads: int | None = None) -> np.ndarray:
    """Bytes of one tensor -> float32 array of numpy `shape`.

    Uses the type's fast hand dequantizer where it has a record (on `threads` threads; None:
    bytesup.gguf.quants.kernels.default_threads()); any other type goes to gguf.quants.dequantize
    (logged). A type neither implements raises NotImplementedError.
    """
    flat = _flat_bytes(raw, type_name, shape)
    if flat.size == 0:
        return np.zeros(tuple(shape), np.float32)
    with np.errstate(all="ignore"):  # inf/NaN scales are data, faithfully reproduced
        if type_name in QUANTS:
            return QUANTS[type_name].fast(flat, threads=threads).reshape(tuple(shape))
        log.info("no hand dequantizer for %s: using gguf.quants.dequantize", type_name)
        try:
            return reference_dequantize(flat, type_name, shape)
        except NotImplementedError:
            raise NotImplementedError(
                f"no dequantizer for ggml type {type_name} (neither bytesup nor gguf.quants)"
            ) from None

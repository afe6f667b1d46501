"""Dequantizers: GGUF tensor bytes back to float32 weights.

Each type has two versions, both bit-exact against gguf.quants.dequantize:

* a clear one that reads like the block layout (one line per field), and
* a fast one beside it: the same arithmetic as a few whole-chunk numpy passes over
  views of the bytes, written in place into one output array (why it is shaped the
  way it is: see "fast 4- and 5-bit" below). Pass out= to reuse an output array.

Every quantized type here stores weights in blocks of 32 along a row:

    Q8_0  34 bytes: d (fp16)                      + 32 x int8 q                  w = d * q
    Q4_0  18 bytes: d (fp16)                      + 16 bytes of 4-bit q          w = d * (q - 8)
    Q4_1  20 bytes: d (fp16), m (fp16)            + 16 bytes of 4-bit q          w = d * q + m
    Q5_0  22 bytes: d (fp16), qh (32 high bits)   + 16 bytes of low 4 bits       w = d * (q - 16)
    Q5_1  24 bytes: d (fp16), m (fp16), qh        + 16 bytes of low 4 bits       w = d * q + m

In the 4-bit types, byte j of a block holds weight j in its low nibble and weight j+16
in its high nibble. In the 5-bit types, bit j of the little-endian uint32 qh is bit 4
of weight j.

Bit-exactness: fp16 -> fp32 is exact for every finite value; then one float32 multiply
and (for _1 types) one float32 add, in that order, exactly as gguf-py does. No fused
multiply-add, no float64 on the way.
"""

from __future__ import annotations

import logging
from math import prod

import numpy as np
from gguf import quants as gguf_quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

log = logging.getLogger(__name__)

CHUNK_BLOCKS = 8192  # blocks per step in the fast versions: 1 MiB of float32 out plus small scratch

# fp16 bit pattern -> float32, for all 65536 patterns. Built by numpy's own conversion, so a
# table lookup gives the same bits as .astype(np.float32), NaN payloads included.
F16_TO_F32 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _f16(two_bytes: np.ndarray) -> np.ndarray:
    """(n, 2) uint8 -> (n, 1) float32: the fp16 numbers stored in those bytes."""
    return np.ascontiguousarray(two_bytes).view("<f2").astype(np.float32)


def _blocks(raw: np.ndarray, type_size: int) -> np.ndarray:
    return np.ascontiguousarray(raw).reshape(-1, type_size)


# -- float types ------------------------------------------------------------------------


def f32_clear(raw: np.ndarray) -> np.ndarray:
    """F32: 4 bytes per weight, already float32. A copy, so the result is ours to change."""
    return raw.view("<f4").astype(np.float32)


def f32_fast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    out = np.empty(raw.size // 4, np.float32) if out is None else out
    np.copyto(out, np.frombuffer(raw, "<f4"))
    return out


def f16_clear(raw: np.ndarray) -> np.ndarray:
    """F16: 2 bytes per weight (1 sign, 5 exponent, 10 mantissa bits), widened to float32."""
    return raw.view("<f2").astype(np.float32)


def f16_fast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    out = np.empty(raw.size // 2, np.float32) if out is None else out
    np.copyto(out, np.frombuffer(raw, "<f2"))  # numpy's SIMD conversion, no temporary
    return out


def bf16_clear(raw: np.ndarray) -> np.ndarray:
    """BF16: the top 16 bits of a float32. Put them back on top, zeros below."""
    top = raw.view("<u2").astype(np.uint32)
    return (top << 16).view(np.float32)


def bf16_fast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    out = np.empty(raw.size // 2, np.float32) if out is None else out
    bits = out.view(np.uint32)
    np.copyto(bits, np.frombuffer(raw, "<u2"))
    bits <<= 16
    return out


# -- Q8_0 -------------------------------------------------------------------------------


def q8_0_clear(raw: np.ndarray) -> np.ndarray:
    """Q8_0: a block of 32 weights = fp16 scale d + 32 int8 quants; weight = d * q."""
    blocks = _blocks(raw, 34)
    d = _f16(blocks[:, 0:2])  # (n_blocks, 1)
    q = blocks[:, 2:34].view(np.int8).astype(np.float32)  # (n_blocks, 32)
    return (d * q).reshape(-1)


_Q8_0 = np.dtype([("d", "<u2"), ("q", "i1", (32,))])


def q8_0_fast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    blocks = np.frombuffer(raw, _Q8_0)
    n = blocks.shape[0]
    out = np.empty(n * 32, np.float32) if out is None else out
    o32 = out.reshape(n, 32)
    for s in range(0, n, CHUNK_BLOCKS):
        b, o = blocks[s : s + CHUNK_BLOCKS], o32[s : s + CHUNK_BLOCKS]
        o[...] = b["q"]  # int8 -> float32, exact
        o *= F16_TO_F32[b["d"]][:, None]
    return out


# -- Q4_0 and Q4_1 ----------------------------------------------------------------------


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) bytes -> (n, 32) 4-bit values: the low nibbles are weights 0..15, the high 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def q4_0_clear(raw: np.ndarray) -> np.ndarray:
    """Q4_0: a block of 32 weights = fp16 scale d + 16 bytes of 4-bit quants; weight = d * (q - 8)."""
    blocks = _blocks(raw, 18)
    d = _f16(blocks[:, 0:2])
    q = _nibbles(blocks[:, 2:18]).astype(np.int8) - 8  # 0..15 -> -8..7
    return (d * q.astype(np.float32)).reshape(-1)


def q4_1_clear(raw: np.ndarray) -> np.ndarray:
    """Q4_1: a block of 32 weights = fp16 scale d + fp16 minimum m + 16 bytes of 4-bit quants;
    weight = d * q + m."""
    blocks = _blocks(raw, 20)
    d = _f16(blocks[:, 0:2])
    m = _f16(blocks[:, 2:4])
    q = _nibbles(blocks[:, 4:20]).astype(np.float32)
    return (d * q + m).reshape(-1)


# -- Q5_0 and Q5_1 ----------------------------------------------------------------------


def _five_bit(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """4 bytes of high bits + 16 bytes of nibbles -> (n, 32) 5-bit values 0..31."""
    high = np.unpackbits(np.ascontiguousarray(qh), axis=1, bitorder="little")  # bit j of the uint32 -> column j
    return _nibbles(qs) | (high << 4)


def q5_0_clear(raw: np.ndarray) -> np.ndarray:
    """Q5_0: a block of 32 weights = fp16 scale d + 32 high bits (uint32) + 16 bytes of low nibbles;
    weight = d * (q - 16)."""
    blocks = _blocks(raw, 22)
    d = _f16(blocks[:, 0:2])
    q = _five_bit(blocks[:, 2:6], blocks[:, 6:22]).astype(np.int8) - 16  # 0..31 -> -16..15
    return (d * q.astype(np.float32)).reshape(-1)


def q5_1_clear(raw: np.ndarray) -> np.ndarray:
    """Q5_1: a block of 32 weights = fp16 scale d + fp16 minimum m + 32 high bits + 16 bytes of low
    nibbles; weight = d * q + m."""
    blocks = _blocks(raw, 24)
    d = _f16(blocks[:, 0:2])
    m = _f16(blocks[:, 2:4])
    q = _five_bit(blocks[:, 4:8], blocks[:, 8:24]).astype(np.float32)
    return (d * q + m).reshape(-1)


# -- fast 4- and 5-bit ------------------------------------------------------------------
#
# numpy pays a few nanoseconds each time it starts an inner loop, and a block is only 32
# weights: anything shaped (blocks, 16) or broadcast per block runs one short loop per
# block and the overhead is most of the time. So every step below is one long loop over
# a whole chunk of blocks:
#   * nibbles are taken from all bytes of the chunk at once (header bytes too, unused);
#   * the 16 bytes of low nibbles and the 16 of high nibbles of a block are moved as two
#     16-byte items ('V16'), giving the quants as one contiguous (blocks, 32) array;
#   * d and m are repeated 32 times (np.repeat), so multiply and add are plain
#     element-wise passes rather than broadcasts.
# The arithmetic is unchanged: fp16 -> fp32, multiply, then add.


class _Scratch:
    """Reusable byte buffers for one call: nibble planes and the assembled quants."""

    def __init__(self, n_blocks: int, type_size: int):
        c = min(n_blocks, CHUNK_BLOCKS)
        self.lo = np.empty((c, type_size), np.uint8)
        self.hi = np.empty((c, type_size), np.uint8)
        self.q = np.empty((c, 2, 16), np.uint8)


def _quants_4bit(r: np.ndarray, start: int, sc: _Scratch) -> np.ndarray:
    """(k, type_size) block bytes with 16 bytes of nibbles at `start` -> (k, 32) uint8 values 0..15."""
    k = r.shape[0]
    lo, hi, q = sc.lo[:k], sc.hi[:k], sc.q[:k]
    np.bitwise_and(r, np.uint8(0x0F), out=lo)
    np.right_shift(r, np.uint8(4), out=hi)
    items = q.view("V16")  # (k, 2, 1): [low plane, high plane] of each block
    items[:, 0, 0] = lo[:, start : start + 16].view("V16")[:, 0]
    items[:, 1, 0] = hi[:, start : start + 16].view("V16")[:, 0]
    return q.reshape(k, 32)


def _quants_5bit(r: np.ndarray, qh_at: int, sc: _Scratch) -> np.ndarray:
    """As _quants_4bit, plus bit 4 of weight j from bit j of the uint32 at qh_at: values 0..31."""
    q = _quants_4bit(r, qh_at + 4, sc)
    high = np.unpackbits(r[:, qh_at : qh_at + 4], axis=1, bitorder="little")  # (k, 32): 0 or 1
    high <<= np.uint8(4)
    q |= high
    return q


def _f16_column(r: np.ndarray, at: int) -> np.ndarray:
    """The fp16 number at byte `at` of every block, as float32 (k,)."""
    return r[:, at : at + 2].view("<f2")[:, 0].astype(np.float32)


def _per_weight(values: np.ndarray) -> np.ndarray:
    """(k,) per-block numbers -> (k, 32), each repeated over its block's 32 weights."""
    return np.repeat(values, 32).reshape(-1, 32)


def _fast_blocks(raw: np.ndarray, type_size: int, out: np.ndarray | None, step) -> np.ndarray:
    """Run step(block_bytes_chunk, out_chunk, scratch) over the tensor, CHUNK_BLOCKS at a time."""
    rows = np.frombuffer(raw, np.uint8).reshape(-1, type_size)
    n = rows.shape[0]
    out = np.empty(n * 32, np.float32) if out is None else out
    o2 = out.reshape(n, 32)
    scratch = _Scratch(n, type_size)
    for s in range(0, n, CHUNK_BLOCKS):
        step(rows[s : s + CHUNK_BLOCKS], o2[s : s + CHUNK_BLOCKS], scratch)
    return out


def _q4_0_step(r, o, sc):
    q = _quants_4bit(r, 2, sc)
    q -= np.uint8(8)  # 0..15 -> -8..7 in two's complement, read through the int8 view
    o[...] = q.view(np.int8)  # int8 -> float32, exact
    o *= _per_weight(_f16_column(r, 0))


def _q4_1_step(r, o, sc):
    o[...] = _quants_4bit(r, 4, sc)
    o *= _per_weight(_f16_column(r, 0))  # multiply, then add: two roundings, like gguf-py
    o += _per_weight(_f16_column(r, 2))


def _q5_0_step(r, o, sc):
    q = _quants_5bit(r, 2, sc)
    q -= np.uint8(16)  # 0..31 -> -16..15
    o[...] = q.view(np.int8)
    o *= _per_weight(_f16_column(r, 0))


def _q5_1_step(r, o, sc):
    o[...] = _quants_5bit(r, 4, sc)
    o *= _per_weight(_f16_column(r, 0))
    o += _per_weight(_f16_column(r, 2))


def q4_0_fast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return _fast_blocks(raw, 18, out, _q4_0_step)


def q4_1_fast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return _fast_blocks(raw, 20, out, _q4_1_step)


def q5_0_fast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return _fast_blocks(raw, 22, out, _q5_0_step)


def q5_1_fast(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return _fast_blocks(raw, 24, out, _q5_1_step)


# -- dispatch ---------------------------------------------------------------------------

# type name -> (clear, fast). Both take a 1-D uint8 array of whole blocks and return a
# 1-D float32 array; fast also accepts out= (a float32 array of the right size).
HAND_DEQUANTIZERS = {
    "F32": (f32_clear, f32_fast),
    "F16": (f16_clear, f16_fast),
    "BF16": (bf16_clear, bf16_fast),
    "Q8_0": (q8_0_clear, q8_0_fast),
    "Q4_0": (q4_0_clear, q4_0_fast),
    "Q4_1": (q4_1_clear, q4_1_fast),
    "Q5_0": (q5_0_clear, q5_0_fast),
    "Q5_1": (q5_1_clear, q5_1_fast),
}


def _qtype(type_name: str) -> GGMLQuantizationType:
    try:
        qtype = GGMLQuantizationType[type_name]
    except KeyError:
        raise ValueError(f"unknown ggml type name {type_name!r}") from None
    if qtype not in GGML_QUANT_SIZES:
        raise ValueError(f"ggml type {type_name} has no block size in gguf.constants")
    return qtype


def expected_bytes(type_name: str, shape) -> int:
    """Bytes a tensor of this type and numpy shape occupies (shape[-1] is the row)."""
    block_size, type_size = GGML_QUANT_SIZES[_qtype(type_name)]
    row = shape[-1] if len(shape) else 1
    if row % block_size:
        raise ValueError(f"{type_name}: row length {row} is not a multiple of the block size {block_size}")
    return prod(shape) // block_size * type_size


def _flat_bytes(raw: np.ndarray, type_name: str, shape) -> np.ndarray:
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise ValueError(f"{type_name}: expected uint8 bytes, got {raw.dtype}")
    n = expected_bytes(type_name, shape)
    if raw.size != n:
        raise ValueError(f"{type_name}: shape {tuple(shape)} needs {n} bytes, got {raw.size}")
    return raw.reshape(-1)


def dequantizer_used(type_name: str) -> str:
    """'hand' when bytesup has its own dequantizer for this type, else 'fallback' (gguf.quants)."""
    return "hand" if type_name in HAND_DEQUANTIZERS else "fallback"


def reference_dequantize(raw: np.ndarray, type_name: str, shape) -> np.ndarray:
    """gguf.quants.dequantize on the same bytes, as float32 in numpy shape (the yardstick)."""
    qtype = _qtype(type_name)
    flat = _flat_bytes(raw, type_name, shape)
    shape = tuple(shape)
    if flat.size == 0:
        return np.zeros(shape, np.float32)
    rows = flat.reshape(-1, expected_bytes(type_name, shape[-1:]))  # gguf-py wants rows of bytes
    result = gguf_quants.dequantize(rows, qtype)  # raises NotImplementedError for unsupported types
    return np.require(result, np.float32, ["C", "W", "O"]).reshape(shape)


def bit_equal(a, b) -> bool:
    """Same shape and identical float32 bits: the project's one test of "bit-exact".

    Stricter than ==: -0.0 and +0.0 differ, and two NaNs are equal only with the same payload.
    """
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def dequantize(raw: np.ndarray, type_name: str, shape) -> np.ndarray:
    """Bytes of one tensor -> float32 array of numpy `shape`.

    Uses the fast hand dequantizer where there is one; any other type goes to
    gguf.quants.dequantize (logged). A type neither implements raises NotImplementedError.
    """
    flat = _flat_bytes(raw, type_name, shape)
    if flat.size == 0:
        return np.zeros(tuple(shape), np.float32)
    with np.errstate(all="ignore"):  # inf/NaN scales are data, faithfully reproduced
        if type_name in HAND_DEQUANTIZERS:
            _, fast = HAND_DEQUANTIZERS[type_name]
            return fast(flat).reshape(tuple(shape))
        log.info("no hand dequantizer for %s: using gguf.quants.dequantize", type_name)
        try:
            return reference_dequantize(flat, type_name, shape)
        except NotImplementedError:
            raise NotImplementedError(
                f"no dequantizer for ggml type {type_name} (neither bytesup nor gguf.quants)"
            ) from None

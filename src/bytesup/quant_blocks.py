"""One quantization block decoded by hand, field by field: the fp16 scale from its 16 bits, the
stored integers, the formula. Lessons 1 and 2 show a real block of the file this way and check it
bit for bit against gguf-py; bytesup.dequant does the same arithmetic for whole tensors, fast.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class FP16:
    bits: int
    sign: int
    exponent: int  # the stored 5 bits; the power of two is exponent - 15
    mantissa: int  # the stored 10 bits
    value: float


def fp16_by_hand(bits: int) -> FP16:
    """An IEEE half-precision number from its 16 bits: 1 sign, 5 exponent, 10 mantissa bits.

    normal (exponent 1..30):  (1 + mantissa / 1024) * 2**(exponent - 15)
    subnormal (exponent 0):   (mantissa / 1024) * 2**-14
    exponent 31:              infinity (mantissa 0) or NaN
    Every half fits a Python float (and a float32) exactly, so nothing is rounded here.
    """
    sign, exponent, mantissa = bits >> 15, (bits >> 10) & 0x1F, bits & 0x3FF
    if exponent == 0:
        value = mantissa / 1024 * 2.0**-14
    elif exponent == 31:
        value = math.inf if mantissa == 0 else math.nan
    else:
        value = (1 + mantissa / 1024) * 2.0 ** (exponent - 15)
    return FP16(bits, sign, exponent, mantissa, -value if sign else value)


@dataclass(frozen=True)
class Block:
    """One quantized block taken apart: its scale d (and minimum m), its 32 quants, its weights."""

    type_name: str
    raw: bytes
    d: FP16
    m: FP16 | None
    q: list[int]  # the 32 stored integers, in weight order
    values: np.ndarray  # float32 weights
    formula: str
    packed: list[int] = field(default_factory=list)  # Q4_1: the 16 bytes that hold two quants each


def decode_q8_0(raw: bytes) -> Block:
    """Q8_0, 34 bytes: fp16 scale d, then 32 signed bytes q. Weight i = d * q[i]."""
    if len(raw) != 34:
        raise ValueError(f"a Q8_0 block is 34 bytes, got {len(raw)}")
    (d_bits,) = struct.unpack_from("<H", raw, 0)
    q = list(struct.unpack_from("<32b", raw, 2))
    d = fp16_by_hand(d_bits)
    # float32 times float32, one rounding (exact here: 11-bit scale x 8-bit integer), as gguf-py
    values = np.float32(d.value) * np.array(q, dtype=np.float32)
    return Block("Q8_0", bytes(raw), d, None, q, values, "w = d * q")


def decode_q4_1(raw: bytes) -> Block:
    """Q4_1, 20 bytes: fp16 scale d, fp16 minimum m, then 16 bytes of 4-bit quants.

    Byte j holds weight j in its low nibble (bits 0-3) and weight j + 16 in its high nibble
    (bits 4-7). Quants run 0..15, all non-negative: weight i = d * q[i] + m, so m is the
    smallest weight the block can hold and d the step between neighbouring levels.
    """
    if len(raw) != 20:
        raise ValueError(f"a Q4_1 block is 20 bytes, got {len(raw)}")
    d_bits, m_bits = struct.unpack_from("<HH", raw, 0)
    packed = list(raw[4:20])
    q = [b & 0x0F for b in packed] + [b >> 4 for b in packed]
    d, m = fp16_by_hand(d_bits), fp16_by_hand(m_bits)
    # multiply, round to float32, add, round again: the order gguf-py uses
    values = np.float32(d.value) * np.array(q, dtype=np.float32) + np.float32(m.value)
    return Block("Q4_1", bytes(raw), d, m, q, values, "w = d * q + m", packed)


BLOCK_DECODERS = {"Q8_0": decode_q8_0, "Q4_1": decode_q4_1}


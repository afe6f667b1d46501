"""One block decoded by hand: the pieces every type's teaching decoder is built from.

An IEEE number from its bits (fp16_by_hand, fp32_by_hand, nothing rounded), the decoded block
(Block: its fields in byte order, the stored integers, the float32 factors and the weights) and
the sentences that say where each weight's bits sit. Each ggml type's own decoder is its record's
decode_block (bytesup.gguf.quants); lessons 1 and 2 show a real block of the file that way and
check it bit for bit against gguf-py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

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
class FP32:
    bits: int
    sign: int
    exponent: int  # the stored 8 bits; the power of two is exponent - 127
    mantissa: int  # the stored 23 bits
    value: float


def fp32_by_hand(bits: int) -> FP32:
    """An IEEE single-precision number from its 32 bits: 1 sign, 8 exponent, 23 mantissa bits.

    normal (exponent 1..254):  (1 + mantissa / 2**23) * 2**(exponent - 127)
    subnormal (exponent 0):    (mantissa / 2**23) * 2**-126
    exponent 255:              infinity (mantissa 0) or NaN
    """
    sign, exponent, mantissa = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exponent == 0:
        value = mantissa / 2**23 * 2.0**-126
    elif exponent == 255:
        value = math.inf if mantissa == 0 else math.nan
    else:
        value = (1 + mantissa / 2**23) * 2.0 ** (exponent - 127)
    return FP32(bits, sign, exponent, mantissa, -value if sign else value)


@dataclass(frozen=True)
class Block:
    """One block taken apart: its scale d (and minimum m), its quants, its weights.

    Per weight i: ``q[i]`` is the stored integer, ``level[i]`` the integer the formula multiplies
    (q minus the type's zero point), ``scale[i]`` the float32 factor and, for the types that add
    one (Q4_1, Q4_K), ``offset[i]`` the float32 added after: ``values[i] == scale[i] * level[i]``
    (``+ offset[i]``) in float32. Float types (F32, F16) leave all three empty. ``stored_in[i]`` says which bits held q[i]. ``fields`` lists the block's fields in
    byte order as (name, first byte, bytes, value): what the lesson shows field by field.
    """

    type_name: str
    raw: bytes
    d: FP16 | None  # None for a float type, which has no scale
    m: FP16 | None  # Q4_1's minimum m, a K-quant's dmin
    q: list[int]  # the stored integers, in weight order (F32/F16: the number's bits)
    values: np.ndarray  # float32 weights
    formula: str
    packed: list[int] = field(default_factory=list)  # 4-bit types: the bytes that hold two quants each
    level: list[int] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    offset: list[float] = field(default_factory=list)
    stored_in: list[str] = field(default_factory=list)
    fields: list[tuple[str, int, int, Any]] = field(default_factory=list)
    sub_scales: list[int] = field(default_factory=list)  # K-quants: one integer scale per sub-block
    sub_mins: list[int] = field(default_factory=list)  # Q4_K: one integer min per sub-block

    @property
    def n_weights(self) -> int:
        return len(self.q)


def check_size(raw: bytes, type_name: str, size: int) -> None:
    if len(raw) != size:
        raise ValueError(f"a {type_name} block is {size} bytes, got {len(raw)}")


# -- where each weight's bits sit, in words (Block.stored_in) ------------------------------------


def nibble_sources(first_byte: int, runs: int, run_bytes: int, packed: bytes | None = None) -> list[str]:
    """4-bit quants in runs of `run_bytes` bytes: run r holds run_bytes weights in its low nibbles,
    then the next run_bytes in its high nibbles (Q4_0: 1 run of 16; Q4_K/Q5_K: 4 runs of 32; IQ4_XS:
    8 of 16). With the block's bytes (`packed`, the runs only) each byte's bits are shown too."""

    def byte(j: int) -> str:
        bits = f" ({packed[j]:08b})" if packed is not None else ""
        return f"byte {first_byte + j}{bits}"

    return [f"{byte(run_bytes * r + j)} {nibble} nibble" for r in range(runs) for nibble in ("low", "high")
            for j in range(run_bytes)]  # fmt: skip


def crumb_sources(first_byte: int, runs: int = 2) -> list[str]:
    """2-bit fields in runs of 32 bytes: in run h, bits 2s..2s+1 of byte j are weight 128h + 32s + j."""
    return [f"byte {first_byte + 32 * h + j} bits {2 * s}-{2 * s + 1}" for h in range(runs) for s in range(4)
            for j in range(32)]  # fmt: skip


def high_bit_sources(first_byte: int, weights: int = 256) -> list[str]:
    """One bit per weight in 32 bytes: bit b of byte l is weight 32b + l (Q3_K's hmask, Q5_K's qh)."""
    return [f"bit {i // 32} of byte {first_byte + i % 32}" for i in range(weights)]

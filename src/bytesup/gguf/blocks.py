"""One quantization block decoded by hand, field by field: the fp16 scale from its 16 bits, the
stored integers, the formula. Lessons 1 and 2 show a real block of the file this way and check it
bit for bit against gguf-py; bytesup.gguf.dequant does the same arithmetic for whole tensors, fast.

A block is ggml's unit of storage along a row (gguf's GGML_QUANT_SIZES: weights per block, bytes):

    F32    1 weight,    4 bytes   the float32 itself
    F16    1 weight,    2 bytes   an IEEE half
    BF16   1 weight,    2 bytes   the top half of a float32
    Q8_0   32 weights, 34 bytes   d (fp16), 32 int8 q                          w = d * q
    Q4_0   32 weights, 18 bytes   d, 16 bytes of 4-bit q                       w = d * (q - 8)
    Q4_1   32 weights, 20 bytes   d, m (fp16), 16 bytes of 4-bit q             w = d * q + m
    Q5_0   32 weights, 22 bytes   d, qh (32 fifth bits), 16 bytes of 4 bits    w = d * (q - 16)
    Q5_1   32 weights, 24 bytes   d, m, qh, 16 bytes of 4 bits                 w = d * q + m
    Q4_K  256 weights, 144 bytes  d, dmin (fp16), 12 bytes packing 8 six-bit scales and 8 six-bit
                                  mins, 128 bytes of 4-bit q; 8 sub-blocks of 32
                                  w = (d * scale[j]) * q - (dmin * min[j])
    Q6_K  256 weights, 210 bytes  128 bytes of low 4 bits, 64 bytes of high 2 bits, 16 int8 scales,
                                  d (fp16, last); 16 sub-blocks of 16        w = (d * scale[j]) * (q - 32)
    Q5_K  256 weights, 176 bytes  Q4_K plus 32 bytes of fifth bits            as Q4_K, q in 0..31
    Q2_K  256 weights,  84 bytes  16 bytes of 4-bit scale + 4-bit min, 2-bit q, d, dmin; 16 of 16
    Q3_K  256 weights, 110 bytes  high-bit mask, 2-bit q, 12 bytes of 6-bit scales, d; 16 of 16
    IQ4_NL / IQ4_XS               4-bit indices into 16 non-uniform levels (KVALUES_IQ4)

For the K-quants and IQ4 types the bit fields come from bytesup.gguf.dequant.unpack_fields (their one
home), and q is the integer its FORMULAS multiply: Q6_K's and Q3_K's already minus their zero points
(32 and 4), an IQ4 index before its level lookup.

Every decoder does its float32 arithmetic in gguf-py's order (each product rounded to float32
before the next step), so its weights equal gguf.quants.dequantize's bit for bit.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bytesup.gguf.dequant import BLOCK_FIELDS, FORMULAS, KVALUES_IQ4, QK_K, SUB_BLOCK, unpack_fields


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


def _check_size(raw: bytes, type_name: str, size: int) -> None:
    if len(raw) != size:
        raise ValueError(f"a {type_name} block is {size} bytes, got {len(raw)}")


def _nibble_sources(first_byte: int, packed: list[int], weights_per_half: int = 16) -> list[str]:
    """Where each 4-bit quant sits: weight j in the low nibble of byte j, weight j + 16 in its high one."""
    low = [f"byte {first_byte + j} ({b:08b}) low nibble" for j, b in enumerate(packed)]
    high = [f"byte {first_byte + j} ({b:08b}) high nibble" for j, b in enumerate(packed)]
    return low + high


def decode_f32(raw: bytes) -> Block:
    """F32, 4 bytes: one weight, the float32 itself (no scale, nothing to multiply)."""
    _check_size(raw, "F32", 4)
    (bits,) = struct.unpack_from("<I", raw, 0)
    h = fp32_by_hand(bits)
    values = np.array([h.value], dtype=np.float32)
    return Block("F32", bytes(raw), None, None, [bits], values, "w = (-1)^sign * (1 + mantissa/2^23) * 2^(exponent-127)",
                 level=[], scale=[], offset=[], stored_in=["bytes 0-3 (float32, little-endian)"],
                 fields=[("sign", 0, 4, h.sign), ("exponent", 0, 4, h.exponent), ("mantissa", 0, 4, h.mantissa),
                         ("value", 0, 4, h.value)])  # fmt: skip


def decode_f16(raw: bytes) -> Block:
    """F16, 2 bytes: one weight, an IEEE half widened to float32 (exact)."""
    _check_size(raw, "F16", 2)
    (bits,) = struct.unpack_from("<H", raw, 0)
    h = fp16_by_hand(bits)
    values = np.array([h.value], dtype=np.float32)
    return Block("F16", bytes(raw), None, None, [bits], values, "w = (-1)^sign * (1 + mantissa/1024) * 2^(exponent-15)",
                 stored_in=["bytes 0-1 (fp16, little-endian)"],
                 fields=[("sign", 0, 2, h.sign), ("exponent", 0, 2, h.exponent), ("mantissa", 0, 2, h.mantissa),
                         ("value", 0, 2, h.value)])  # fmt: skip


def decode_bf16(raw: bytes) -> Block:
    """BF16, 2 bytes: one weight, the top 16 bits of a float32 (1 sign, 8 exponent, 7 mantissa bits);
    the 16 bits below are zeros."""
    _check_size(raw, "BF16", 2)
    (bits,) = struct.unpack_from("<H", raw, 0)
    h = fp32_by_hand(bits << 16)
    values = np.array([h.value], dtype=np.float32)
    return Block("BF16", bytes(raw), None, None, [bits], values, "w = the float32 with these 16 bits on top",
                 stored_in=["bytes 0-1 (bfloat16, little-endian)"],
                 fields=[("sign", 0, 2, h.sign), ("exponent", 0, 2, h.exponent), ("mantissa", 0, 2, h.mantissa >> 16),
                         ("value", 0, 2, h.value)])  # fmt: skip


def decode_q8_0(raw: bytes) -> Block:
    """Q8_0, 34 bytes: fp16 scale d, then 32 signed bytes q. Weight i = d * q[i]."""
    _check_size(raw, "Q8_0", 34)
    (d_bits,) = struct.unpack_from("<H", raw, 0)
    q = list(struct.unpack_from("<32b", raw, 2))
    d = fp16_by_hand(d_bits)
    # float32 times float32, one rounding (exact here: 11-bit scale x 8-bit integer), as gguf-py
    values = np.float32(d.value) * np.array(q, dtype=np.float32)
    return Block("Q8_0", bytes(raw), d, None, q, values, "w = d * q", level=q, scale=[d.value] * 32,
                 stored_in=[f"byte {2 + i} (int8)" for i in range(32)],
                 fields=[("d", 0, 2, d.value), ("q", 2, 32, q)])  # fmt: skip


def decode_q4_0(raw: bytes) -> Block:
    """Q4_0, 18 bytes: fp16 scale d, then 16 bytes of 4-bit quants (0..15, zero point 8).
    Weight i = d * (q[i] - 8); byte j holds weight j (low nibble) and weight j + 16 (high)."""
    _check_size(raw, "Q4_0", 18)
    (d_bits,) = struct.unpack_from("<H", raw, 0)
    packed = list(raw[2:18])
    q = [b & 0x0F for b in packed] + [b >> 4 for b in packed]
    level = [x - 8 for x in q]
    d = fp16_by_hand(d_bits)
    values = np.float32(d.value) * np.array(level, dtype=np.float32)
    return Block("Q4_0", bytes(raw), d, None, q, values, "w = d * (q - 8)", packed, level, [d.value] * 32,
                 [], _nibble_sources(2, packed), [("d", 0, 2, d.value), ("qs", 2, 16, packed)])  # fmt: skip


def decode_q4_1(raw: bytes) -> Block:
    """Q4_1, 20 bytes: fp16 scale d, fp16 minimum m, then 16 bytes of 4-bit quants.

    Byte j holds weight j in its low nibble (bits 0-3) and weight j + 16 in its high nibble
    (bits 4-7). Quants run 0..15, all non-negative: weight i = d * q[i] + m, so m is the
    smallest weight the block can hold and d the step between neighbouring levels.
    """
    _check_size(raw, "Q4_1", 20)
    d_bits, m_bits = struct.unpack_from("<HH", raw, 0)
    packed = list(raw[4:20])
    q = [b & 0x0F for b in packed] + [b >> 4 for b in packed]
    d, m = fp16_by_hand(d_bits), fp16_by_hand(m_bits)
    # multiply, round to float32, add, round again: the order gguf-py uses
    values = np.float32(d.value) * np.array(q, dtype=np.float32) + np.float32(m.value)
    return Block("Q4_1", bytes(raw), d, m, q, values, "w = d * q + m", packed, q, [d.value] * 32, [m.value] * 32,
                 _nibble_sources(4, packed), [("d", 0, 2, d.value), ("m", 2, 2, m.value), ("qs", 4, 16, packed)])  # fmt: skip


def decode_q5_0(raw: bytes) -> Block:
    """Q5_0, 22 bytes: fp16 scale d, a little-endian uint32 qh, then 16 bytes of low 4 bits.

    Weight i's 5-bit quant is its low 4 bits (low nibble of byte j for i = j, high nibble for
    i = j + 16, as in Q4_0) plus bit i of qh as its fifth bit (value 16). Quants run 0..31 with
    zero point 16: weight i = d * (q[i] - 16).
    """
    _check_size(raw, "Q5_0", 22)
    d_bits, qh = struct.unpack_from("<HI", raw, 0)
    packed = list(raw[6:22])
    low = [b & 0x0F for b in packed] + [b >> 4 for b in packed]
    high = [(qh >> i) & 1 for i in range(32)]  # bit i of qh is the fifth bit of weight i
    q = [lo | (hi << 4) for lo, hi in zip(low, high)]
    level = [x - 16 for x in q]
    d = fp16_by_hand(d_bits)
    values = np.float32(d.value) * np.array(level, dtype=np.float32)
    sources = [f"{s} + bit {i} of qh ({h})" for i, (s, h) in enumerate(zip(_nibble_sources(6, packed), high))]
    return Block("Q5_0", bytes(raw), d, None, q, values, "w = d * (q - 16)", packed, level, [d.value] * 32,
                 [], sources, [("d", 0, 2, d.value), ("qh", 2, 4, f"0x{qh:08x}"), ("qs", 6, 16, packed)])  # fmt: skip


def decode_q5_1(raw: bytes) -> Block:
    """Q5_1, 24 bytes: fp16 scale d, fp16 minimum m, uint32 qh, 16 bytes of low 4 bits.
    As Q5_0 without the zero point, plus a minimum: weight i = d * q[i] + m, q in 0..31."""
    _check_size(raw, "Q5_1", 24)
    d_bits, m_bits, qh = struct.unpack_from("<HHI", raw, 0)
    packed = list(raw[8:24])
    low = [b & 0x0F for b in packed] + [b >> 4 for b in packed]
    high = [(qh >> i) & 1 for i in range(32)]
    q = [lo | (hi << 4) for lo, hi in zip(low, high)]
    d, m = fp16_by_hand(d_bits), fp16_by_hand(m_bits)
    values = np.float32(d.value) * np.array(q, dtype=np.float32) + np.float32(m.value)
    sources = [f"{s} + bit {i} of qh ({h})" for i, (s, h) in enumerate(zip(_nibble_sources(8, packed), high))]
    return Block("Q5_1", bytes(raw), d, m, q, values, "w = d * q + m", packed, q, [d.value] * 32, [m.value] * 32,
                 sources, [("d", 0, 2, d.value), ("m", 2, 2, m.value), ("qh", 4, 4, f"0x{qh:08x}"),
                           ("qs", 8, 16, packed)])  # fmt: skip


# --- the super-blocks: K-quants and IQ4 ------------------------------------------------------------
#
# bytesup.gguf.dequant is the one home of their bit fields: BLOCK_FIELDS (each field's bytes, in file
# order), unpack_fields (d, dmin, the sub-block scale and min integers, q in weight order, named as
# in FORMULAS) and SUB_BLOCK (weights per sub-block). Here a block is shown through those, with where
# each weight's bits sit, and the formula done in the open: (d * scale[j]) rounded to float32 once per
# sub-block, times q (IQ4: the level KVALUES_IQ4[q]), minus (dmin * min[j]) rounded the same way.


def _field_bytes(type_name: str) -> dict[str, tuple[int, int]]:
    """Field name -> (first byte, bytes) in one block of `type_name` (bytesup.gguf.dequant.BLOCK_FIELDS)."""
    out, at = {}, 0
    for name, n in BLOCK_FIELDS[type_name]:
        out[name] = (at, n)
        at += n
    return out


def _nibble_runs(first_byte: int, runs: int, run_bytes: int) -> list[str]:
    """4-bit quants in runs of `run_bytes` bytes: run r holds run_bytes weights in its low nibbles,
    then the next run_bytes in its high nibbles (Q4_K/Q5_K: 4 runs of 32; IQ4_XS: 8 of 16; IQ4_NL: 1 of 16)."""
    return [f"byte {first_byte + run_bytes * r + j} {nibble} nibble" for r in range(runs)
            for nibble in ("low", "high") for j in range(run_bytes)]  # fmt: skip


def _crumbs(first_byte: int) -> list[str]:
    """2-bit fields in two halves of 32 bytes: in half h, bits 2s..2s+1 of byte j are weight 128h + 32s + j."""
    return [f"byte {first_byte + 32 * h + j} bits {2 * s}-{2 * s + 1}" for h in range(2) for s in range(4)
            for j in range(32)]  # fmt: skip


def _high_bit(first_byte: int) -> list[str]:
    """One bit per weight in 32 bytes: bit b of byte l is weight 32b + l (Q3_K's hmask, Q5_K's qh)."""
    return [f"bit {i // 32} of byte {first_byte + i % 32}" for i in range(QK_K)]


def _q6_k_sources() -> list[str]:
    """Q6_K: in half h, ql byte 64h + l holds weights 128h + l (low nibble) and 128h + l + 64 (high),
    ql byte 64h + l + 32 weights 128h + l + 32 and 128h + l + 96; the top 2 bits as Q2_K's quants, at byte 128."""
    low = [f"byte {64 * h + i % 64} {'low' if i < 64 else 'high'} nibble" for h in range(2) for i in range(128)]
    return [f"{lo} + {hi}" for lo, hi in zip(low, _crumbs(128))]


STORED_IN = {  # type -> where each weight's q comes from, in weight order
    "Q2_K": lambda: _crumbs(16),
    "Q3_K": lambda: [f"{lo} + {hi} (clear: minus 4)" for lo, hi in zip(_crumbs(32), _high_bit(0))],
    "Q4_K": lambda: _nibble_runs(16, 4, 32),
    "Q5_K": lambda: [f"{lo} + {hi}" for lo, hi in zip(_nibble_runs(48, 4, 32), _high_bit(16))],
    "Q6_K": _q6_k_sources,
    "IQ4_NL": lambda: _nibble_runs(2, 1, 16),
    "IQ4_XS": lambda: _nibble_runs(8, 8, 16),
}


def decode_super_block(raw: bytes, type_name: str) -> Block:
    """One block of a K-quant or IQ4 type, field by field (see the comment above)."""
    where = _field_bytes(type_name)
    _check_size(raw, type_name, sum(n for _, n in where.values()))
    u = unpack_fields(np.frombuffer(raw, np.uint8), type_name)  # one block: row 0 of each
    d = fp16_by_hand(struct.unpack_from("<H", raw, where["d"][0])[0])
    dmin = fp16_by_hand(struct.unpack_from("<H", raw, where["dmin"][0])[0]) if "dmin" in where else None
    q = [int(x) for x in u["q"][0]]
    level = [int(KVALUES_IQ4[x]) for x in q] if type_name.startswith("IQ4") else q
    n, size = len(q), SUB_BLOCK[type_name]
    scales = [int(x) for x in u["scale"][0]] if "scale" in u else []
    mins = [int(x) for x in u["min"][0]] if "min" in u else []
    # d * scale[j]: one float32 per sub-block (IQ4_NL has no sub-block scale: d itself)
    step = [float(np.float32(d.value) * np.float32(s)) for s in scales] if scales else [d.value] * (n // size)
    scale = [step[i // size] for i in range(n)]
    values = np.array(scale, np.float32) * np.array(level, np.float32)
    offset = []
    if mins:  # minus dmin * min[j], one float32 per sub-block; x - y is x + (-y) exactly
        low = [float(np.float32(dmin.value) * np.float32(m)) for m in mins]
        values = values - np.array([low[i // size] for i in range(n)], np.float32)
        offset = [-low[i // size] for i in range(n)]
    fields = []
    for name, (at, nbytes) in where.items():
        value = {"d": d.value, "dmin": None if dmin is None else dmin.value}.get(name)
        if value is None:
            value = list(raw[at : at + nbytes]) if nbytes <= 16 else f"{nbytes} bytes"
        fields.append((name, at, nbytes, value))
    qs_at, qs_n = where["qs"] if "qs" in where else where["ql"]
    return Block(type_name, bytes(raw), d, dmin, q, values, FORMULAS[type_name], list(raw[qs_at : qs_at + qs_n]), level,
                 scale, offset, STORED_IN[type_name](), fields, scales, mins)  # fmt: skip


def decode_q4_k(raw: bytes) -> Block:
    """Q4_K, a super-block of 256 weights in 144 bytes: 8 sub-blocks of 32, each with its own
    6-bit scale and 6-bit min, themselves scaled by the super-block's two fp16 numbers.

        bytes 0-1     d      fp16, the scale of the scales
        bytes 2-3     dmin   fp16, the scale of the mins
        bytes 4-15    12 bytes packing 8 six-bit scales and 8 six-bit mins (bytesup.gguf.dequant.unpack_scale_min_k4)
        bytes 16-143  128 bytes of 4-bit quants, in 4 runs of 32 bytes: run c holds sub-block 2c
                      in its low nibbles and sub-block 2c + 1 in its high nibbles

    Weight i of sub-block j: w = (d * scale[j]) * q[i] - (dmin * min[j]).
    """
    return decode_super_block(raw, "Q4_K")


def decode_q6_k(raw: bytes) -> Block:
    """Q6_K, a super-block of 256 weights in 210 bytes: 16 sub-blocks of 16, each with an int8 scale.

        bytes 0-127    ql      low 4 bits of each quant
        bytes 128-191  qh      high 2 bits of each quant, four quants per byte
        bytes 192-207  scales  16 signed bytes, one per sub-block of 16 weights
        bytes 208-209  d       fp16, the scale of the scales (stored last)

    q is stored plus 32 (unpack_fields gives it back as -32..31): w = (d * scale[i // 16]) * q.
    """
    return decode_super_block(raw, "Q6_K")


def decode_q5_k(raw: bytes) -> Block:
    """Q5_K, 256 weights in 176 bytes: Q4_K's layout plus qh (bytes 16-47), the fifth bit of each q."""
    return decode_super_block(raw, "Q5_K")


def decode_q2_k(raw: bytes) -> Block:
    """Q2_K, 256 weights in 84 bytes: 16 sub-blocks of 16 with a 4-bit scale and a 4-bit min each
    (bytes 0-15), 2-bit quants (16-79), then d and dmin."""
    return decode_super_block(raw, "Q2_K")


def decode_q3_k(raw: bytes) -> Block:
    """Q3_K, 256 weights in 110 bytes: a high-bit mask, 2-bit quants, 16 packed 6-bit scales, d;
    q = its 2 low bits, minus 4 when its mask bit is clear."""
    return decode_super_block(raw, "Q3_K")


def decode_iq4_nl(raw: bytes) -> Block:
    """IQ4_NL, 18 bytes: d, then 16 bytes of 4-bit indices into 16 non-uniform levels (KVALUES_IQ4)."""
    return decode_super_block(raw, "IQ4_NL")


def decode_iq4_xs(raw: bytes) -> Block:
    """IQ4_XS, 256 weights in 136 bytes: d, 8 packed 6-bit scales, 4-bit indices into KVALUES_IQ4."""
    return decode_super_block(raw, "IQ4_XS")


BLOCK_DECODERS = {
    "F32": decode_f32,
    "F16": decode_f16,
    "BF16": decode_bf16,
    "Q8_0": decode_q8_0,
    "Q4_0": decode_q4_0,
    "Q4_1": decode_q4_1,
    "Q5_0": decode_q5_0,
    "Q5_1": decode_q5_1,
    "Q2_K": decode_q2_k,
    "Q3_K": decode_q3_k,
    "Q4_K": decode_q4_k,
    "Q5_K": decode_q5_k,
    "Q6_K": decode_q6_k,
    "IQ4_NL": decode_iq4_nl,
    "IQ4_XS": decode_iq4_xs,
}

"""The legacy types: blocks of 32 weights along a row, one fp16 scale d each (and a minimum m for the
_1 types). In the 4-bit types byte j holds weight j in its low nibble and weight j + 16 in its high
nibble; the 5-bit types add a little-endian uint32 qh whose bit j is bit 4 of weight j.

Bit-exactness: fp16 -> fp32 is exact for every finite value; then one float32 multiply and (for _1
types) one float32 add, in that order, exactly as gguf-py does. No fused multiply-add, no float64.
"""

from __future__ import annotations

import numpy as np

from bytesup.gguf.blocks import Block, nibble_sources
from bytesup.gguf.quants import kernels
from bytesup.gguf.quants.base import Field, Quant
from bytesup.gguf.quants.bits import f16, fifth_bits, nibbles

D = Field("d", 2, "fp16 scale: the step between neighbouring levels")
M = Field("m", 2, "fp16 minimum: the smallest weight the block can hold")
QH = Field("qh", 4, "a little-endian uint32: bit j is bit 4 (the fifth bit) of weight j")
QS = Field("qs", 16, "4-bit quants: byte j holds weight j (low nibble) and weight j + 16 (high nibble)")


class Q8_0(Quant):
    name = "Q8_0"
    fields = (D, Field("qs", 32, "32 int8 quants, weight i in byte i"))
    formula = "w = d * q"
    words = "each weight is the block's scale d times its signed 8-bit integer q (-128..127)"

    @classmethod
    def clear(cls, raw):
        f = cls.split(raw)
        d = f16(f["d"])  # (n_blocks, 1)
        q = f["qs"].view(np.int8).astype(np.float32)  # (n_blocks, 32)
        return (d * q).reshape(-1)

    @classmethod
    def step(cls, r, o):
        at = cls.at["qs"]
        o[...] = r[:, at : at + 32].view(np.int8)  # int8 -> float32, exact
        o *= kernels.per_weight(kernels.f16_column(r, cls.at["d"]))

    @classmethod
    def decode_block(cls, raw):
        q = np.frombuffer(cls.block_fields(raw)["qs"], np.int8).tolist()  # 32 signed bytes
        d = cls.fp16_field(raw, "d")
        # float32 times float32, one rounding (exact here: 11-bit scale x 8-bit integer), as gguf-py
        values = np.float32(d.value) * np.array(q, dtype=np.float32)
        at = cls.at["qs"]
        return Block(cls.name, bytes(raw), d, None, q, values, cls.formula, level=q, scale=[d.value] * 32,
                     stored_in=[f"byte {at + i} (int8)" for i in range(32)],
                     fields=cls.field_rows(raw, {"d": d.value, "qs": q}))  # fmt: skip


class Q4_0(Quant):
    name = "Q4_0"
    fields = (D, QS)
    formula = "w = d * (q - 8)"
    words = "each weight is d times its 4-bit integer q (0..15) minus the zero point 8: -8d .. 7d"

    @classmethod
    def clear(cls, raw):
        f = cls.split(raw)
        d = f16(f["d"])
        q = nibbles(f["qs"]).astype(np.int8) - 8  # 0..15 -> -8..7
        return (d * q.astype(np.float32)).reshape(-1)

    @classmethod
    def step(cls, r, o):
        q = kernels.nibble_runs(r, cls.at["qs"], 1, 16)
        q -= np.uint8(8)  # 0..15 -> -8..7 in two's complement, read through the int8 view
        o[...] = q.view(np.int8)  # int8 -> float32, exact
        o *= kernels.per_weight(kernels.f16_column(r, cls.at["d"]))

    @classmethod
    def decode_block(cls, raw):
        packed = list(cls.block_fields(raw)["qs"])
        q = [b & 0x0F for b in packed] + [b >> 4 for b in packed]
        level = [x - 8 for x in q]
        d = cls.fp16_field(raw, "d")
        values = np.float32(d.value) * np.array(level, dtype=np.float32)
        return Block(cls.name, bytes(raw), d, None, q, values, cls.formula, packed, level, [d.value] * 32, [],
                     nibble_sources(cls.at["qs"], 1, 16, packed), cls.field_rows(raw, {"d": d.value, "qs": packed}))  # fmt: skip


class Q4_1(Quant):
    name = "Q4_1"
    fields = (D, M, QS)
    formula = "w = d * q + m"
    words = (
        "each weight is d times its 4-bit integer q (0..15, all non-negative) plus the minimum m: m is the "
        "smallest weight the block can hold and d the step between neighbouring levels"
    )

    @classmethod
    def clear(cls, raw):
        f = cls.split(raw)
        d, m = f16(f["d"]), f16(f["m"])
        q = nibbles(f["qs"]).astype(np.float32)
        return (d * q + m).reshape(-1)

    @classmethod
    def step(cls, r, o):
        o[...] = kernels.nibble_runs(r, cls.at["qs"], 1, 16)
        o *= kernels.per_weight(kernels.f16_column(r, cls.at["d"]))  # multiply, then add: two roundings
        o += kernels.per_weight(kernels.f16_column(r, cls.at["m"]))

    @classmethod
    def decode_block(cls, raw):
        packed = list(cls.block_fields(raw)["qs"])
        q = [b & 0x0F for b in packed] + [b >> 4 for b in packed]
        d, m = cls.fp16_field(raw, "d"), cls.fp16_field(raw, "m")
        # multiply, round to float32, add, round again: the order gguf-py uses
        values = np.float32(d.value) * np.array(q, dtype=np.float32) + np.float32(m.value)
        return Block(cls.name, bytes(raw), d, m, q, values, cls.formula, packed, q, [d.value] * 32, [m.value] * 32,
                     nibble_sources(cls.at["qs"], 1, 16, packed),
                     cls.field_rows(raw, {"d": d.value, "m": m.value, "qs": packed}))  # fmt: skip


def _five_bit_block(cls, raw: bytes) -> tuple[list[int], list[int], list[str], int]:
    """Q5_0/Q5_1, one block: the packed bytes, q 0..31 (low 4 bits from qs, bit 4 from bit i of qh),
    where each q's bits sit, and qh."""
    f = cls.block_fields(raw)
    packed, qh = list(f["qs"]), int.from_bytes(f["qh"], "little")
    low = [b & 0x0F for b in packed] + [b >> 4 for b in packed]
    high = [(qh >> i) & 1 for i in range(32)]  # bit i of qh is the fifth bit of weight i
    q = [lo | (hi << 4) for lo, hi in zip(low, high)]
    where = nibble_sources(cls.at["qs"], 1, 16, packed)
    return packed, q, [f"{s} + bit {i} of qh ({h})" for i, (s, h) in enumerate(zip(where, high))], qh


class Q5_0(Quant):
    name = "Q5_0"
    fields = (D, QH, QS)
    formula = "w = d * (q - 16)"
    words = "each weight is d times its 5-bit integer q (0..31: 4 bits in qs, the fifth in qh) minus 16"

    @classmethod
    def clear(cls, raw):
        f = cls.split(raw)
        d = f16(f["d"])
        q = (nibbles(f["qs"]) | fifth_bits(f["qh"]) << 4).astype(np.int8) - 16  # 0..31 -> -16..15
        return (d * q.astype(np.float32)).reshape(-1)

    @classmethod
    def step(cls, r, o):
        q = kernels.fifth_bits(r, cls.at["qh"], kernels.nibble_runs(r, cls.at["qs"], 1, 16))
        q -= np.uint8(16)  # 0..31 -> -16..15
        o[...] = q.view(np.int8)
        o *= kernels.per_weight(kernels.f16_column(r, cls.at["d"]))

    @classmethod
    def decode_block(cls, raw):
        packed, q, sources, qh = _five_bit_block(cls, raw)
        level = [x - 16 for x in q]
        d = cls.fp16_field(raw, "d")
        values = np.float32(d.value) * np.array(level, dtype=np.float32)
        shown = {"d": d.value, "qh": f"0x{qh:08x}", "qs": packed}
        return Block(cls.name, bytes(raw), d, None, q, values, cls.formula, packed, level, [d.value] * 32, [],
                     sources, cls.field_rows(raw, shown))  # fmt: skip


class Q5_1(Quant):
    name = "Q5_1"
    fields = (D, M, QH, QS)
    formula = "w = d * q + m"
    words = "as Q5_0 without the zero point, plus a minimum: d times the 5-bit q (0..31) plus m"

    @classmethod
    def clear(cls, raw):
        f = cls.split(raw)
        d, m = f16(f["d"]), f16(f["m"])
        q = (nibbles(f["qs"]) | fifth_bits(f["qh"]) << 4).astype(np.float32)
        return (d * q + m).reshape(-1)

    @classmethod
    def step(cls, r, o):
        o[...] = kernels.fifth_bits(r, cls.at["qh"], kernels.nibble_runs(r, cls.at["qs"], 1, 16))
        o *= kernels.per_weight(kernels.f16_column(r, cls.at["d"]))
        o += kernels.per_weight(kernels.f16_column(r, cls.at["m"]))

    @classmethod
    def decode_block(cls, raw):
        packed, q, sources, qh = _five_bit_block(cls, raw)
        d, m = cls.fp16_field(raw, "d"), cls.fp16_field(raw, "m")
        values = np.float32(d.value) * np.array(q, dtype=np.float32) + np.float32(m.value)
        shown = {"d": d.value, "m": m.value, "qh": f"0x{qh:08x}", "qs": packed}
        return Block(cls.name, bytes(raw), d, m, q, values, cls.formula, packed, q, [d.value] * 32, [m.value] * 32,
                     sources, cls.field_rows(raw, shown))  # fmt: skip

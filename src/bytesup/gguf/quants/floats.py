"""The float types: one weight per "block", no scale. F32 is the number itself, F16 an IEEE half
widened to float32 (exact), BF16 the top 16 bits of a float32 with zeros put back below."""

from __future__ import annotations

import numpy as np

from bytesup.gguf.blocks import Block, fp16_by_hand, fp32_by_hand
from bytesup.gguf.quants.base import Field, Quant


def _one_number(cls, raw: bytes, by_hand, where: str, mantissa_shift: int = 0) -> Block:
    """A float type's "block": its one number taken apart by hand (sign, exponent, mantissa, value)."""
    bits = int.from_bytes(cls.block_fields(raw)["value"], "little")
    h = by_hand(bits)
    n = cls.type_size
    shown = [("sign", 0, n, h.sign), ("exponent", 0, n, h.exponent), ("mantissa", 0, n, h.mantissa >> mantissa_shift),
             ("value", 0, n, h.value)]  # fmt: skip
    return Block(cls.name, bytes(raw), None, None, [bits], np.array([h.value], np.float32), cls.formula,
                 stored_in=[where], fields=shown)  # fmt: skip


class F32(Quant):
    name = "F32"
    fields = (Field("value", 4, "an IEEE float32, little-endian: 1 sign, 8 exponent, 23 mantissa bits"),)
    formula = "w = (-1)^sign * (1 + mantissa/2^23) * 2^(exponent-127)"
    words = "the weight itself, as a float32"

    @classmethod
    def clear(cls, raw):
        """A copy, so the result is ours to change."""
        return raw.view("<f4").astype(np.float32)

    @classmethod
    def fast(cls, raw, out=None, threads=None):
        # one numpy pass, memory-bound: `threads` is accepted for a uniform signature and not used
        out = np.empty(raw.size // 4, np.float32) if out is None else out
        np.copyto(out, np.frombuffer(raw, "<f4"))
        return out

    @classmethod
    def decode_block(cls, raw):
        return _one_number(cls, raw, fp32_by_hand, "bytes 0-3 (float32, little-endian)")


class F16(Quant):
    name = "F16"
    fields = (Field("value", 2, "an IEEE half, little-endian: 1 sign, 5 exponent, 10 mantissa bits"),)
    formula = "w = (-1)^sign * (1 + mantissa/1024) * 2^(exponent-15)"
    words = "an IEEE half-precision number, widened to float32 (exactly)"

    @classmethod
    def clear(cls, raw):
        return raw.view("<f2").astype(np.float32)

    @classmethod
    def fast(cls, raw, out=None, threads=None):
        out = np.empty(raw.size // 2, np.float32) if out is None else out
        np.copyto(out, np.frombuffer(raw, "<f2"))  # numpy's SIMD conversion, no temporary
        return out

    @classmethod
    def decode_block(cls, raw):
        return _one_number(cls, raw, fp16_by_hand, "bytes 0-1 (fp16, little-endian)")


class BF16(Quant):
    name = "BF16"
    fields = (Field("value", 2, "the top 16 bits of a float32: 1 sign, 8 exponent, 7 mantissa bits"),)
    formula = "w = the float32 with these 16 bits on top"
    words = "the top half of a float32; the 16 bits below are zeros"

    @classmethod
    def clear(cls, raw):
        """Put the 16 bits back on top, zeros below."""
        top = raw.view("<u2").astype(np.uint32)
        return (top << 16).view(np.float32)

    @classmethod
    def fast(cls, raw, out=None, threads=None):
        out = np.empty(raw.size // 2, np.float32) if out is None else out
        bits = out.view(np.uint32)
        np.copyto(bits, np.frombuffer(raw, "<u2"))
        bits <<= 16
        return out

    @classmethod
    def decode_block(cls, raw):
        # the 16 bits on top of a float32: taken apart as the float32 they make, its mantissa's top 7 bits
        return _one_number(cls, raw, lambda bits: fp32_by_hand(bits << 16), "bytes 0-1 (bfloat16, little-endian)", 16)

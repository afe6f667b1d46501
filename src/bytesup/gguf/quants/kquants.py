"""The K-quants: super-blocks of 256 weights with one or two fp16 numbers for the whole of it (d, and
dmin where the type has minimums), split into sub-blocks of 16 or 32 weights that each get a small
integer scale (and minimum) of their own. Per sub-block j, in gguf-py's and ggml's roundings:

    w = (d * scale[j]) * q - (dmin * min[j])      (Q2_K, Q4_K, Q5_K)
    w = (d * scale[j]) * q                         (Q3_K, Q6_K: q signed)

The bracketed products are rounded to float32 first (one per sub-block), then multiplied by q, then
the minimum subtracted: three roundings, in that order (base.SuperBlock.clear).

The fast steps do the same arithmetic shaped like the legacy ones: bit fields taken from the whole
chunk's bytes at once and moved into weight order as 16- to 64-byte items, per-sub-block numbers
repeated to one per weight. The packed 6-bit scales of Q3_K, Q4_K and Q5_K are unpacked four at a
time as little-endian uint32 words, as ggml does.
"""

from __future__ import annotations

import numpy as np

from bytesup.gguf.blocks import crumb_sources, high_bit_sources, nibble_sources
from bytesup.gguf.quants import kernels
from bytesup.gguf.quants.base import Field, SuperBlock
from bytesup.gguf.quants.bits import crumbs, high_bits, nibbles

D = Field("d", 2, "fp16: the scale of the sub-block scales")
DMIN = Field("dmin", 2, "fp16: the scale of the sub-block minimums")
SCALES_K4 = Field("scales", 12, "eight 6-bit scales and eight 6-bit minimums, packed (unpack_scale_min_k4)")
QS_K4 = Field("qs", 128, "4-bit quants in 4 runs of 32 bytes: run c holds sub-block 2c (low nibbles), 2c + 1 (high)")


def unpack_scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K and Q5_K: the 12 packed bytes -> eight 6-bit scales and eight 6-bit minimums (0..63 each).

        bytes 0-3   scale[j]     in bits 0-5, bits 4-5 of scale[j+4] in bits 6-7   (j = 0..3)
        bytes 4-7   min[j]       in bits 0-5, bits 4-5 of min[j+4]   in bits 6-7
        bytes 8-11  bits 0-3 of scale[j+4] in the low nibble, bits 0-3 of min[j+4] in the high

    (..., 12) uint8 -> two (..., 8) uint8 arrays: (scale, min).
    """
    scales = np.asarray(scales, np.uint8)
    a, b, c = scales[..., 0:4], scales[..., 4:8], scales[..., 8:12]
    scale = np.concatenate([a & 0x3F, (c & 0x0F) | (a >> 6) << 4], axis=-1)
    minimum = np.concatenate([b & 0x3F, (c >> 4) | (b >> 6) << 4], axis=-1)
    return scale, minimum


def unpack_q3_k_scales(scales: np.ndarray) -> np.ndarray:
    """Q3_K: the 12 packed bytes -> sixteen signed 6-bit scales (-32..31).

        bytes 0-7   bits 0-3 of scale[j] in the low nibble of byte j, of scale[j+8] in the high nibble
        bytes 8-11  bits 4-5 of scale[j], scale[j+4], scale[j+8], scale[j+12] in bits 0-1, 2-3, 4-5, 6-7 of byte 8+j
        stored as scale + 32

    (..., 12) uint8 -> (..., 16) int8.
    """
    scales = np.asarray(scales, np.uint8)
    low, high = scales[..., 0:8], scales[..., 8:12]
    low4 = np.concatenate([low & 0x0F, low >> 4], axis=-1)
    high2 = np.concatenate([(high >> shift) & 0x03 for shift in (0, 2, 4, 6)], axis=-1)
    return (low4 | high2 << 4).astype(np.int8) - np.int8(32)


def _scale_min_k4_fast(r: np.ndarray, at: int, d: np.ndarray, dmin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: (d * scale[j], dmin * min[j]) as (k, 8) float32 each, from the 12 bytes at `at`."""
    k = r.shape[0]
    w = r[:, at : at + 12].view("<u4")  # (k, 3): the 12 bytes as three little-endian words a, b, c
    a, b, c = w[:, 0], w[:, 1], w[:, 2]
    sm = np.empty((k, 4), "<u4")  # as bytes: scale 0-3, scale 4-7, min 0-3, min 4-7
    sm[:, 0] = a & np.uint32(0x3F3F3F3F)
    sm[:, 1] = (c & np.uint32(0x0F0F0F0F)) | ((a >> np.uint32(2)) & np.uint32(0x30303030))
    sm[:, 2] = b & np.uint32(0x3F3F3F3F)
    sm[:, 3] = ((c >> np.uint32(4)) & np.uint32(0x0F0F0F0F)) | ((b >> np.uint32(2)) & np.uint32(0x30303030))
    both = sm.view(np.uint8).astype(np.float32)  # (k, 16): 8 scales, 8 minimums
    both *= np.repeat(np.stack([d, dmin], axis=1), 8).reshape(k, 16)
    return both[:, :8], both[:, 8:]


class Q2_K(SuperBlock):
    name = "Q2_K"
    fields = (
        Field("scales", 16, "sub-block j's 4-bit scale in the low nibble of byte j, its 4-bit minimum in the high"),
        Field("qs", 64, "2-bit quants in 2 runs of 32 bytes: bits 2s..2s+1 of byte j are weight 128h + 32s + j"),
        D,
        DMIN,
    )
    formula = "w = (d * scale[j]) * q - (dmin * min[j])"
    words = "sixteen sub-blocks of 16: a 2-bit q (0..3) times d * scale[j], minus dmin * min[j]; scale, min 4 bits"
    sub_block = 16

    @classmethod
    def unpack(cls, f):
        return {"scale": f["scales"] & 0x0F, "min": f["scales"] >> 4, "q": crumbs(f["qs"])}

    @classmethod
    def stored_in(cls):
        return crumb_sources(cls.at["qs"])

    @classmethod
    def step(cls, r, o):
        k, a = r.shape[0], cls.at
        o[...] = kernels.bit_planes(kernels.columns(r, a["qs"], a["qs"] + 64), 2)
        words = r[:, a["scales"] : a["scales"] + 16].view("<u4")  # (k, 4): the 16 scale bytes, four at a time
        sm = np.empty((k, 8), "<u4")  # as bytes: 16 scales (low nibbles), then 16 minimums (high nibbles)
        for i in range(4):
            np.bitwise_and(words[:, i], np.uint32(0x0F0F0F0F), out=sm[:, i])
            np.right_shift(words[:, i], np.uint32(4), out=sm[:, 4 + i])
            sm[:, 4 + i] &= np.uint32(0x0F0F0F0F)
        both = sm.view(np.uint8).astype(np.float32)  # (k, 32)
        d, dmin = kernels.f16_column(r, a["d"]), kernels.f16_column(r, a["dmin"])
        both *= np.repeat(np.stack([d, dmin], axis=1), 16).reshape(k, 32)
        o *= kernels.spread(both[:, :16], 16)
        o -= kernels.spread(both[:, 16:], 16)


class Q3_K(SuperBlock):
    name = "Q3_K"
    fields = (
        Field("hmask", 32, "the third bit of each q: bit b of byte i is weight 32b + i; a clear bit means minus 4"),
        Field("qs", 64, "the low 2 bits of each q, laid out as Q2_K's quants"),
        Field("scales", 12, "sixteen 6-bit scales, packed, stored plus 32 (unpack_q3_k_scales)"),
        D,
    )
    formula = "w = (d * scale[j]) * q"
    words = "sixteen sub-blocks of 16: a 3-bit q (-4..3) times d * scale[j], scale 6 bits signed"
    sub_block = 16

    @classmethod
    def unpack(cls, f):
        low = crumbs(f["qs"]).astype(np.int8)  # 0..3
        high = high_bits(f["hmask"]).astype(np.int8)  # 0 or 1
        return {"scale": unpack_q3_k_scales(f["scales"]), "q": low - 4 * (1 - high)}  # a set bit: no offset

    @classmethod
    def stored_in(cls):
        return [
            f"{lo} + {hi} (clear: minus 4)"
            for lo, hi in zip(crumb_sources(cls.at["qs"]), high_bit_sources(cls.at["hmask"]))
        ]

    @classmethod
    def _scales_fast(cls, r: np.ndarray) -> np.ndarray:
        """The sixteen 6-bit scales of every block (k, 16) as float32 -32..31, unpacked four at a time
        from three little-endian uint32 words as ggml does (kmask1 = 0x03030303, kmask2 = 0x0F0F0F0F)."""
        k, at = r.shape[0], cls.at["scales"]
        w = r[:, at : at + 12].view("<u4")  # (k, 3)
        a0, a1, tmp = w[:, 0], w[:, 1], w[:, 2]
        m1, m2 = np.uint32(0x03030303), np.uint32(0x0F0F0F0F)
        sm = np.empty((k, 4), "<u4")  # as bytes: scales 0-3, 4-7, 8-11, 12-15, each stored plus 32
        sm[:, 0] = (a0 & m2) | ((tmp & m1) << np.uint32(4))
        sm[:, 1] = (a1 & m2) | (((tmp >> np.uint32(2)) & m1) << np.uint32(4))
        sm[:, 2] = ((a0 >> np.uint32(4)) & m2) | (((tmp >> np.uint32(4)) & m1) << np.uint32(4))
        sm[:, 3] = ((a1 >> np.uint32(4)) & m2) | (((tmp >> np.uint32(6)) & m1) << np.uint32(4))
        scale = sm.view(np.uint8).astype(np.float32)
        scale -= np.float32(32)  # exact: small integers
        return scale

    @classmethod
    def step(cls, r, o):
        k, a = r.shape[0], cls.at
        q = kernels.bit_planes(kernels.columns(r, a["qs"], a["qs"] + 64), 2, name="q")  # low 2 bits, 0..3
        offset = kernels.bit_planes(kernels.columns(r, a["hmask"], a["hmask"] + 32), 1, to=2)  # the hmask bit, as 4
        offset ^= np.uint8(4)  # 4 where the hmask bit is clear
        q -= offset  # -4..3 in two's complement, read through the int8 view
        o[...] = q.view(np.int8)
        step = cls._scales_fast(r)
        step *= np.repeat(kernels.f16_column(r, a["d"]), 16).reshape(k, 16)
        o *= kernels.spread(step, 16)


class Q4_K(SuperBlock):
    """256 weights in 144 bytes: 8 sub-blocks of 32, each with its own 6-bit scale and 6-bit min,
    themselves scaled by the super-block's two fp16 numbers (d, dmin)."""

    name = "Q4_K"
    fields = (D, DMIN, SCALES_K4, QS_K4)
    formula = "w = (d * scale[j]) * q - (dmin * min[j])"
    words = "eight sub-blocks of 32: a 4-bit q (0..15) times d * scale[j], minus dmin * min[j]; scale, min 6 bits"
    sub_block = 32

    @classmethod
    def unpack(cls, f):
        scale, minimum = unpack_scale_min_k4(f["scales"])
        return {"scale": scale, "min": minimum, "q": nibbles(f["qs"], run=32)}

    @classmethod
    def stored_in(cls):
        return nibble_sources(cls.at["qs"], 4, 32)

    @classmethod
    def step(cls, r, o):
        a = cls.at
        o[...] = kernels.nibble_runs(r, a["qs"], 4, 32)
        d, dmin = kernels.f16_column(r, a["d"]), kernels.f16_column(r, a["dmin"])
        step, low = _scale_min_k4_fast(r, a["scales"], d, dmin)
        o *= kernels.spread(step, 32)
        o -= kernels.spread(low, 32)


class Q5_K(SuperBlock):
    """Q4_K's layout plus qh, the fifth bit of each q."""

    name = "Q5_K"
    fields = (D, DMIN, SCALES_K4, Field("qh", 32, "bit 4 of each q: bit b of byte i is weight 32b + i"), QS_K4)
    formula = "w = (d * scale[j]) * q - (dmin * min[j])"
    words = "as Q4_K with a 5-bit q (0..31): its fifth bit comes from qh"
    sub_block = 32

    @classmethod
    def unpack(cls, f):
        scale, minimum = unpack_scale_min_k4(f["scales"])
        return {"scale": scale, "min": minimum, "q": nibbles(f["qs"], run=32) | high_bits(f["qh"]) << 4}

    @classmethod
    def stored_in(cls):
        low, high = nibble_sources(cls.at["qs"], 4, 32), high_bit_sources(cls.at["qh"])
        return [f"{lo} + {hi}" for lo, hi in zip(low, high)]

    @classmethod
    def step(cls, r, o):
        a = cls.at
        q = kernels.nibble_runs(r, a["qs"], 4, 32)
        q |= kernels.bit_planes(kernels.columns(r, a["qh"], a["qh"] + 32), 1, to=4)  # bit 4
        o[...] = q
        d, dmin = kernels.f16_column(r, a["d"]), kernels.f16_column(r, a["dmin"])
        step, low = _scale_min_k4_fast(r, a["scales"], d, dmin)
        o *= kernels.spread(step, 32)
        o -= kernels.spread(low, 32)


class Q6_K(SuperBlock):
    """256 weights in 210 bytes: 16 sub-blocks of 16, each with an int8 scale; d comes last."""

    name = "Q6_K"
    fields = (
        Field("ql", 128, "the low 4 bits of each q, in 2 runs of 64 bytes: low nibbles, then high nibbles"),
        Field("qh", 64, "the high 2 bits of each q, four per byte, laid out as Q2_K's quants"),
        Field("scales", 16, "16 signed bytes, one scale per sub-block of 16 weights"),
        D,
    )
    formula = "w = (d * scale[j]) * q"
    words = "sixteen sub-blocks of 16: a 6-bit q stored plus 32 (so -32..31) times d * scale[j], scale 8 bits signed"
    sub_block = 16

    @classmethod
    def unpack(cls, f):
        low = nibbles(f["ql"], run=64)  # 0..15
        high = crumbs(f["qh"])  # 0..3
        return {"scale": f["scales"].view(np.int8), "q": (low | high << 4).astype(np.int8) - 32}

    @classmethod
    def stored_in(cls):
        low, high = nibble_sources(cls.at["ql"], 2, 64), crumb_sources(cls.at["qh"])
        return [f"{lo} + {hi}" for lo, hi in zip(low, high)]

    @classmethod
    def step(cls, r, o):
        k, a = r.shape[0], cls.at
        q = kernels.nibble_runs(r, a["ql"], 2, 64)  # low 4 bits
        q |= kernels.bit_planes(kernels.columns(r, a["qh"], a["qh"] + 64), 2, to=4)  # bits 4 and 5
        q -= np.uint8(32)  # 0..63 -> -32..31
        o[...] = q.view(np.int8)
        step = kernels.columns(r, a["scales"], a["scales"] + 16).view(np.int8).astype(np.float32)
        step *= np.repeat(kernels.f16_column(r, a["d"]), 16).reshape(k, 16)
        o *= kernels.spread(step, 16)

"""The IQ4 types: a 4-bit q is not a level itself but an index into 16 non-uniform levels
(KVALUES_IQ4, ggml's kvalues_iq4nl), closer together near zero where most weights are. IQ4_NL is
a block of 32 with d alone; IQ4_XS a super-block of 256 with eight 6-bit sub-block scales."""

from __future__ import annotations

import numpy as np

from bytesup.gguf.blocks import nibble_sources
from bytesup.gguf.quants import kernels
from bytesup.gguf.quants.base import Field, SuperBlock
from bytesup.gguf.quants.bits import nibbles

KVALUES_IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
_KVALUES_IQ4_F32 = KVALUES_IQ4.astype(np.float32)


def unpack_iq4_xs_scales(scales_h: np.ndarray, scales_l: np.ndarray) -> np.ndarray:
    """IQ4_XS: 2 + 4 packed bytes -> eight signed 6-bit scales (-32..31).

        scales_l  bits 0-3 of scale[2i] in the low nibble of byte i, of scale[2i+1] in the high nibble
        scales_h  a little-endian uint16: bits 4-5 of scale[j] in its bits 2j, 2j+1
        stored as scale + 32

    (..., 2) and (..., 4) uint8 -> (..., 8) int8.
    """
    scales_l = np.asarray(scales_l, np.uint8)
    high = np.ascontiguousarray(scales_h, np.uint8).view("<u2")  # (..., 1)
    low4 = np.stack([scales_l & 0x0F, scales_l >> 4], axis=-1).reshape(*scales_l.shape[:-1], 8)
    high2 = ((high >> (2 * np.arange(8, dtype=np.uint16))) & 0x03).astype(np.uint8)
    return (low4 | high2 << 4).astype(np.int8) - np.int8(32)


class IQ4_NL(SuperBlock):
    name = "IQ4_NL"
    fields = (
        Field("d", 2, "fp16 scale"),
        Field("qs", 16, "4-bit indices laid out as Q4_0's quants: low nibbles weights 0..15, high 16..31"),
    )
    formula = "w = d * KVALUES_IQ4[q]"
    words = "a block of 32: d times the level that the 4-bit index q picks from 16 non-uniform levels"
    sub_block = 32
    levels = KVALUES_IQ4

    @classmethod
    def unpack(cls, f):
        return {"q": nibbles(f["qs"])}

    @classmethod
    def stored_in(cls):
        return nibble_sources(cls.at["qs"], 1, 16)

    @classmethod
    def step(cls, r, o):
        o[...] = _KVALUES_IQ4_F32[kernels.nibble_runs(r, cls.at["qs"], 1, 16)]
        o *= kernels.per_weight(kernels.f16_column(r, cls.at["d"]))


class IQ4_XS(SuperBlock):
    name = "IQ4_XS"
    fields = (
        Field("d", 2, "fp16: the scale of the sub-block scales"),
        Field("scales_h", 2, "a little-endian uint16: bits 4-5 of scale[j] in its bits 2j, 2j+1"),
        Field("scales_l", 4, "bits 0-3 of scale[2i] in the low nibble of byte i, of scale[2i+1] in the high"),
        Field("qs", 128, "4-bit indices in 8 runs of 16 bytes: run j holds weights 32j..32j+15 (low), +16..+31 (high)"),
    )
    formula = "w = (d * scale[j]) * KVALUES_IQ4[q]"
    words = "eight sub-blocks of 32: d * scale[j] (6 bits signed) times the level the 4-bit index q picks"
    sub_block = 32
    levels = KVALUES_IQ4

    @classmethod
    def unpack(cls, f):
        return {"scale": unpack_iq4_xs_scales(f["scales_h"], f["scales_l"]), "q": nibbles(f["qs"])}

    @classmethod
    def stored_in(cls):
        return nibble_sources(cls.at["qs"], 8, 16)

    @classmethod
    def step(cls, r, o):
        k, a = r.shape[0], cls.at
        o[...] = _KVALUES_IQ4_F32[kernels.nibble_runs(r, a["qs"], 8, 16)]
        step = unpack_iq4_xs_scales(r[:, a["scales_h"] : a["scales_h"] + 2], r[:, a["scales_l"] : a["scales_l"] + 4])
        step = step.astype(np.float32)
        step *= np.repeat(kernels.f16_column(r, a["d"]), 8).reshape(k, 8)
        o *= kernels.spread(step, 32)

"""The clear versions' bit-field helpers: whole blocks' bytes -> numbers, one plain numpy line each.

Every helper takes (n_blocks, bytes) uint8 arrays, as a record's split() cuts them, and returns
the values in weight order. The fast versions do the same with longer loops (kernels.py).
"""

from __future__ import annotations

import numpy as np


def f16(two_bytes: np.ndarray) -> np.ndarray:
    """(n, 2) uint8 -> (n, 1) float32: the fp16 numbers stored in those bytes (exact: every half fits)."""
    return np.ascontiguousarray(two_bytes).view("<f2").astype(np.float32)


def nibbles(qs: np.ndarray, run: int = 16) -> np.ndarray:
    """(n, R * run) bytes of 4-bit values -> (n, 2 * R * run) values 0..15.

    The bytes come in R runs of `run`; each run holds `run` weights in its low nibbles, then the
    next `run` weights in its high nibbles (Q4_0/Q4_1/IQ4_NL: one run of 16; IQ4_XS: eight of 16;
    Q4_K/Q5_K: four of 32; Q6_K's low bits: two of 64).
    """
    runs = qs.reshape(qs.shape[0], -1, 1, run)
    return np.concatenate([runs & 0x0F, runs >> 4], axis=2).reshape(qs.shape[0], -1)


def crumbs(qs: np.ndarray) -> np.ndarray:
    """(n, H * 32) bytes of 2-bit values -> (n, H * 128) values 0..3.

    Runs of 32 bytes; in run h, bits 2s..2s+1 of byte i are weight 128h + 32s + i (Q2_K's and
    Q3_K's quants, Q6_K's top two bits).
    """
    runs = qs.reshape(qs.shape[0], -1, 1, 32)
    return np.concatenate([(runs >> shift) & 0x03 for shift in (0, 2, 4, 6)], axis=2).reshape(qs.shape[0], -1)


def high_bits(qh: np.ndarray) -> np.ndarray:
    """(n, 32) bytes -> (n, 256) bits; bit b of byte i is weight 32b + i (Q3_K's hmask, Q5_K's qh)."""
    return np.concatenate([(qh >> b) & 0x01 for b in range(8)], axis=1)


def fifth_bits(qh: np.ndarray) -> np.ndarray:
    """(n, 4) bytes of a little-endian uint32 -> (n, 32) bits; bit j is weight j (Q5_0's and Q5_1's qh)."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=1, bitorder="little")

"""Dequantizers: GGUF tensor bytes back to float32 weights.

Each type has two versions, both bit-exact against gguf.quants.dequantize:

* a clear one that reads like the block layout (one line per field), and
* a fast one beside it: the same arithmetic as a few whole-chunk numpy passes over
  views of the bytes, written in place into one output array (why it is shaped the
  way it is: see "fast 4- and 5-bit" below), the chunks spread over a pool of threads.
  Pass out= to reuse an output array, threads= to choose how many (default_threads()).

The legacy types store weights in blocks of 32 along a row:

    Q8_0  34 bytes: d (fp16)                      + 32 x int8 q                  w = d * q
    Q4_0  18 bytes: d (fp16)                      + 16 bytes of 4-bit q          w = d * (q - 8)
    Q4_1  20 bytes: d (fp16), m (fp16)            + 16 bytes of 4-bit q          w = d * q + m
    Q5_0  22 bytes: d (fp16), qh (32 high bits)   + 16 bytes of low 4 bits       w = d * (q - 16)
    Q5_1  24 bytes: d (fp16), m (fp16), qh        + 16 bytes of low 4 bits       w = d * q + m

In the 4-bit types, byte j of a block holds weight j in its low nibble and weight j+16
in its high nibble. In the 5-bit types, bit j of the little-endian uint32 qh is bit 4
of weight j.

The K-quants (Q2_K..Q6_K) and IQ4_XS use super-blocks of 256 weights with packed
per-sub-block scales; IQ4_NL is a block of 32 with a non-uniform 16-level grid. Their
layouts are in BLOCK_FIELDS and under "K-quants" below; split_fields and the unpack_*
helpers take one super-block apart field by field.

Bit-exactness: fp16 -> fp32 is exact for every finite value; then one float32 multiply
and (for _1 types) one float32 add, in that order, exactly as gguf-py does. No fused
multiply-add, no float64 on the way.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from math import prod

import numpy as np
from gguf import quants as gguf_quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

log = logging.getLogger(__name__)

CHUNK_BLOCKS = 8192  # blocks of 32 per step in the fast versions (1 MiB of float32 out); see _chunk_blocks

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


def f32_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    # one numpy pass, memory-bound: `threads` is accepted for a uniform signature and not used
    out = np.empty(raw.size // 4, np.float32) if out is None else out
    np.copyto(out, np.frombuffer(raw, "<f4"))
    return out


def f16_clear(raw: np.ndarray) -> np.ndarray:
    """F16: 2 bytes per weight (1 sign, 5 exponent, 10 mantissa bits), widened to float32."""
    return raw.view("<f2").astype(np.float32)


def f16_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    out = np.empty(raw.size // 2, np.float32) if out is None else out
    np.copyto(out, np.frombuffer(raw, "<f2"))  # numpy's SIMD conversion, no temporary
    return out


def bf16_clear(raw: np.ndarray) -> np.ndarray:
    """BF16: the top 16 bits of a float32. Put them back on top, zeros below."""
    top = raw.view("<u2").astype(np.uint32)
    return (top << 16).view(np.float32)


def bf16_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
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


def _q8_0_step(r, o):
    o[...] = _columns(r, 2, 34).view(np.int8)  # the quants as one contiguous run, int8 -> float32, exact
    o *= _per_weight(F16_TO_F32[r[:, 0:2].view("<u2")[:, 0]])


def q8_0_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 34, out, _q8_0_step, 32, threads)


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
#   * bit fields are split eight bytes at a time, as uint64 words (numpy shifts uint8 to the
#     left one element at a time: x86 has no 8-bit shift);
#   * the 16 bytes of low nibbles and the 16 of high nibbles of a block are moved as two
#     16-byte items ('V16'), giving the quants as one contiguous (blocks, 32) array;
#   * d and m are spread to one per weight (np.repeat), so multiply and add are plain
#     element-wise passes rather than broadcasts.
# And the byte-sized temporaries are not fresh memory: the kernel's page fault on the first
# touch of each 4 KiB costs about as much as this arithmetic, so they live in per-thread
# buffers kept between calls (_scratch).
# The arithmetic is unchanged: fp16 -> fp32, multiply, then add.

_LOCAL = threading.local()


def _scratch(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """This thread's buffer `name`, as an array of `shape` and `dtype` (contents undefined); kept from
    call to call and grown when a bigger one is asked for."""
    dtype = np.dtype(dtype)
    n = prod(shape) * dtype.itemsize
    bufs = _LOCAL.__dict__.setdefault("bufs", {})
    buf = bufs.get(name)
    if buf is None or buf.size < n:
        buf = bufs[name] = np.empty(n, np.uint8)
    return buf[:n].view(dtype).reshape(shape)


def _columns(r: np.ndarray, start: int, stop: int, name: str = "columns") -> np.ndarray:
    """Bytes start:stop of every block as a contiguous (k, stop - start) array (one item copy per block)."""
    n = stop - start
    out = _scratch(name, (r.shape[0], n), np.uint8)
    out.view(f"V{n}")[:, 0] = r[:, start:stop].view(f"V{n}")[:, 0]
    return out


_U64 = np.uint64
_LOW_NIBBLES = _U64(0x0F0F0F0F0F0F0F0F)


def _bytes_mask(mask: int) -> np.uint64:
    """The one-byte mask repeated over the eight bytes of a uint64 word."""
    return _U64(int.from_bytes(bytes([mask]) * 8, "little"))


def _nibble_runs(r: np.ndarray, start: int, runs: int, run: int, name: str = "q") -> np.ndarray:
    """(k, type_size) blocks with `runs` runs of `run` bytes of nibbles at `start` -> (k, 2 * runs * run)
    uint8 0..15 in weight order: each run's low nibbles, then its high nibbles.

    The nibbles are split eight bytes at a time (uint64 words), then each run's two halves moved
    into place as `run`-byte items.
    """
    k = r.shape[0]
    words = _columns(r, start, start + runs * run, "nibble_bytes").view(_U64)
    half = _scratch("nibble_half", words.shape, _U64)
    q = _scratch(name, (k, runs, 2, run), np.uint8)
    items = q.view(f"V{run}")  # (k, runs, 2, 1): [low plane, high plane] of each run
    np.bitwise_and(words, _LOW_NIBBLES, out=half)
    items[:, :, 0, 0] = half.view(np.uint8).view(f"V{run}")
    np.right_shift(words, _U64(4), out=half)
    half &= _LOW_NIBBLES
    items[:, :, 1, 0] = half.view(np.uint8).view(f"V{run}")
    return q.reshape(k, -1)


def _spread(values: np.ndarray, times: int) -> np.ndarray:
    """(k, n) float32 numbers -> (k, n * times), each repeated `times` times in a row.

    np.repeat, a new array: faster than a broadcast copy into a kept buffer (it copies whole
    items rather than running one short loop per number), and its memory comes back from the
    allocator's free list rather than fresh from the kernel.
    """
    return np.repeat(values.reshape(-1), times).reshape(values.shape[0], -1)


def _quants_4bit(r: np.ndarray, start: int) -> np.ndarray:
    """(k, type_size) block bytes with 16 bytes of nibbles at `start` -> (k, 32) uint8 values 0..15."""
    return _nibble_runs(r, start, 1, 16)


_SPREAD_BYTE = _U64(0x0101010101010101)  # a byte times this: the byte in each of the eight lanes
_LANE_BIT = _U64(0x8040201008040201)  # lane i keeps bit i
_LOW_SEVEN = _U64(0x7F7F7F7F7F7F7F7F)
_TOP_BITS = _U64(0x8080808080808080)


def _quants_5bit(r: np.ndarray, qh_at: int) -> np.ndarray:
    """As _quants_4bit, plus bit 4 of weight j from bit j of the uint32 at qh_at: values 0..31.

    Each byte of qh becomes eight bytes, one bit each, as one uint64 word: copied into all eight
    lanes (times 0x0101...), lane i keeps bit i, adding 0x7F carries any set bit up to bit 7 of its
    lane, and bit 7 moved to bit 4 is the 16 to add.
    """
    q = _quants_4bit(r, qh_at + 4)
    k = r.shape[0]
    high = _scratch("high", (k, 4), _U64)  # word b: the bits of byte b of qh, one per byte
    np.multiply(_columns(r, qh_at, qh_at + 4, "qh"), _SPREAD_BYTE, out=high, dtype=_U64)
    high &= _LANE_BIT
    high += _LOW_SEVEN
    high &= _TOP_BITS
    high >>= _U64(3)
    q.reshape(k, 4, 8).view(_U64)[..., 0] |= high
    return q


def _f16_column(r: np.ndarray, at: int) -> np.ndarray:
    """The fp16 number at byte `at` of every block, as float32 (k,)."""
    return r[:, at : at + 2].view("<f2")[:, 0].astype(np.float32)


def _per_weight(values: np.ndarray) -> np.ndarray:
    """(k,) per-block numbers -> (k, 32), each repeated over its block's 32 weights."""
    return _spread(values.reshape(-1, 1), 32)


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


THREADS_ENV = ("BYTESUP_THREADS", "OMP_NUM_THREADS")  # the first one set to a positive integer wins


def default_threads() -> int:
    """Threads for a fast dequantizer given threads=None: $BYTESUP_THREADS, else $OMP_NUM_THREADS (as a
    job runner sets it for a job's `threads`), else every CPU this process may use."""
    for name in THREADS_ENV:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return available_cpus()


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool per size and process (a forked child does not inherit its parent's threads)."""
    key = (os.getpid(), workers)
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ThreadPoolExecutor(workers, thread_name_prefix="bytesup-dequant")
        return _POOLS[key]


def _chunk_blocks(block_size: int) -> int:
    """Blocks per step: CHUNK_BLOCKS blocks of 32, or CHUNK_BLOCKS // 4 super-blocks of 256 (twice the
    weights: a K-quant step makes about twice as many numpy calls, each with its fixed cost)."""
    return max(1, CHUNK_BLOCKS * 32 // block_size if block_size <= 32 else CHUNK_BLOCKS // 4)


def _fast_blocks(
    raw: np.ndarray, type_size: int, out: np.ndarray | None, step, block_size: int = 32, threads: int | None = None
) -> np.ndarray:
    """Run step(block_bytes_chunk, out_chunk) over the tensor, _chunk_blocks(block_size) blocks at a time.

    With threads > 1 (None: default_threads()) the chunks go to a pool of that many
    threads, each writing its own rows of the one output array; numpy releases the GIL inside
    each whole-chunk pass, so the chunks run side by side.
    """
    rows = np.ascontiguousarray(raw, np.uint8).reshape(-1, type_size)
    n = rows.shape[0]
    out = np.empty(n * block_size, np.float32) if out is None else out
    o2 = out.reshape(n, block_size)
    workers = default_threads() if threads is None else max(1, int(threads))
    chunks = -(-n // _chunk_blocks(block_size))
    if workers > 1:
        chunks = -(-chunks // workers) * workers  # a whole number of rounds: every thread gets as many
    per = max(1, -(-n // max(1, chunks)))
    starts = range(0, n, per)
    workers = min(workers, len(starts))

    def work(s: int) -> None:
        step(rows[s : s + per], o2[s : s + per])

    if workers <= 1:
        for s in starts:
            work(s)
    else:
        # each chunk runs in a copy of the caller's context, so np.errstate set by the caller holds there too
        contexts = [contextvars.copy_context() for _ in starts]
        for _ in _pool(workers).map(lambda s, ctx: ctx.run(work, s), starts, contexts):
            pass
    return out


def _q4_0_step(r, o):
    q = _quants_4bit(r, 2)
    q -= np.uint8(8)  # 0..15 -> -8..7 in two's complement, read through the int8 view
    o[...] = q.view(np.int8)  # int8 -> float32, exact
    o *= _per_weight(_f16_column(r, 0))


def _q4_1_step(r, o):
    o[...] = _quants_4bit(r, 4)
    o *= _per_weight(_f16_column(r, 0))  # multiply, then add: two roundings, like gguf-py
    o += _per_weight(_f16_column(r, 2))


def _q5_0_step(r, o):
    q = _quants_5bit(r, 2)
    q -= np.uint8(16)  # 0..31 -> -16..15
    o[...] = q.view(np.int8)
    o *= _per_weight(_f16_column(r, 0))


def _q5_1_step(r, o):
    o[...] = _quants_5bit(r, 4)
    o *= _per_weight(_f16_column(r, 0))
    o += _per_weight(_f16_column(r, 2))


def q4_0_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 18, out, _q4_0_step, 32, threads)


def q4_1_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 20, out, _q4_1_step, 32, threads)


def q5_0_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 22, out, _q5_0_step, 32, threads)


def q5_1_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 24, out, _q5_1_step, 32, threads)


# -- K-quants: super-blocks of 256 weights -------------------------------------------------
#
# The K-quants (and IQ4_XS) group 256 weights into one super-block with one or two fp16
# numbers for the whole of it, and split it into sub-blocks of 16 or 32 weights that each
# get a small integer scale (and minimum) of their own. Per sub-block j:
#
#     Q2_K   84 bytes  16 x 16 weights, 2-bit q  w = (d * scale[j]) * q - (dmin * min[j]),  4-bit scale, min
#     Q3_K  110 bytes  16 x 16 weights, 3-bit q  w = (d * scale[j]) * q,                    6-bit signed scale
#     Q4_K  144 bytes   8 x 32 weights, 4-bit q  w = (d * scale[j]) * q - (dmin * min[j]),  6-bit scale, min
#     Q5_K  176 bytes   8 x 32 weights, 5-bit q  w = (d * scale[j]) * q - (dmin * min[j]),  6-bit scale, min
#     Q6_K  210 bytes  16 x 16 weights, 6-bit q  w = (d * scale[j]) * q,                    8-bit signed scale
#     IQ4_XS 136 bytes  8 x 32 weights, 4-bit index into a table of 16 levels, 6-bit signed scale
#     IQ4_NL  18 bytes  one block of 32 weights (no super-block): w = d * KVALUES_IQ4[q]
#
# The bracketed products are rounded to float32 first (one per sub-block), then multiplied by q,
# then the minimum subtracted: three roundings, in that order, as gguf-py and ggml do.

QK_K = 256

# Each block, field by field, in file order: (name, bytes). split_fields cuts bytes along these.
BLOCK_FIELDS = {
    "Q2_K": (("scales", 16), ("qs", 64), ("d", 2), ("dmin", 2)),
    "Q3_K": (("hmask", 32), ("qs", 64), ("scales", 12), ("d", 2)),
    "Q4_K": (("d", 2), ("dmin", 2), ("scales", 12), ("qs", 128)),
    "Q5_K": (("d", 2), ("dmin", 2), ("scales", 12), ("qh", 32), ("qs", 128)),
    "Q6_K": (("ql", 128), ("qh", 64), ("scales", 16), ("d", 2)),
    "IQ4_NL": (("d", 2), ("qs", 16)),
    "IQ4_XS": (("d", 2), ("scales_h", 2), ("scales_l", 4), ("qs", 128)),
}

# IQ4_NL and IQ4_XS: a 4-bit q is an index into these 16 non-uniform levels (ggml's kvalues_iq4nl)
KVALUES_IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)


def split_fields(raw: np.ndarray, type_name: str) -> dict[str, np.ndarray]:
    """Bytes of whole blocks -> {field name: (n_blocks, field bytes) uint8}, in file order (BLOCK_FIELDS)."""
    fields = BLOCK_FIELDS[type_name]
    size = sum(n for _, n in fields)
    raw = np.asarray(raw, np.uint8).reshape(-1)
    if raw.size % size:
        raise ValueError(f"{type_name}: {raw.size} bytes is not a whole number of {size}-byte blocks")
    blocks = raw.reshape(-1, size)
    out, at = {}, 0
    for name, n in fields:
        out[name] = blocks[:, at : at + n]
        at += n
    return out


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


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """Q2_K and Q3_K: (n, 64) bytes of 2-bit quants -> (n, 256) values 0..3.

    Two halves of 32 bytes; in half h, bits 2s..2s+1 of byte i are weight 128h + 32s + i.
    """
    halves = qs.reshape(-1, 2, 1, 32)
    return np.concatenate([(halves >> shift) & 0x03 for shift in (0, 2, 4, 6)], axis=2).reshape(-1, QK_K)


def _nibbles_k(qs: np.ndarray) -> np.ndarray:
    """Q4_K, Q5_K, IQ4_XS: (n, 128) bytes of 4-bit quants -> (n, 256) values 0..15.

    Four runs of 32 bytes; in run r the low nibbles are weights 64r..64r+31, the high ones 64r+32..64r+63.
    """
    runs = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([runs & 0x0F, runs >> 4], axis=2).reshape(-1, QK_K)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """Q3_K's hmask, Q5_K's qh: (n, 32) bytes -> (n, 256) bits; bit b of byte i is weight 32b + i."""
    return np.concatenate([(qh >> b) & 0x01 for b in range(8)], axis=1)


# What the weights are, per type, in the names unpack_fields returns (j = the weight's sub-block).
FORMULAS = {
    "Q2_K": "w = (d * scale[j]) * q - (dmin * min[j])",
    "Q3_K": "w = (d * scale[j]) * q",
    "Q4_K": "w = (d * scale[j]) * q - (dmin * min[j])",
    "Q5_K": "w = (d * scale[j]) * q - (dmin * min[j])",
    "Q6_K": "w = (d * scale[j]) * q",
    "IQ4_NL": "w = d * KVALUES_IQ4[q]",
    "IQ4_XS": "w = (d * scale[j]) * KVALUES_IQ4[q]",
}
SUB_BLOCK = {"Q2_K": 16, "Q3_K": 16, "Q4_K": 32, "Q5_K": 32, "Q6_K": 16, "IQ4_NL": 32, "IQ4_XS": 32}


def _unpack_q2_k(f: dict) -> dict:
    """Q2_K, 84 bytes: scales (16: sub-block j's scale in the low nibble of byte j, its minimum in the
    high nibble), qs (64: 2-bit quants, see _crumbs), d, dmin (fp16)."""
    return {"scale": f["scales"] & 0x0F, "min": f["scales"] >> 4, "q": _crumbs(f["qs"])}


def _unpack_q3_k(f: dict) -> dict:
    """Q3_K, 110 bytes: hmask (32: the third bit of each q, see _high_bits), qs (64: the low 2 bits),
    scales (12: sixteen packed 6-bit scales), d (fp16). q = low 2 bits, minus 4 when the hmask bit
    is clear: -4..3."""
    low = _crumbs(f["qs"]).astype(np.int8)  # 0..3
    high = _high_bits(f["hmask"]).astype(np.int8)  # 0 or 1
    return {"scale": unpack_q3_k_scales(f["scales"]), "q": low - 4 * (1 - high)}  # a set bit means "no offset"


def _unpack_q4_k(f: dict) -> dict:
    """Q4_K, 144 bytes: d, dmin (fp16), scales (12: eight 6-bit scales and eight 6-bit minimums),
    qs (128: 4-bit quants, see _nibbles_k)."""
    scale, minimum = unpack_scale_min_k4(f["scales"])
    return {"scale": scale, "min": minimum, "q": _nibbles_k(f["qs"])}


def _unpack_q5_k(f: dict) -> dict:
    """Q5_K, 176 bytes: as Q4_K, plus qh (32: bit 4 of each q, see _high_bits) before qs. q: 0..31."""
    scale, minimum = unpack_scale_min_k4(f["scales"])
    return {"scale": scale, "min": minimum, "q": _nibbles_k(f["qs"]) | _high_bits(f["qh"]) << 4}


def _unpack_q6_k(f: dict) -> dict:
    """Q6_K, 210 bytes: ql (128: the low 4 bits of q), qh (64: the high 2 bits), scales (16 signed
    bytes), d (fp16). q is stored plus 32: -32..31.

    ql: two halves of 64 bytes; in half h the low nibble of byte i is weight 128h + i, the high 128h + 64 + i.
    qh: two halves of 32 bytes; in half h bits 2s..2s+1 of byte i are the top bits of weight 128h + 32s + i
        (the layout of Q2_K's 2-bit quants).
    """
    ql = f["ql"].reshape(-1, 2, 1, 64)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2).reshape(-1, QK_K)  # 0..15
    high = _crumbs(f["qh"])  # 0..3
    return {"scale": f["scales"].view(np.int8), "q": (low | high << 4).astype(np.int8) - 32}


def _unpack_iq4_nl(f: dict) -> dict:
    """IQ4_NL, 18 bytes: d (fp16), qs (16: 4-bit indices laid out as Q4_0's, low nibbles are weights
    0..15, high 16..31)."""
    return {"q": _nibbles(f["qs"])}


def _unpack_iq4_xs(f: dict) -> dict:
    """IQ4_XS, 136 bytes: d (fp16), scales_h (2) and scales_l (4): eight packed 6-bit scales, qs (128:
    4-bit indices in eight runs of 16 bytes; in run j the low nibbles are weights 32j..32j+15, the high
    ones 32j+16..32j+31)."""
    q = _nibbles(f["qs"].reshape(-1, 16)).reshape(-1, QK_K)  # each run of 16 bytes is laid out like Q4_0's
    return {"scale": unpack_iq4_xs_scales(f["scales_h"], f["scales_l"]), "q": q}


_UNPACK = {
    "Q2_K": _unpack_q2_k,
    "Q3_K": _unpack_q3_k,
    "Q4_K": _unpack_q4_k,
    "Q5_K": _unpack_q5_k,
    "Q6_K": _unpack_q6_k,
    "IQ4_NL": _unpack_iq4_nl,
    "IQ4_XS": _unpack_iq4_xs,
}


def unpack_fields(raw: np.ndarray, type_name: str) -> dict[str, np.ndarray]:
    """Whole blocks of a K-quant or IQ4 type -> their numbers, unpacked and named as in FORMULAS.

    d, dmin: (n,) float32 (the fp16 fields); scale, min: (n, sub-blocks) integers as the formula uses
    them (Q3_K and IQ4_XS already minus 32, Q6_K signed); q: (n, weights) integers in weight order
    (Q3_K -4..3, Q6_K -32..31, IQ4 an index 0..15). A lesson shows one super-block with these.
    """
    f = split_fields(raw, type_name)
    out = {"d": _f16(f["d"])[:, 0]}
    if "dmin" in f:
        out["dmin"] = _f16(f["dmin"])[:, 0]
    out.update(_UNPACK[type_name](f))
    return out


def _sub_block_formula(raw: np.ndarray, type_name: str, levels: np.ndarray | None = None) -> np.ndarray:
    """FORMULAS[type_name] on unpack_fields: (d * scale[j]) rounded to float32 once per sub-block, times
    q (or KVALUES_IQ4[q]), minus (dmin * min[j]) where the type has minimums: gguf-py's order."""
    u = unpack_fields(raw, type_name)
    size = SUB_BLOCK[type_name]
    q = (u["q"] if levels is None else levels[u["q"]]).astype(np.float32).reshape(u["d"].size, -1, size)
    d = u["d"][:, None]  # (n, 1)
    step = d if "scale" not in u else d * u["scale"].astype(np.float32)  # (n, sub-blocks), rounded once
    w = step[:, :, None] * q
    if "min" in u:
        w = w - (u["dmin"][:, None] * u["min"].astype(np.float32))[:, :, None]
    return w.reshape(-1)


def q2_k_clear(raw: np.ndarray) -> np.ndarray:
    """Q2_K: 256 weights in 84 bytes, sixteen sub-blocks of 16; w = (d * scale[j]) * q - (dmin * min[j]),
    q 2 bits, scale and min 4 bits each (_unpack_q2_k)."""
    return _sub_block_formula(raw, "Q2_K")


def q3_k_clear(raw: np.ndarray) -> np.ndarray:
    """Q3_K: 256 weights in 110 bytes, sixteen sub-blocks of 16; w = (d * scale[j]) * q, q in -4..3,
    scale 6 bits signed (_unpack_q3_k)."""
    return _sub_block_formula(raw, "Q3_K")


def q4_k_clear(raw: np.ndarray) -> np.ndarray:
    """Q4_K: 256 weights in 144 bytes, eight sub-blocks of 32; w = (d * scale[j]) * q - (dmin * min[j]),
    q 4 bits, scale and min 6 bits each (_unpack_q4_k)."""
    return _sub_block_formula(raw, "Q4_K")


def q5_k_clear(raw: np.ndarray) -> np.ndarray:
    """Q5_K: 256 weights in 176 bytes, eight sub-blocks of 32; w = (d * scale[j]) * q - (dmin * min[j]),
    q 5 bits, scale and min 6 bits each (_unpack_q5_k)."""
    return _sub_block_formula(raw, "Q5_K")


def q6_k_clear(raw: np.ndarray) -> np.ndarray:
    """Q6_K: 256 weights in 210 bytes, sixteen sub-blocks of 16; w = (d * scale[j]) * q, q in -32..31,
    scale 8 bits signed (_unpack_q6_k)."""
    return _sub_block_formula(raw, "Q6_K")


def iq4_nl_clear(raw: np.ndarray) -> np.ndarray:
    """IQ4_NL: a block of 32 weights in 18 bytes; w = d * KVALUES_IQ4[q], a non-uniform grid of 16 levels
    (_unpack_iq4_nl)."""
    return _sub_block_formula(raw, "IQ4_NL", KVALUES_IQ4)


def iq4_xs_clear(raw: np.ndarray) -> np.ndarray:
    """IQ4_XS: 256 weights in 136 bytes, eight sub-blocks of 32; w = (d * scale[j]) * KVALUES_IQ4[q],
    scale 6 bits signed (_unpack_iq4_xs)."""
    return _sub_block_formula(raw, "IQ4_XS", KVALUES_IQ4)


# -- fast K-quants ---------------------------------------------------------------------
#
# The same arithmetic as the clear versions, shaped like the fast 4- and 5-bit ones above: every
# step a long loop over a whole chunk (bit fields taken from the whole chunk's bytes at once and
# moved into weight order as 16-64 byte items; per-sub-block numbers repeated to one per weight).
# The packed 6-bit scales of Q4_K/Q5_K are unpacked four at a time as little-endian uint32 words,
# as ggml does. Same roundings, same order: (d * scale) rounded, times q, minus (dmin * min) rounded.


def _bit_planes(qh: np.ndarray, bits: int, to: int = 0, name: str = "planes") -> np.ndarray:
    """(k, m) contiguous bytes -> (k, m) bytes of `bits`-bit fields, placed at bit `to`: field s of byte
    32h + i (bits s*bits and up) lands in byte 32 * (8 // bits * h + s) + i (Q2_K/Q3_K quants, Q3_K hmask,
    Q5_K qh, Q6_K qh). Eight bytes at a time as uint64 words; each plane moved as 32-byte items."""
    k, m = qh.shape
    per = 8 // bits
    words = qh.view(_U64)
    moved = _scratch("planes_moved", words.shape, _U64)
    mask = _bytes_mask(((1 << bits) - 1) << to)
    planes = _scratch(name, (k, m // 32, per, 32), np.uint8)
    items = planes.view("V32")  # (k, m // 32, per, 1)
    for s in range(per):
        shift = to - s * bits  # move field s from bit s*bits to bit `to`
        if shift > 0:
            np.left_shift(words, _U64(shift), out=moved)
        else:
            np.right_shift(words, _U64(-shift), out=moved)
        moved &= mask
        items[:, :, s, 0] = moved.view(np.uint8).view("V32")
    return planes.reshape(k, m * per)


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


def _q2_k_step(r, o):
    k = r.shape[0]
    o[...] = _bit_planes(_columns(r, 16, 80), 2)
    words = r[:, 0:16].view("<u4")  # (k, 4): the 16 scale bytes, four at a time
    sm = np.empty((k, 8), "<u4")  # as bytes: 16 scales (low nibbles), then 16 minimums (high nibbles)
    for i in range(4):
        np.bitwise_and(words[:, i], np.uint32(0x0F0F0F0F), out=sm[:, i])
        np.right_shift(words[:, i], np.uint32(4), out=sm[:, 4 + i])
        sm[:, 4 + i] &= np.uint32(0x0F0F0F0F)
    both = sm.view(np.uint8).astype(np.float32)  # (k, 32)
    both *= np.repeat(np.stack([_f16_column(r, 80), _f16_column(r, 82)], axis=1), 16).reshape(k, 32)
    o *= _spread(both[:, :16], 16)
    o -= _spread(both[:, 16:], 16)


def _q3_k_scales_fast(r: np.ndarray, at: int) -> np.ndarray:
    """Q3_K: the sixteen 6-bit scales of every block (k, 16) as float32 -32..31, unpacked four at a time
    from three little-endian uint32 words as ggml does (kmask1 = 0x03030303, kmask2 = 0x0F0F0F0F)."""
    k = r.shape[0]
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


def _q3_k_step(r, o):
    k = r.shape[0]
    q = _bit_planes(_columns(r, 32, 96), 2, name="q")  # low 2 bits, 0..3
    offset = _bit_planes(_columns(r, 0, 32), 1, to=2)  # the hmask bit, as 4
    offset ^= np.uint8(4)  # 4 where the hmask bit is clear
    q -= offset  # -4..3 in two's complement, read through the int8 view
    o[...] = q.view(np.int8)
    step = _q3_k_scales_fast(r, 96)
    step *= np.repeat(_f16_column(r, 108), 16).reshape(k, 16)
    o *= _spread(step, 16)


def _q4_k_step(r, o):
    o[...] = _nibble_runs(r, 16, 4, 32)
    step, low = _scale_min_k4_fast(r, 4, _f16_column(r, 0), _f16_column(r, 2))
    o *= _spread(step, 32)
    o -= _spread(low, 32)


def _q5_k_step(r, o):
    q = _nibble_runs(r, 48, 4, 32)
    q |= _bit_planes(_columns(r, 16, 48), 1, to=4)  # bit 4
    o[...] = q
    step, low = _scale_min_k4_fast(r, 4, _f16_column(r, 0), _f16_column(r, 2))
    o *= _spread(step, 32)
    o -= _spread(low, 32)


def _q6_k_step(r, o):
    k = r.shape[0]
    q = _nibble_runs(r, 0, 2, 64)  # low 4 bits
    q |= _bit_planes(_columns(r, 128, 192), 2, to=4)  # bits 4 and 5
    q -= np.uint8(32)  # 0..63 -> -32..31
    o[...] = q.view(np.int8)
    step = _columns(r, 192, 208).view(np.int8).astype(np.float32)  # contiguous first: one long loop
    step *= np.repeat(_f16_column(r, 208), 16).reshape(k, 16)
    o *= _spread(step, 16)


_KVALUES_IQ4_F32 = KVALUES_IQ4.astype(np.float32)


def _iq4_nl_step(r, o):
    o[...] = _KVALUES_IQ4_F32[_nibble_runs(r, 2, 1, 16)]
    o *= _per_weight(_f16_column(r, 0))


def _iq4_xs_step(r, o):
    k = r.shape[0]
    o[...] = _KVALUES_IQ4_F32[_nibble_runs(r, 8, 8, 16)]
    step = unpack_iq4_xs_scales(r[:, 2:4], r[:, 4:8]).astype(np.float32)
    step *= np.repeat(_f16_column(r, 0), 8).reshape(k, 8)
    o *= _spread(step, 32)


def q2_k_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 84, out, _q2_k_step, QK_K, threads)


def q3_k_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 110, out, _q3_k_step, QK_K, threads)


def q4_k_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 144, out, _q4_k_step, QK_K, threads)


def q5_k_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 176, out, _q5_k_step, QK_K, threads)


def q6_k_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 210, out, _q6_k_step, QK_K, threads)


def iq4_nl_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 18, out, _iq4_nl_step, 32, threads)


def iq4_xs_fast(raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    return _fast_blocks(raw, 136, out, _iq4_xs_step, QK_K, threads)


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
    "Q2_K": (q2_k_clear, q2_k_fast),
    "Q3_K": (q3_k_clear, q3_k_fast),
    "Q4_K": (q4_k_clear, q4_k_fast),
    "Q5_K": (q5_k_clear, q5_k_fast),
    "Q6_K": (q6_k_clear, q6_k_fast),
    "IQ4_NL": (iq4_nl_clear, iq4_nl_fast),
    "IQ4_XS": (iq4_xs_clear, iq4_xs_fast),
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


def dequantize(raw: np.ndarray, type_name: str, shape, threads: int | None = None) -> np.ndarray:
    """Bytes of one tensor -> float32 array of numpy `shape`.

    Uses the fast hand dequantizer where there is one (on `threads` threads; None: default_threads());
    any other type goes to gguf.quants.dequantize (logged). A type neither implements raises
    NotImplementedError.
    """
    flat = _flat_bytes(raw, type_name, shape)
    if flat.size == 0:
        return np.zeros(tuple(shape), np.float32)
    with np.errstate(all="ignore"):  # inf/NaN scales are data, faithfully reproduced
        if type_name in HAND_DEQUANTIZERS:
            _, fast = HAND_DEQUANTIZERS[type_name]
            return fast(flat, threads=threads).reshape(tuple(shape))
        log.info("no hand dequantizer for %s: using gguf.quants.dequantize", type_name)
        try:
            return reference_dequantize(flat, type_name, shape)
        except NotImplementedError:
            raise NotImplementedError(
                f"no dequantizer for ggml type {type_name} (neither bytesup nor gguf.quants)"
            ) from None

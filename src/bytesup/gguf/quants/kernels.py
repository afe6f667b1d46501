"""The machinery of the fast dequantizers: whole-chunk numpy passes, kept buffers, a thread pool.

numpy pays a few nanoseconds each time it starts an inner loop, and a block is only 32 weights:
anything shaped (blocks, 16) or broadcast per block runs one short loop per block and the
overhead is most of the time. So every fast step is a few long loops over a whole chunk of blocks:

* bit fields are split eight bytes at a time, as uint64 words (numpy shifts uint8 one element at
  a time: x86 has no 8-bit shift);
* runs of nibbles (or of 2-bit and 1-bit fields) are moved into weight order as 16- to 64-byte
  items ('V16'...), giving the quants as one contiguous (blocks, weights) array;
* per-block numbers (d, m, d * scale[j]) are spread to one per weight (np.repeat), so multiply
  and add are plain element-wise passes rather than broadcasts.

The byte-sized temporaries are not fresh memory: the kernel's page fault on the first touch of
each 4 KiB costs about as much as this arithmetic, so they live in per-thread buffers kept
between calls (scratch). The output is a new np.empty array each call, as gguf-py's: the
allocator hands back the pages of the last one freed.
The arithmetic is the clear version's: fp16 -> fp32, multiply, then add.

One thread by default. Two threads were slower than one at every tensor size measured on the
2-core machine this project is built on (0.3x for 0.1 M weights, 0.7-1.0x for 8-34 M): np.repeat
and the item copies hold the GIL, and each chunk's passes stream through the L3 cache the cores
share, which one thread already keeps busy. $BYTESUP_THREADS asks for more (run_blocks).
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from math import prod

import numpy as np

CHUNK_BLOCKS = 8192  # blocks of 32 per step (1 MiB of float32 out); see chunk_blocks

U64 = np.uint64
LOW_NIBBLES = U64(0x0F0F0F0F0F0F0F0F)
SPREAD_BYTE = U64(0x0101010101010101)  # a byte times this: the byte in each of the eight lanes
LANE_BIT = U64(0x8040201008040201)  # lane i keeps bit i
LOW_SEVEN = U64(0x7F7F7F7F7F7F7F7F)
TOP_BITS = U64(0x8080808080808080)

_LOCAL = threading.local()


def scratch(name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """This thread's buffer `name`, as an array of `shape` and `dtype` (contents undefined); kept from
    call to call and grown when a bigger one is asked for."""
    dtype = np.dtype(dtype)
    n = prod(shape) * dtype.itemsize
    bufs = _LOCAL.__dict__.setdefault("bufs", {})
    buf = bufs.get(name)
    if buf is None or buf.size < n:
        buf = bufs[name] = np.empty(n, np.uint8)
    return buf[:n].view(dtype).reshape(shape)


def columns(r: np.ndarray, start: int, stop: int, name: str = "columns") -> np.ndarray:
    """Bytes start:stop of every block as a contiguous (k, stop - start) array (one item copy per block)."""
    n = stop - start
    out = scratch(name, (r.shape[0], n), np.uint8)
    out.view(f"V{n}")[:, 0] = r[:, start:stop].view(f"V{n}")[:, 0]
    return out


def bytes_mask(mask: int) -> np.uint64:
    """The one-byte mask repeated over the eight bytes of a uint64 word."""
    return U64(int.from_bytes(bytes([mask]) * 8, "little"))


def nibble_runs(r: np.ndarray, start: int, runs: int, run: int, name: str = "q") -> np.ndarray:
    """(k, type_size) blocks with `runs` runs of `run` bytes of nibbles at `start` -> (k, 2 * runs * run)
    uint8 0..15 in weight order: each run's low nibbles, then its high nibbles.

    The nibbles are split eight bytes at a time (uint64 words), then each run's two halves moved
    into place as `run`-byte items.
    """
    k = r.shape[0]
    words = columns(r, start, start + runs * run, "nibble_bytes").view(U64)
    half = scratch("nibble_half", words.shape, U64)
    q = scratch(name, (k, runs, 2, run), np.uint8)
    items = q.view(f"V{run}")  # (k, runs, 2, 1): [low plane, high plane] of each run
    np.bitwise_and(words, LOW_NIBBLES, out=half)
    items[:, :, 0, 0] = half.view(np.uint8).view(f"V{run}")
    np.right_shift(words, U64(4), out=half)
    half &= LOW_NIBBLES
    items[:, :, 1, 0] = half.view(np.uint8).view(f"V{run}")
    return q.reshape(k, -1)


def fifth_bits(r: np.ndarray, at: int, q: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1: OR bit 4 of weight j, from bit j of the little-endian uint32 at byte `at`, into the
    (k, 32) uint8 quants q (in place).

    Each byte of the uint32 becomes eight bytes, one bit each, as one uint64 word: copied into all
    eight lanes (times 0x0101...), lane i keeps bit i, adding 0x7F carries any set bit up to bit 7 of
    its lane, and bit 7 moved to bit 4 is the 16 to add.
    """
    k = r.shape[0]
    high = scratch("high", (k, 4), U64)  # word b: the bits of byte b of qh, one per byte
    np.multiply(columns(r, at, at + 4, "qh"), SPREAD_BYTE, out=high, dtype=U64)
    high &= LANE_BIT
    high += LOW_SEVEN
    high &= TOP_BITS
    high >>= U64(3)
    q.reshape(k, 4, 8).view(U64)[..., 0] |= high
    return q


def bit_planes(qh: np.ndarray, bits: int, to: int = 0, name: str = "planes") -> np.ndarray:
    """(k, m) contiguous bytes -> (k, m) bytes of `bits`-bit fields, placed at bit `to`: field s of byte
    32h + i (bits s*bits and up) lands in byte 32 * (8 // bits * h + s) + i (Q2_K/Q3_K quants, Q3_K hmask,
    Q5_K qh, Q6_K qh). Eight bytes at a time as uint64 words; each plane moved as 32-byte items."""
    k, m = qh.shape
    per = 8 // bits
    words = qh.view(U64)
    moved = scratch("planes_moved", words.shape, U64)
    mask = bytes_mask(((1 << bits) - 1) << to)
    planes = scratch(name, (k, m // 32, per, 32), np.uint8)
    items = planes.view("V32")  # (k, m // 32, per, 1)
    for s in range(per):
        shift = to - s * bits  # move field s from bit s*bits to bit `to`
        if shift > 0:
            np.left_shift(words, U64(shift), out=moved)
        else:
            np.right_shift(words, U64(-shift), out=moved)
        moved &= mask
        items[:, :, s, 0] = moved.view(np.uint8).view("V32")
    return planes.reshape(k, m * per)


def spread(values: np.ndarray, times: int) -> np.ndarray:
    """(k, n) float32 numbers -> (k, n * times), each repeated `times` times in a row.

    np.repeat, a new array: faster than a broadcast copy into a kept buffer (it copies whole
    items rather than running one short loop per number), and its memory comes back from the
    allocator's free list rather than fresh from the kernel.
    """
    return np.repeat(values.reshape(-1), times).reshape(values.shape[0], -1)


# fp16 bit pattern -> float32, for all 65536 patterns. Built by numpy's own conversion, so a table
# lookup gives the same bits as .astype(np.float32), NaN payloads included, and a little faster.
F16_TO_F32 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def f16_column(r: np.ndarray, at: int) -> np.ndarray:
    """The fp16 number at byte `at` of every block, as float32 (k,)."""
    return F16_TO_F32.take(r[:, at : at + 2].view("<u2")[:, 0])


def per_weight(values: np.ndarray, block_size: int = 32) -> np.ndarray:
    """(k,) per-block numbers -> (k, block_size), each repeated over its block's weights."""
    return spread(values.reshape(-1, 1), block_size)


# -- threads and chunks -------------------------------------------------------------------


THREADS_ENV = "BYTESUP_THREADS"


def default_threads() -> int:
    """Threads for a fast dequantizer given threads=None: $BYTESUP_THREADS when it is a positive
    integer, else 1 (the module's docstring says why; a job runner's $OMP_NUM_THREADS is for BLAS)."""
    value = os.environ.get(THREADS_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else 1


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool per size and process (a forked child does not inherit its parent's threads)."""
    key = (os.getpid(), workers)
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ThreadPoolExecutor(workers, thread_name_prefix="bytesup-dequant")
        return _POOLS[key]


def chunk_blocks(block_size: int) -> int:
    """Blocks per step: CHUNK_BLOCKS blocks of 32, or CHUNK_BLOCKS // 4 super-blocks of 256 (twice the
    weights: a K-quant step makes about twice as many numpy calls, each with its fixed cost)."""
    return max(1, CHUNK_BLOCKS * 32 // block_size if block_size <= 32 else CHUNK_BLOCKS // 4)


Step = Callable[[np.ndarray, np.ndarray], None]


def run_blocks(
    raw: np.ndarray, type_size: int, block_size: int, step: Step, out: np.ndarray | None, threads: int | None
) -> np.ndarray:
    """Run step(block_bytes_chunk, out_chunk) over the tensor, chunk_blocks(block_size) blocks at a time.

    With threads > 1 (None: default_threads()) the chunks go to a pool of that many threads, each
    writing its own rows of the one output array; numpy releases the GIL inside each whole-chunk
    pass, so the chunks run side by side.
    """
    rows = np.ascontiguousarray(raw, np.uint8).reshape(-1, type_size)
    n = rows.shape[0]
    out = np.empty(n * block_size, np.float32) if out is None else out
    o2 = out.reshape(n, block_size)
    workers = default_threads() if threads is None else max(1, int(threads))
    chunks = -(-n // chunk_blocks(block_size))
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

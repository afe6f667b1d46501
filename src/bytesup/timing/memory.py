"""This machine's memory limits, measured in the job that needs them: STREAM, and kernels that only read.

A decode step reads every weight once and writes next to nothing, so what paces it is how fast the
machine *reads* memory. STREAM copy (c = a) counts a read and a write per element; reading alone
often goes faster (no write traffic to share the bus with), so copy can sit below what a decoder
may reach, and a decoder "faster than copy" would be no surprise. The read ceiling is the best of:

    copy   STREAM's c = a on float64, 16 bytes counted per element (read 8, write 8)
    sum    a plain threaded read: each worker sums its own slice of one float32 buffer; 4 bytes per
           element, read once, nothing written
    dot    x . x over the same buffer through BLAS (sdot, the job's BLAS threads): each element read
           once, 4 bytes, as a decoder's products read their weights
    gemv   y = W x through BLAS in float32 on the job's BLAS threads, the timed calls rotating
           between two matrices; bytes = W + x + y (each read or written once)
    gemv_columns  the same product on the same buffer laid out column-major (the decoder's long-runs
           layout, bytesup.model.weights.LAYOUTS): BLAS adds up whole contiguous columns. On some
           machines it reads much faster than the row-major gemv (44 against 24 GB/s on a Zen 4 VM),
           and faster than copy and sum: the ceiling has to include it

Every buffer is larger than the last-level cache (4 x at least), so no call finds its data left in
cache by the one before. Each kernel is a row with its median GB/s and spread (bytesup.timing.measure);
`read_ceiling()` picks the best median and says which kernel set it; `read_ceiling_across()` does the
same over kernels measured once per turn of a longer measurement, each at its median across the
turns. Published decoders are judged the same way: llama.cpp against the measured read bandwidth,
gpt-fast against an empirical peak.
The GPU job measures the same kernels on the device (bytesup.timing.gpu) and reads them with the
same `read_ceiling()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from bytesup.timing.machine import MiB
from bytesup.timing.measure import TimingError, summarize, time_rotation

STREAM_MIN_BYTES = 256 * MiB

# STREAM's counting: bytes the kernel must move per element, float64, write-allocate not counted.
STREAM_BYTES_PER_ELEMENT = {"copy": 16, "triad": 24}
TRIAD_SCALAR = 3.0
_TRIAD_CHUNK = 32 * 1024  # elements; q*c for one chunk stays in L2, so memory sees one read of c

READ_KERNELS = ("copy", "sum", "dot", "gemv", "gemv_columns")  # the kernels whose best median is the read ceiling
GEMV_COLUMNS = 4096  # the read kernel's matrices: rows x 4096 float32 (16 KiB a row, as a 4096-wide model's)


def stream_bytes_for(llc: int, cfg_value: int | None) -> int:
    """Array size: the configured bytes, else 4 x the last-level cache, at least 256 MiB."""
    return int(cfg_value) if cfg_value else max(4 * llc, STREAM_MIN_BYTES)


def kernel_row(kernel: str, array_bytes: int, moved: int, per_sample: int, stats: dict, **extra) -> dict:
    """One measured kernel: the bytes it moves per call, its timing and GB/s = bytes / median (1 GB = 1e9)."""
    return {
        "kernel": kernel,
        "array_bytes": array_bytes,
        "bytes_counted": moved,
        **extra,
        "calls_per_sample": per_sample,
        **stats,
        "gbps": moved / stats["median_s"] / 1e9,
        "best_gbps": moved / stats["min_s"] / 1e9,
    }


def _slices(n: int, threads: int) -> list[slice]:
    edges = [n * i // threads for i in range(threads + 1)]
    return [slice(edges[i], edges[i + 1]) for i in range(threads)]


def stream(
    array_bytes: int, threads: int, repeats: int, warmup: int, noisy_spread: float, min_sample_s: float = 0.0
) -> list[dict]:
    """STREAM copy and triad with `threads` workers, each on its own slice of the arrays.

    numpy releases the GIL in these loops, so Python threads run them in parallel the way
    STREAM's OpenMP loop does. Results are checked afterwards, as STREAM does.
    """
    n = max(array_bytes // 8, threads * 8)
    a = np.full(n, 1.0)
    b = np.full(n, 2.0)
    c = np.zeros(n)
    slices = _slices(n, threads)
    scratch = [np.empty(_TRIAD_CHUNK) for _ in range(threads)]

    def copy_part(i: int) -> None:
        np.copyto(c[slices[i]], a[slices[i]])

    def triad_part(i: int) -> None:
        s, tmp = slices[i], scratch[i]
        for j in range(s.start, s.stop, _TRIAD_CHUNK):
            k = min(j + _TRIAD_CHUNK, s.stop)
            t = tmp[: k - j]
            np.multiply(c[j:k], TRIAD_SCALAR, out=t)
            np.add(b[j:k], t, out=a[j:k])

    rows = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for kernel, part in (("copy", copy_part), ("triad", triad_part)):

            def once(part=part):
                list(pool.map(part, range(threads)))

            times, per_sample = time_rotation([once], repeats, warmup, min_sample_s)
            moved = STREAM_BYTES_PER_ELEMENT[kernel] * n
            rows.append(kernel_row(kernel, 8 * n, moved, per_sample, summarize(times, noisy_spread), threads=threads))
    # STREAM's check: c = a = 1 after copy; a = b + q*c = 2 + 3*1 after triad.
    probe = slice(None, None, max(n // 4096, 1))
    if not (np.all(c[probe] == 1.0) and np.all(a[probe] == 2.0 + TRIAD_SCALAR)):
        raise TimingError("STREAM check failed: the arrays do not hold the expected values")
    return rows


def gemv_shape(buffer_elements: int, cols: int = GEMV_COLUMNS) -> tuple[int, int]:
    """(rows, cols) of each of the two matrices a buffer of float32 elements is cut into."""
    cols = max(1, min(cols, buffer_elements // 2))
    return max(1, buffer_elements // 2 // cols), cols


def read_kernels(
    buffer_bytes: int, threads: int, repeats: int, warmup: int, noisy_spread: float, min_sample_s: float = 0.0
) -> list[dict]:
    """The read-only kernels over one float32 buffer of `buffer_bytes`: 'sum', 'dot', 'gemv' and
    'gemv_columns' rows.

    sum: `threads` workers, each np.add.reduce over its own slice (numpy releases the GIL), the
    whole buffer per call. dot: np.dot of the buffer with itself, BLAS on the threads the job set
    (threadpoolctl). gemv: the buffer is two matrices (gemv_shape) and the timed calls alternate
    between them, each y = W x by BLAS; gemv_columns: the same, each matrix the column-major view of
    its half of the buffer. All are checked: the buffer holds ones, so the sum and the dot are its
    length and every y is the width.
    """
    n = max(buffer_bytes // 4, 2 * threads)
    buf = np.ones(n, np.float32)
    slices = _slices(n, threads)
    sums = [0.0] * threads
    dots = [0.0]

    def sum_part(i: int) -> None:
        sums[i] = float(np.add.reduce(buf[slices[i]]))

    rows_w, cols = gemv_shape(n)
    mats = [buf[: rows_w * cols].reshape(rows_w, cols), buf[rows_w * cols : 2 * rows_w * cols].reshape(rows_w, cols)]
    x = np.ones(cols, np.float32)
    ys = [np.zeros(rows_w, np.float32) for _ in mats]
    # gemv_columns: each half as a (cols, rows) row-major array, transposed: a (rows, cols) matrix by columns
    layouts = {"gemv": mats, "gemv_columns": [m.reshape(cols, rows_w).T for m in mats]}

    out = []
    with ThreadPoolExecutor(max_workers=threads) as pool:

        def sum_once():
            list(pool.map(sum_part, range(threads)))

        times, per_sample = time_rotation([sum_once], repeats, warmup, min_sample_s)
        out.append(kernel_row("sum", 4 * n, 4 * n, per_sample, summarize(times, noisy_spread), threads=threads))

    def dot_once():
        dots[0] = float(np.dot(buf, buf))

    times, per_sample = time_rotation([dot_once], repeats, warmup, min_sample_s)
    out.append(kernel_row("dot", 4 * n, 4 * n, per_sample, summarize(times, noisy_spread), threads=threads))
    moved = 4 * (rows_w * cols + cols + rows_w)
    gemv_ok = True
    for kernel, matrices in layouts.items():
        for y in ys:
            y[:] = 0  # each layout's products checked on their own
        calls: list[Callable[[], object]] = [lambda w=w, y=y: np.matmul(w, x, out=y) for w, y in zip(matrices, ys)]
        times, per_sample = time_rotation(calls, repeats, warmup, min_sample_s)
        stats = summarize(times, noisy_spread)
        out.append(kernel_row(kernel, 4 * rows_w * cols, moved, per_sample, stats, threads=threads))
        gemv_ok = gemv_ok and all(np.all(y == cols) for y in ys)
    if abs(sum(sums) - n) > 1e-3 * n or abs(dots[0] - n) > 1e-3 * n or not gemv_ok:
        raise TimingError("read-kernel check failed: the sum, the dot or the gemv is not what the buffer holds")
    return out


def read_ceiling(rows: Sequence[dict]) -> dict:
    """The best median GB/s among the read kernels (READ_KERNELS) measured in `rows`, which kernel
    set it, and its spread; every kernel's own figure beside it. When a kernel was measured more
    than once, its best run counts (read_ceiling_across takes the median across turns instead)."""
    best: dict[str, dict] = {}
    for r in rows:
        if r["kernel"] in READ_KERNELS and (r["kernel"] not in best or r["gbps"] > best[r["kernel"]]["gbps"]):
            best[r["kernel"]] = r
    if not best:
        raise TimingError("no read kernel was measured: the read ceiling needs copy, sum or gemv")
    top = max(best.values(), key=lambda r: r["gbps"])
    return {
        "gbps": top["gbps"],
        "kernel": top["kernel"],
        "rel_iqr": top["rel_iqr"],
        "noisy": top["noisy"],
        "by_kernel_gbps": {k: best[k]["gbps"] for k in READ_KERNELS if k in best},
        "by_kernel_rel_iqr": {k: best[k]["rel_iqr"] for k in READ_KERNELS if k in best},
    }


def read_ceiling_across(turns: Sequence[Sequence[dict]], noisy_spread: float) -> dict:
    """The read ceiling of a measurement that spans minutes, measured in turns with it: each kernel
    once per turn (`turns`: one list of rows per turn), its median GB/s across the turns, and the best
    of those medians (read_ceiling). This machine's memory speed drifts within a job: one decode job
    read copy at 33.0 GB/s and gemv at 30.5 just before its decode, 53.1 and 63.2 just after, so a
    ceiling taken at one moment (or the better of two) says more about that moment than the decode's.
    rel_iqr is the best kernel's spread across the turns; `by_turn_gbps` keeps every turn's figure."""
    by_kernel: dict[str, list[float]] = {}
    flagged: set[str] = set()
    for rows in turns:
        for r in rows:
            if r["kernel"] in READ_KERNELS:
                by_kernel.setdefault(r["kernel"], []).append(r["gbps"])
                flagged |= {r["kernel"]} if r["noisy"] else set()
    medians = []
    for kernel, values in by_kernel.items():
        s = summarize(values, noisy_spread)  # the median and spread of the turns' GB/s
        noisy = s["noisy"] or kernel in flagged
        medians.append({"kernel": kernel, "gbps": s["median_s"], "rel_iqr": s["rel_iqr"], "noisy": noisy})
    ceiling = read_ceiling(medians)
    ceiling["turns"] = len(turns)
    ceiling["by_turn_gbps"] = {k: by_kernel[k] for k in READ_KERNELS if k in by_kernel}
    return ceiling


def memory_rows(
    array_bytes: int, threads: int, repeats: int, warmup: int, noisy_spread: float, min_sample_s: float = 0.0
) -> list[dict]:
    """STREAM (copy, triad) and the read kernels (sum, gemv), one after the other: at most 3 arrays of
    `array_bytes` are held at once (STREAM's), the read kernels' buffer being one of that size."""
    rows = stream(array_bytes, threads, repeats, warmup, noisy_spread, min_sample_s)
    return rows + read_kernels(array_bytes, threads, repeats, warmup, noisy_spread, min_sample_s)

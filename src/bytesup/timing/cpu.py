"""CPU timing: is decode memory-bound on this machine?

The course's claim (lesson 3, "matvec versus matmul"): with one token every weight is
read once for 2 FLOPs, so a matvec is paced by how fast memory delivers the weights,
not by arithmetic. Batching N tokens does N times the work per weight read, so time
grows far slower than N until the arithmetic units are busy.

One run of `run_cpu()` measures, in one process and against this machine's own limits:

1. memory bandwidth, STREAM-style: copy (c = a) and triad (a = b + q*c) on float64
   arrays well beyond the last-level cache, bytes counted as STREAM counts them
   (copy 16 and triad 24 bytes per element; write-allocate traffic is not counted);
2. the matvec vs matmul sweep, N = 1, 2, 4 ... 256, over the model's real FFN weights
   (ffn_gate and ffn_up of consecutive blocks, each kind stacked into one float32
   matrix larger than the last-level cache); the timed calls rotate between the two
   matrices, so a single-token number is a cold read from memory, never a cache hit;
3. dequantization throughput: the package's hand dequantizers (on the job's threads)
   against gguf.quants.dequantize on the same tensors, interleaved, re-checked bit for
   bit; one row per type the model holds, with the speed-up asked (5x for Q8_0, 3x for
   the other quantized types) and whether it was met.

Every timed figure is the median of `repeats` samples after `warmup` discarded ones,
with its spread (relative interquartile range) and a `noisy` flag when that spread is
wider than `noisy_spread`. Tests check the counting, never the speed.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from bytesup.errors import BytesupError
from bytesup.gguf.file import GGUFFile
from bytesup.timing import dequant_bench as deq
from bytesup.timing.machine import blas_info, cpu_model, memory_bytes
from bytesup.timing.measure import summarize, target

log = logging.getLogger(__name__)

MiB = 1 << 20

# What the issue asks of this machine's numbers. They are claims the report checks, not
# settings: a miss is reported as a miss. The dequantizers' are in bytesup.timing.dequant_bench.
MATVEC_FRACTION_OF_COPY_TARGET = 0.80

DEFAULTS: dict[str, Any] = {
    "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256],
    "repeats": 7,
    "warmup": 2,
    "min_weight_bytes": None,  # None: 2 x last-level cache per stacked matrix
    "stream_bytes": None,  # None: max(4 x last-level cache, 256 MiB) per array
    "min_sample_ms": 1.0,
    "noisy_spread": 0.10,
    "dequant_types": None,  # None: every type the model holds, in file order
    "dequant_bytes": deq.DEQUANT_BYTES,
    "decode_tokens": 32,  # whole-model decode steps timed (bytesup.timing.decode)
    "prefill_sizes": [1, 8, 32, 128, 256],  # prompt lengths N of the whole-model prefill
    "seed": 0,
}

STREAM_MIN_BYTES = 256 * MiB
BUSY_OTHER_FRACTION = 0.10  # above this share of the CPUs used by others, the run is marked machine_shared
ASSUMED_LLC_BYTES = 32 * MiB
ENV_FACTS = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
)


class TimingError(BytesupError, RuntimeError):
    """An expected failure of a timing job; the message is one line for the user."""


def settings(cfg: dict | None) -> dict:
    """The timing settings with defaults filled in (cfg is config['timing'] plus 'seed')."""
    out = dict(DEFAULTS)
    out.update(cfg or {})
    unknown = sorted(set(out) - set(DEFAULTS))
    if unknown:
        raise TimingError(f"timing: unknown key(s) {', '.join(unknown)}; expected {', '.join(DEFAULTS)}")
    sizes = list(out["batch_sizes"])
    if 1 not in sizes or any(int(n) < 1 for n in sizes):
        raise TimingError(f"timing.batch_sizes: {sizes} must be positive and include 1 (the matvec)")
    out["batch_sizes"] = sorted({int(n) for n in sizes})
    if int(out["repeats"]) < 3:
        raise TimingError(f"timing.repeats: {out['repeats']} is too few for a median and a spread; use 3 or more")
    return out


# --- the machine ------------------------------------------------------------------------


def llc_bytes() -> tuple[int, str]:
    """Size of the last-level cache and where it was read (sysfs, sysconf or assumed)."""
    best = (0, 0)
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        factor = {"K": 1024, "M": MiB, "G": 1 << 30}.get(size[-1:], 1)
        value = int(size.rstrip("KMG")) * factor
        best = max(best, (level, value))
    if best[1]:
        return best[1], f"sysfs L{best[0]}"
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            value = os.sysconf(name)
        except (ValueError, OSError):
            continue
        if value and value > 0:
            return int(value), f"sysconf {name}"
    return ASSUMED_LLC_BYTES, "assumed (not readable on this machine)"


def machine_facts(threads: int) -> dict:
    size, source = llc_bytes()
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpus_usable": affinity,
        "threads": threads,
        "llc_bytes": size,
        "llc_source": source,
        "memory_bytes": memory_bytes(),
        "blas": blas_info(),
        "environment": {name: os.environ[name] for name in ENV_FACTS if name in os.environ},
    }


class CpuShare:
    """How much of the machine other processes used while we measured.

    Load average lags by a minute; this does not. From /proc/stat (every CPU's busy
    ticks) minus this process's own CPU time, over the elapsed wall time x CPUs. A
    figure near 0 means the machine was ours; 0.3 means a third of it went elsewhere.
    """

    def __init__(self):
        self._start = self._read()

    @staticmethod
    def _read():
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        busy = sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait (guest is inside user)
        own = os.times()
        return time.monotonic(), busy / os.sysconf("SC_CLK_TCK"), own.user + own.system

    def other_fraction(self) -> float | None:
        return other_cpu_fraction(self._start, self._read(), os.cpu_count() or 1)


def other_cpu_fraction(start, end, cpus: int) -> float | None:
    """(wall s, machine busy CPU-s, own CPU-s) at start and end -> others' share of the CPUs."""
    if start is None or end is None or end[0] <= start[0]:
        return None
    others = (end[1] - start[1]) - (end[2] - start[2])
    return max(0.0, others / ((end[0] - start[0]) * cpus))


# --- timing and statistics --------------------------------------------------------------


class WallTimer:
    """Host wall clock. `sync` waits for outstanding device work (a no-op for numpy)."""

    def __init__(self, sync: Callable[[], None] | None = None):
        self._sync = sync or (lambda: None)
        self._t0 = 0.0

    def start(self) -> None:
        self._sync()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        self._sync()
        return time.perf_counter() - self._t0


def time_rotation(
    calls: Sequence[Callable[[], Any]], repeats: int, warmup: int, min_sample_s: float = 0.0, timer=None
) -> tuple[list[float], int]:
    """Per-call seconds of `repeats` samples, calling `calls` round-robin.

    Each call works on its own buffer, so rotating among them means no call finds its
    data left in cache by the one before. A sample runs enough calls to last at least
    `min_sample_s` (needed on a GPU, where one call can take microseconds), judged from
    one call timed after `warmup` untimed passes over all the calls (at least one pass).
    Returns (times, calls_per_sample).
    """
    timer = timer or WallTimer()
    turn = 0

    def run(count: int) -> float:
        nonlocal turn
        timer.start()
        for _ in range(count):
            calls[turn % len(calls)]()
            turn += 1
        return timer.stop()

    for _ in range(max(warmup, 1)):  # at least one pass: first-touch page faults, lazy init
        run(len(calls))
    one = run(1)
    per_sample = 1 if one <= 0 or one >= min_sample_s else min(math.ceil(min_sample_s / one), 100_000)
    return [run(per_sample) / per_sample for _ in range(repeats)], per_sample


# --- 1. STREAM --------------------------------------------------------------------------

# STREAM's counting: bytes the kernel must move per element, float64, write-allocate not counted.
STREAM_BYTES_PER_ELEMENT = {"copy": 16, "triad": 24}
TRIAD_SCALAR = 3.0
_TRIAD_CHUNK = 32 * 1024  # elements; q*c for one chunk stays in L2, so memory sees one read of c


def stream_bytes_for(llc: int, cfg_value: int | None) -> int:
    """Array size: the configured bytes, else 4 x the last-level cache, at least 256 MiB."""
    return int(cfg_value) if cfg_value else max(4 * llc, STREAM_MIN_BYTES)


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
    edges = [n * i // threads for i in range(threads + 1)]
    slices = [slice(edges[i], edges[i + 1]) for i in range(threads)]
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
            stats = summarize(times, noisy_spread)
            moved = STREAM_BYTES_PER_ELEMENT[kernel] * n
            rows.append(
                {
                    "kernel": kernel,
                    "array_bytes": 8 * n,
                    "bytes_counted": moved,
                    "threads": threads,
                    "calls_per_sample": per_sample,
                    **stats,
                    "gbps": moved / stats["median_s"] / 1e9,
                    "best_gbps": moved / stats["min_s"] / 1e9,
                }
            )
    # STREAM's check: c = a = 1 after copy; a = b + q*c = 2 + 3*1 after triad.
    probe = slice(None, None, max(n // 4096, 1))
    if not (np.all(c[probe] == 1.0) and np.all(a[probe] == 2.0 + TRIAD_SCALAR)):
        raise TimingError("STREAM check failed: the arrays do not hold the expected values")
    return rows


# --- 2. matvec vs matmul ----------------------------------------------------------------

FFN_NAME = re.compile(r"^blk\.(\d+)\.ffn_(gate|up)\.weight$")


@dataclass
class WeightBuffers:
    """Real weights for the sweep: one float32 matrix per FFN kind, blocks stacked by rows."""

    matrices: list[np.ndarray]
    names: list[str]  # e.g. "ffn_gate of blk.0-29"
    tensors: list[str]  # every tensor used, in stacking order
    source_types: list[str]

    def describe(self, llc: int) -> dict:
        total = sum(m.nbytes for m in self.matrices)
        return {
            "what": "the model's ffn_gate and ffn_up matrices, each kind stacked by rows over consecutive "
            "blocks into one float32 matrix; timed calls alternate between the two",
            "matrices": [
                {"name": n, "shape": list(m.shape), "bytes": m.nbytes} for n, m in zip(self.names, self.matrices)
            ],
            "tensors": self.tensors,
            "source_types": sorted(set(self.source_types)),
            "dtype": "float32",
            "total_bytes": total,
            "bytes_per_matrix_over_llc": min(m.nbytes for m in self.matrices) / llc,
            "cold": bool(min(m.nbytes for m in self.matrices) > llc),
        }


def ffn_weight_buffers(model, min_bytes: int) -> WeightBuffers:
    """Stack ffn_gate (and ffn_up) of blocks 0, 1, ... until each matrix holds >= min_bytes.

    All blocks are used when the model is smaller than that; `describe()` then says
    whether each matrix still exceeds the cache. Dequantized with the package's reader.
    """
    found: dict[str, dict[int, Any]] = {"gate": {}, "up": {}}
    for info in model.tensors:
        m = FFN_NAME.match(info.name)
        if m and len(info.shape) == 2:
            found[m.group(2)][int(m.group(1))] = info
    blocks = sorted(set(found["gate"]) & set(found["up"]))
    if not blocks:
        raise TimingError(
            f"{getattr(model, 'path', 'model')}: no blk.N.ffn_gate.weight / blk.N.ffn_up.weight pair; "
            "the timing sweep needs a llama-style FFN"
        )
    shape = tuple(found["gate"][blocks[0]].shape)
    blocks = [b for b in blocks if tuple(found["gate"][b].shape) == shape == tuple(found["up"][b].shape)]
    per_block = shape[0] * shape[1] * 4
    count = min(len(blocks), max(1, math.ceil(min_bytes / per_block)))
    used = blocks[:count]
    matrices, names, tensors, types = [], [], [], []
    for kind in ("gate", "up"):
        parts = []
        for b in used:
            info = found[kind][b]
            parts.append(np.asarray(model.load(info.name), dtype=np.float32).reshape(shape))
            tensors.append(info.name)
            types.append(info.type_name)
        # one block: its matrix as it is (a concatenated copy would hold it twice for a moment)
        matrices.append(parts[0] if len(parts) == 1 else np.ascontiguousarray(np.concatenate(parts, axis=0)))
        del parts
        names.append(f"ffn_{kind} of blk.{used[0]}-{used[-1]}" if count > 1 else f"ffn_{kind} of blk.{used[0]}")
    return WeightBuffers(matrices, names, tensors, types)


def sweep_counts(rows: int, cols: int, n: int, itemsize: int) -> tuple[int, int]:
    """Bytes and FLOPs of Y[rows, n] = W[rows, cols] @ X[cols, n].

    Bytes: every weight once, plus X read and Y written once (the least any kernel
    must move). FLOPs: one multiply and one add per weight per token, 2 * rows * cols * n.
    """
    moved = (rows * cols + cols * n + rows * n) * itemsize
    return moved, 2 * rows * cols * n


def sweep_row(
    op: str, n: int, rows: int, cols: int, itemsize: int, stats: dict, per_sample: int, extra: dict | None = None
) -> dict:
    moved, flops = sweep_counts(rows, cols, n, itemsize)
    med = stats["median_s"]
    return {
        "op": op,
        "n": n,
        **(extra or {}),
        "rows": rows,
        "cols": cols,
        "itemsize": itemsize,
        "weight_bytes": rows * cols * itemsize,
        "bytes": moved,
        "flops": flops,
        "calls_per_sample": per_sample,
        **stats,
        "gbps": moved / med / 1e9,
        "gflops": flops / med / 1e9,
    }


def add_time_ratios(rows: list[dict]) -> list[dict]:
    """time(N) / time(N=1) for each row, from the table itself (grouped by any 'dtype')."""
    base = {r.get("dtype"): r["median_s"] for r in rows if r["op"] == "matvec"}
    for r in rows:
        one = base.get(r.get("dtype"))
        r["time_over_n1"] = r["median_s"] / one if one else None
        r["work_over_n1"] = r["n"]
    return rows


def ratio_256_over_1(rows: list[dict], dtype: str = "fp32") -> float | None:
    """time(N=256) / time(N=1) read from the sweep table; None when either was not swept."""
    times = {r["n"]: r["median_s"] for r in rows if r.get("dtype") == dtype and r["op"] in ("matvec", "matmul")}
    if 1 in times and 256 in times and times[1] > 0:
        return times[256] / times[1]
    return None


def matvec_sweep(
    matrices: Sequence[np.ndarray],
    batch_sizes: Iterable[int],
    repeats: int,
    warmup: int,
    seed: int,
    noisy_spread: float,
    min_sample_s: float = 0.0,
) -> list[dict]:
    """Time Y = W @ X for each N, alternating between the weight matrices.

    N = 1 is a true matvec (x is a vector: BLAS gemv); N >= 2 is a matmul (gemm). Inputs
    are seeded random numbers - only the timing matters - and outputs are preallocated,
    so no call pays for fresh memory.
    """
    rng = np.random.default_rng(seed)
    rows, cols = matrices[0].shape
    out = []
    for n in batch_sizes:
        shape_x = (cols,) if n == 1 else (cols, n)
        xs = [rng.standard_normal(shape_x, dtype=np.float32) for _ in matrices]
        ys = [np.empty((rows,) if n == 1 else (rows, n), dtype=np.float32) for _ in matrices]
        calls = [lambda w=w, x=x, y=y: np.matmul(w, x, out=y) for w, x, y in zip(matrices, xs, ys)]
        times, per_sample = time_rotation(calls, repeats, warmup, min_sample_s)
        stats = summarize(times, noisy_spread)
        out.append(sweep_row("matvec" if n == 1 else "matmul", n, rows, cols, 4, stats, per_sample, {"dtype": "fp32"}))
        log.info("N=%d: %.3f ms, %.1f GB/s", n, stats["median_s"] * 1e3, out[-1]["gbps"])
    return add_time_ratios(out)


def warm_matvec(
    matrix: np.ndarray, llc: int, repeats: int, warmup: int, seed: int, noisy_spread: float, min_sample_s: float
) -> dict:
    """The contrast: a matvec on rows that fit in a quarter of the cache, same rows every call."""
    rows = max(1, min(matrix.shape[0], (llc // 4) // (matrix.shape[1] * 4)))
    w = np.ascontiguousarray(matrix[:rows])
    x = np.random.default_rng(seed).standard_normal(w.shape[1], dtype=np.float32)
    y = np.empty(rows, dtype=np.float32)
    times, per_sample = time_rotation([lambda: np.matmul(w, x, out=y)], repeats, warmup, min_sample_s)
    return sweep_row(
        "matvec_warm", 1, rows, w.shape[1], 4, summarize(times, noisy_spread), per_sample, {"dtype": "fp32"}
    )


# --- targets and the summary ------------------------------------------------------------


def fraction_target(name: str, matvec: dict, copy: dict, goal: float = MATVEC_FRACTION_OF_COPY_TARGET) -> dict:
    fraction = matvec["gbps"] / copy["gbps"]
    return target(
        name, goal, fraction, "fraction of copy GB/s", bool(fraction >= goal), matvec["noisy"] or copy["noisy"]
    )


def open_model(path: str | Path):

    return GGUFFile(path)


def run_cpu(gguf_path: str | Path, cfg: dict | None = None, threads: int = 1) -> dict:
    """The CPU timing job. Returns {'summary': dict, 'sweep': rows, 'stream': rows, 'dequant': rows}."""

    cfg = settings(cfg)
    threads = max(int(threads), 1)
    load_before = list(os.getloadavg())
    share = CpuShare()
    with open_model(gguf_path) as model, threadpool_limits(limits=threads, user_api="blas"):
        facts = machine_facts(threads)
        llc = facts["llc_bytes"]
        min_sample_s = float(cfg["min_sample_ms"]) / 1e3
        reps, warm, noisy = int(cfg["repeats"]), int(cfg["warmup"]), float(cfg["noisy_spread"])

        array_bytes = stream_bytes_for(llc, cfg["stream_bytes"])
        log.info("STREAM: 3 arrays of %d MiB, %d threads", array_bytes // MiB, threads)
        stream_rows = stream(array_bytes, threads, reps, warm, noisy, min_sample_s)

        min_weight = int(cfg["min_weight_bytes"] or 2 * llc)
        weights = ffn_weight_buffers(model, min_weight)
        log.info("weights: %s", ", ".join(f"{n} {m.shape}" for n, m in zip(weights.names, weights.matrices)))
        sweep_rows = matvec_sweep(
            weights.matrices, cfg["batch_sizes"], reps, warm, int(cfg["seed"]), noisy, min_sample_s
        )
        warm_row = warm_matvec(weights.matrices[0], llc, reps, warm, int(cfg["seed"]), noisy, min_sample_s)

        dequant_rows = deq.dequant_bench(
            model, cfg["dequant_types"], int(cfg["dequant_bytes"]), reps, warm, noisy, threads=threads
        )
    load_after = list(os.getloadavg())

    summary = build_summary(facts, cfg, stream_rows, sweep_rows, warm_row, dequant_rows, weights.describe(llc))
    summary["load_average_before"] = load_before
    summary["load_average_after"] = load_after
    summary["other_processes_cpu_fraction"] = other = share.other_fraction()
    summary["machine_shared"] = bool(other is not None and other > BUSY_OTHER_FRACTION)
    if summary["machine_shared"]:
        log.warning(
            "other processes used %.0f%% of the CPUs during the run: figures are not this machine's "
            "limits; rerun on an idle machine",
            100 * other,
        )
    # The warm contrast stays in summary.json: sweep.csv holds exactly one row per N.
    return {"summary": summary, "sweep": sweep_rows, "stream": stream_rows, "dequant": dequant_rows}


def build_summary(
    facts: dict,
    cfg: dict,
    stream_rows: list[dict],
    sweep_rows: list[dict],
    warm_row: dict | None,
    dequant_rows: list[dict],
    weights: dict,
) -> dict:
    copy = next(r for r in stream_rows if r["kernel"] == "copy")
    triad = next(r for r in stream_rows if r["kernel"] == "triad")
    matvec = next(r for r in sweep_rows if r["n"] == 1)
    noisy = [f"stream.{r['kernel']}" for r in stream_rows if r["noisy"]]
    noisy += [f"sweep.N={r['n']}" for r in sweep_rows if r["noisy"]]
    noisy += [f"dequant.{r['type']}" for r in dequant_rows if r.get("present") and r["noisy"]]
    summary = {
        "status": "measured",
        "device": "cpu",
        "stream_copy_gbps": copy["gbps"],
        "stream_triad_gbps": triad["gbps"],
        "stream_copy_best_gbps": copy["best_gbps"],
        "stream_triad_best_gbps": triad["best_gbps"],
        "stream_array_bytes": copy["array_bytes"],
        "matvec_cold_gbps": matvec["gbps"],
        "matvec_cold_gflops": matvec["gflops"],
        "matvec_cold_median_s": matvec["median_s"],
        "matvec_warm_gbps": warm_row["gbps"] if warm_row else None,
        "matvec_warm_weight_bytes": warm_row["weight_bytes"] if warm_row else None,
        "matvec_fraction_of_copy": matvec["gbps"] / copy["gbps"],
        "matmul_ratio_256_over_1": ratio_256_over_1(sweep_rows),
        "batch_sizes": [r["n"] for r in sweep_rows],
        "gflops_by_n": {str(r["n"]): r["gflops"] for r in sweep_rows},
        "gbps_by_n": {str(r["n"]): r["gbps"] for r in sweep_rows},
        "dequant": deq.dequant_summary(dequant_rows),
        "noisy": noisy,
        "weights": weights,
        "machine": facts,
        "settings": {k: cfg[k] for k in DEFAULTS},
        "counting": {
            "stream": "STREAM's: copy 16 and triad 24 bytes per float64 element; write-allocate not counted; "
            "GB/s = bytes / median time, 1 GB = 1e9 bytes",
            "sweep": "bytes = (rows*cols + cols*N + rows*N) * 4 (each weight once, X read, Y written); "
            "FLOPs = 2*rows*cols*N",
            "dequant": deq.COUNTING,
            "spread": "rel_iqr = (p75 - p25) / median of the per-call times; noisy when above noisy_spread",
        },
    }
    summary["targets"] = deq.dequant_targets(dequant_rows) + [
        fraction_target("matvec_cold_fraction_of_stream_copy", matvec, copy)
    ]
    return summary


# --- writing ----------------------------------------------------------------------------


def write_csv(path: str | Path, rows: list[dict], columns: Sequence[str] | None = None) -> None:
    columns = list(columns or [])
    for r in rows:
        columns += [k for k in r if k not in columns]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def write_json(path: str | Path, data: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def write_results(result: dict, summary: str | Path, tables: dict[str, str | Path]) -> None:
    """summary.json plus one CSV per table ('sweep', 'stream', 'dequant')."""
    write_json(summary, result["summary"])
    for name, path in tables.items():
        write_csv(path, result.get(name, []), TABLE_COLUMNS.get(name))


TABLE_COLUMNS = {
    "sweep": [
        "op",
        "dtype",
        "n",
        "rows",
        "cols",
        "itemsize",
        "weight_bytes",
        "bytes",
        "flops",
        "median_s",
        "gbps",
        "gflops",
        "time_over_n1",
        "work_over_n1",
        "rel_iqr",
        "noisy",
    ],
    "stream": [
        "kernel",
        "array_bytes",
        "bytes_counted",
        "threads",
        "median_s",
        "gbps",
        "best_gbps",
        "rel_iqr",
        "noisy",
    ],
    "dequant": deq.COLUMNS,
}

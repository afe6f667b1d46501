"""CPU timing: is decode memory-bound on this machine?

The course's claim (lesson 3, "matvec versus matmul"): with one token every weight is
read once for 2 FLOPs, so a matvec is paced by how fast memory delivers the weights,
not by arithmetic. Batching N tokens does N times the work per weight read, so time
grows far slower than N until the arithmetic units are busy.

One run of `run_cpu()` measures, in one process and against this machine's own limits:

1. memory bandwidth (bytesup.timing.memory): STREAM copy (c = a) and triad (a = b + q*c) on
   float64 arrays well beyond the last-level cache, bytes counted as STREAM counts them (copy
   16 and triad 24 bytes per element; write-allocate traffic is not counted), then kernels
   that only read (a threaded sum, a BLAS dot, a large BLAS gemv on a matrix stored by rows and
   on one stored by columns): the best of copy, sum, dot and the gemvs is the read ceiling;
2. the matvec vs matmul sweep, N = 1, 2, 4 ... 256, over the model's real FFN weights
   (ffn_gate and ffn_up of consecutive blocks, each kind stacked into one float32
   matrix larger than the last-level cache); the timed calls rotate between the two
   matrices, so a single-token number is a cold read from memory, never a cache hit;
3. dequantization throughput (timed first, before 1 and 2 change the allocator: run_cpu): the
   package's hand dequantizers (on their default threads, one unless $BYTESUP_THREADS says
   otherwise: bytesup.gguf.quants.kernels)
   against gguf.quants.dequantize on the same tensors, interleaved, re-checked bit for
   bit; one row per type the model holds, with the speed-up asked (5x for Q8_0, 3x for
   the other quantized types) and whether it was met.

Every timed figure is the median of `repeats` samples after `warmup` discarded ones,
with its spread (relative interquartile range) and a `noisy` flag when that spread is
wider than `noisy_spread`. Tests check the counting, never the speed.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from bytesup.gguf.file import GGUFFile
from bytesup.gguf.quants.kernels import default_threads
from bytesup.model.weights import column_major
from bytesup.timing import dequant_bench as deq
from bytesup.timing.machine import CpuShare, MiB, machine_facts
from bytesup.timing.measure import TimingError, summarize, target, time_rotation, write_csv, write_json
from bytesup.timing.memory import memory_rows, read_ceiling, stream_bytes_for

log = logging.getLogger(__name__)

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
    "decode_contexts": [0, 512, 2048, 8192],  # positions in the KV cache of the decode-across-context sweep
    "seed": 0,
}


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


def split_matvec(
    matrices: Sequence[np.ndarray], threads: int, repeats: int, warmup: int, seed: int, noisy_spread: float,
    min_sample_s: float,
) -> dict:  # fmt: skip
    """The cold matvec again, the way STREAM's workers split their arrays: each of `threads` workers
    multiplies its own rows by x with BLAS on one thread, the calls alternating between the matrices.

    BLAS's own gemv threading hands each call to a worker thread and waits for it; on a few cores
    that hand-off is part of a 2 ms call. Same bytes, same FLOPs: the two rows tell a memory limit
    apart from a library's threading.
    """
    rows, cols = matrices[0].shape
    x = np.random.default_rng(seed).standard_normal(cols, dtype=np.float32)
    ys = [np.empty(rows, dtype=np.float32) for _ in matrices]
    edges = [rows * i // threads for i in range(threads + 1)]
    parts = [slice(edges[i], edges[i + 1]) for i in range(threads)]
    with ThreadPoolExecutor(max_workers=threads) as pool, threadpool_limits(limits=1, user_api="blas"):

        def call(w, y):
            list(pool.map(lambda p: np.matmul(w[p], x, out=y[p]), parts))

        calls = [lambda w=w, y=y: call(w, y) for w, y in zip(matrices, ys)]
        times, per_sample = time_rotation(calls, repeats, warmup, min_sample_s)
    if not np.allclose(ys[0][:64], matrices[0][:64] @ x, rtol=1e-4, atol=1e-4):
        raise TimingError("the row-split matvec disagrees with W @ x")
    return sweep_row(
        "matvec_split",
        1,
        rows,
        cols,
        4,
        summarize(times, noisy_spread),
        per_sample,
        {"dtype": "fp32", "threads": threads},
    )


def long_runs_matvec(
    matrices: Sequence[np.ndarray], repeats: int, warmup: int, seed: int, noisy_spread: float, min_sample_s: float
) -> dict | None:
    """The cold matvec again on copies of the matrices in the decoder's long-runs layout
    (bytesup.model.weights.LAYOUTS): column-major, so that BLAS's gemv adds up whole contiguous
    columns instead of taking dot products of rows. Same bytes, same FLOPs; on some machines one
    order reads faster than the other. None where that layout keeps these matrices row-major."""
    rows, cols = matrices[0].shape
    if not column_major((rows, cols), "long-runs"):
        return None
    copies = [np.asfortranarray(w) for w in matrices]
    x = np.random.default_rng(seed).standard_normal(cols, dtype=np.float32)
    ys = [np.empty(rows, dtype=np.float32) for _ in copies]
    calls = [lambda w=w, y=y: np.matmul(w, x, out=y) for w, y in zip(copies, ys)]
    times, per_sample = time_rotation(calls, repeats, warmup, min_sample_s)
    if not np.allclose(ys[0][:64], matrices[0][:64] @ x, rtol=1e-4, atol=1e-4):
        raise TimingError("the column-major matvec disagrees with W @ x")
    return sweep_row(
        "matvec_long_runs", 1, rows, cols, 4, summarize(times, noisy_spread), per_sample,
        {"dtype": "fp32", "layout": "long-runs"},
    )  # fmt: skip


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
    share = CpuShare()
    with open_model(gguf_path) as model, threadpool_limits(limits=threads, user_api="blas"):
        facts = machine_facts(threads)
        llc = facts["llc_bytes"]
        min_sample_s = float(cfg["min_sample_ms"]) / 1e3
        reps, warm, noisy = int(cfg["repeats"]), int(cfg["warmup"]), float(cfg["noisy_spread"])

        # first, while the allocator is as a new process has it: glibc serves an array from the heap
        # once a freed one of its size has raised malloc's mmap threshold, and the sweeps below free
        # arrays of up to 32 MB; gguf-py's temporaries then skip their page faults and its Q8_0 ran at
        # 486-494 MB/s against 261-269 first (ours 1.6-1.8 GB/s either way; 3.6-3.7x against 6.0-6.2x)
        dequant_rows = deq.dequant_bench(
            model, cfg["dequant_types"], int(cfg["dequant_bytes"]), reps, warm, noisy, threads=default_threads()
        )

        array_bytes = stream_bytes_for(llc, cfg["stream_bytes"])
        log.info("STREAM and read kernels: 3 arrays of %d MiB, %d threads", array_bytes // MiB, threads)
        stream_rows = memory_rows(array_bytes, threads, reps, warm, noisy, min_sample_s)

        min_weight = int(cfg["min_weight_bytes"] or 2 * llc)
        weights = ffn_weight_buffers(model, min_weight)
        log.info("weights: %s", ", ".join(f"{n} {m.shape}" for n, m in zip(weights.names, weights.matrices)))
        sweep_rows = matvec_sweep(
            weights.matrices, cfg["batch_sizes"], reps, warm, int(cfg["seed"]), noisy, min_sample_s
        )
        warm_row = warm_matvec(weights.matrices[0], llc, reps, warm, int(cfg["seed"]), noisy, min_sample_s)
        split_row = split_matvec(weights.matrices, threads, reps, warm, int(cfg["seed"]), noisy, min_sample_s)
        long_row = long_runs_matvec(weights.matrices, reps, warm, int(cfg["seed"]), noisy, min_sample_s)

    summary = build_summary(
        facts, cfg, stream_rows, sweep_rows, warm_row, dequant_rows, weights.describe(llc), split_row, long_row
    )
    summary.update(share.record())
    if summary["machine_shared"]:
        log.warning(
            "other processes used %.0f%% of the CPUs during the run: figures are not this machine's "
            "limits; rerun on an idle machine",
            100 * summary["other_processes_cpu_fraction"],
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
    split_row: dict | None = None,
    long_row: dict | None = None,
) -> dict:
    copy = next(r for r in stream_rows if r["kernel"] == "copy")
    triad = next(r for r in stream_rows if r["kernel"] == "triad")
    matvec = next(r for r in sweep_rows if r["n"] == 1)
    ceiling = read_ceiling(stream_rows)
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
        "read_ceiling_gbps": ceiling["gbps"],
        "read_ceiling_kernel": ceiling["kernel"],
        "read_ceiling_rel_iqr": ceiling["rel_iqr"],
        "read_gbps_by_kernel": ceiling["by_kernel_gbps"],
        "matvec_fraction_of_read_ceiling": matvec["gbps"] / ceiling["gbps"],
        "matvec_cold_split_gbps": split_row["gbps"] if split_row else None,
        "matvec_cold_split_fraction_of_copy": split_row["gbps"] / copy["gbps"] if split_row else None,
        "matvec_cold_long_runs_gbps": long_row["gbps"] if long_row else None,
        "matvec_cold_long_runs_fraction_of_copy": long_row["gbps"] / copy["gbps"] if long_row else None,
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
            "read_ceiling": "the best median GB/s of copy, sum and dot (4 bytes read per float32) and gemv by rows or columns (W + x + y) "
            "over buffers of stream_array_bytes (bytesup.timing.memory)",
            "sweep": "bytes = (rows*cols + cols*N + rows*N) * 4 (each weight once, X read, Y written); "
            "FLOPs = 2*rows*cols*N; matvec_cold_split: the N = 1 product split by rows over the job's threads, "
            "BLAS on one thread each; matvec_cold_long_runs: the same product on column-major copies of the matrices",
            "dequant": deq.COUNTING,
            "spread": "rel_iqr = (p75 - p25) / median of the per-call times; noisy when above noisy_spread",
        },
    }
    # the target takes the fastest way of the same product, and its note says which
    ways = [("BLAS's own threads", matvec)]
    if split_row:
        n = split_row["threads"]
        ways.append((f"{n} worker{'s' if n != 1 else ''} over their own rows", split_row))
    if long_row:
        ways.append(("column-major copies (the long-runs layout)", long_row))
    way, best = max(ways, key=lambda w: w[1]["gbps"])
    goal = fraction_target("matvec_cold_fraction_of_stream_copy", best, copy)
    if len(ways) > 1:
        goal["note"] = f"the fastest of {', '.join(w for w, _ in ways)}: {way}"
    summary["targets"] = deq.dequant_targets(dequant_rows) + [goal]
    return summary


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

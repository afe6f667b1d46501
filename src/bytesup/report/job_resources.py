"""Each job's wall time and peak memory, from Snakemake's benchmark files, beside what its rule declares.

Every rule has a ``benchmark:`` file (benchmarks/<stage>/...tsv). Snakemake writes one row per
run of the job: ``s`` (wall seconds), ``max_rss`` (peak resident memory in MB, the job's process
and its children summed: a notebook's kernel counts), ``cpu_time`` and more. The rule declares
``resources: mem_mb`` (MB) and ``runtime`` (minutes); a scheduler (SLURM) kills a job that
goes over them, so they must hold for the largest model the workflow is meant for, the
course's specimen (deepseek-coder-6.7b Q8_0, 7.16 GB).

    rows = job_rows({"extract": {"benchmark": "benchmarks/extract/m.tsv", "mem_mb": 1500, "runtime": 20}})
    rows[0]["max_rss_mb"], rows[0]["within_mem_mb"]

How Snakemake measures: it samples the job's processes every 0.5 s for the first 15 s, then
every 30 s; the workflow (common.smk) makes it every 0.5 s throughout, since a lesson that peaks
20 s in showed a quarter of its peak otherwise. A spike shorter than that can still fall between
samples, so ``max_rss`` is a lower bound of the true peak; the declared ``mem_mb`` keeps a margin.
Resident memory counts the pages of a memory-mapped file the job has read (llama.cpp maps the
model; the lessons map the extract stage's .npy files) as well as its own arrays.

The second half is the memory model: each job's peak as a function of the model's shapes
(``peak_mb``), the arithmetic of what each job holds at once, so the same code can be judged at
shapes this machine cannot run (``estimate_table`` at Llama-3-70B). docs/memory.md has the tables;
tests/test_memory.py prints them and holds them to 2 GB (7B) and 8 GB (70B).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bytesup.errors import BytesupError
from bytesup.gguf.sizes import type_bytes
from bytesup.model.configs import Architecture, llama_tensor_shapes
from bytesup.timing.context import DECODE_CONTEXTS, KV_BUDGET_BYTES, kv_bytes_read

MB = 2**20  # Snakemake's max_rss and mem_mb are in MiB (psutil bytes / 1024 / 1024)


class BenchmarkError(BytesupError, ValueError):
    """A benchmark file that is not Snakemake's (one line: the file and what is wrong)."""


@dataclass(frozen=True)
class Usage:
    wall_s: float  # the job's wall time (the longest run if the file holds repeats)
    max_rss_mb: float | None  # peak resident memory, MB; None when Snakemake could not sample (NA)
    cpu_s: float | None


def _number(text: str) -> float | None:
    return None if text.strip() in ("", "NA", "-") else float(text)


def read_benchmark(path: str | os.PathLike) -> Usage:
    """A Snakemake benchmark TSV -> Usage (the maximum over its rows, one per repeat)."""
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except OSError as err:
        raise BenchmarkError(f"{path}: cannot read the benchmark file ({err.strerror}); rerun the job") from None
    if not rows or "s" not in rows[0] or "max_rss" not in rows[0]:
        raise BenchmarkError(f"{path}: not a Snakemake benchmark file (needs a header with s and max_rss, and a row)")
    try:
        walls = [float(r["s"]) for r in rows]
        rss = [v for v in (_number(r["max_rss"]) for r in rows) if v is not None]
        cpu = [v for v in (_number(r.get("cpu_time") or "") for r in rows) if v is not None]
    except (TypeError, ValueError):
        raise BenchmarkError(f"{path}: a value of s, max_rss or cpu_time is not a number") from None
    return Usage(max(walls), max(rss) if rss else None, max(cpu) if cpu else None)


def job_rows(jobs: Mapping[str, Mapping]) -> list[dict]:
    """One row per job: measured wall time and peak memory beside the declared runtime and mem_mb.

    jobs: {job name: {"benchmark": path, "mem_mb": MB or None, "runtime": minutes or None}}.
    A job whose benchmark file does not exist (not run here) gets a row with None measurements.
    """
    rows = []
    for job, declared in jobs.items():
        path = declared["benchmark"]
        usage = read_benchmark(path) if Path(path).exists() else None
        mem_mb, runtime = declared.get("mem_mb"), declared.get("runtime")
        rss = usage.max_rss_mb if usage else None
        wall = usage.wall_s if usage else None
        rows.append({
            "job": job,
            "benchmark": str(path),
            "wall_s": wall,
            "runtime_s": None if runtime is None else 60 * runtime,
            "within_runtime": None if wall is None or runtime is None else wall <= 60 * runtime,
            "max_rss_mb": rss,
            "mem_mb": mem_mb,
            "mem_fraction": None if rss is None or not mem_mb else rss / mem_mb,
            "within_mem_mb": None if rss is None or mem_mb is None else rss <= mem_mb,
            "cpu_s": usage.cpu_s if usage else None,
        })  # fmt: skip
    return rows


def over(rows: list[dict]) -> list[str]:
    """Jobs that went over what they declared, one line each (empty when every job held)."""
    out = []
    for r in rows:
        if r["within_mem_mb"] is False:
            out.append(f"{r['job']}: peak {r['max_rss_mb']:.0f} MB > mem_mb={r['mem_mb']} ({r['benchmark']})")
        if r["within_runtime"] is False:
            out.append(f"{r['job']}: {r['wall_s']:.0f} s > runtime={r['runtime_s'] // 60} min ({r['benchmark']})")
    return out


# --- the memory model: what each job holds at once, from the shapes -------------------------------
#
# Two parts per job. "own": the arrays and objects the job allocates (anonymous memory: what must
# fit, or the job is killed). "mapped": pages of a memory-mapped file the job reads (the model,
# through llama.cpp or the streaming decoder; the extract stage's .npy files). Those count in
# resident memory (max_rss) while mapped, but they are the page cache's: the kernel drops them
# when memory is short, and a cgroup limit (SLURM) reclaims them rather than killing the job.
#
# Every job starts from an interpreter: a script job (Snakemake's script wrapper, numpy, gguf-py,
# bytesup) or a lesson job (that plus papermill and a Jupyter kernel with pandas and matplotlib).
# The bases are the largest peaks measured on the tiny synthetic model (report job_resources.csv),
# rounded up.

PYTHON_BASE_MB = 150  # a script job (tiny model: 40-100 MB; torch for the GPU job: 220 MB)
NOTEBOOK_BASE_MB = 300  # a lesson job (tiny model: 200-260 MB)
CHUNK_MB = 64  # the row chunk extract, lesson 2 and the streaming decoder's output head work in
TOKEN_TEXT_BYTES = 200  # one vocabulary string in Python: the object, its list slot, its JSON text


def _f32_mb(*shape: int) -> float:
    return 4 * math.prod(shape) / MB


def file_bytes(a: Architecture, type_name: str = "Q8_0") -> int:
    """Bytes of the tensors of a GGUF of this shape: every matrix as `type_name`, norms as F32."""
    total = 0
    for _, shape in llama_tensor_shapes(a):
        total += type_bytes("F32" if len(shape) == 1 else type_name, math.prod(shape))
    return total


def block_f32_mb(a: Architecture) -> float:
    """One transformer block's matrices as float32: attention (q, k, v, output) and the FFN's three."""
    q, kv = a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim
    return _f32_mb(a.d_model, 2 * q + 2 * kv) + 3 * _f32_mb(a.d_ff, a.d_model)


def peak_mb(job: str, a: Architecture, *, resident_budget_mb: int = 2000, llc_mb: int = 32,
            type_name: str = "Q8_0") -> dict:  # fmt: skip
    """{"own_mb", "mapped_mb", "holds"} for one job at these shapes (the formulas follow the code).

    Jobs: fetch, extract, 02_tokens_and_embeddings, timing_cpu, timing_decode, timing_figure, report.
    """
    vocab_text = a.vocab * TOKEN_TEXT_BYTES / MB
    if job == "fetch":
        return {
            "own_mb": PYTHON_BASE_MB,
            "mapped_mb": 0.0,
            "holds": "the interpreter; the file is hashed (or copied) 1 MB at a time",
        }
    if job == "extract":
        # bytesup.gguf.extract: tensor by tensor, a chunk of rows read with plain reads (quantized) and its
        # float32 rows written through the hasher; the metadata (the vocabulary) as Python objects
        return {
            "own_mb": PYTHON_BASE_MB + 2 * CHUNK_MB + vocab_text,
            "mapped_mb": 0.0,
            "holds": "one chunk of rows, quantized and as float32; the vocabulary as text",
        }
    if job == "02_tokens_and_embeddings":
        # the table a chunk of rows at a time (the rows, their unit rows), 512 sampled unit rows and
        # their cosines to a chunk, per-token floats (row lengths, cosines to one row, their order)
        sample = _f32_mb(512, a.d_model) + 512 * min(a.vocab, CHUNK_MB * MB // (4 * a.d_model)) * 4 / MB
        return {
            "own_mb": NOTEBOOK_BASE_MB + 2 * CHUNK_MB + sample + 6 * 4 * a.vocab / MB + vocab_text,
            "mapped_mb": CHUNK_MB,
            "holds": "two chunks of embedding rows, 512 sampled rows, a few floats per token",
        }
    if job == "timing_cpu":
        # bytesup.timing.cpu.run_cpu: first STREAM (3 float64 arrays of max(4 x LLC, 256 MiB)), freed;
        # then ffn_gate and ffn_up stacked as float32 until each holds 2 x LLC (one block at least),
        # several blocks being concatenated into a copy; then a column-major copy of each beside them (the
        # long-runs matvec); the dequantizer benchmark works on 16 MB per type
        stream_mb = 3 * max(4 * llc_mb, 256)
        per_block = _f32_mb(a.d_ff, a.d_model)
        blocks = max(1, math.ceil(2 * llc_mb / per_block))
        sweep_mb = 4 * blocks * per_block
        return {
            "own_mb": PYTHON_BASE_MB + max(stream_mb, sweep_mb),
            "mapped_mb": 2 * type_bytes(type_name, a.d_ff * a.d_model) / MB,
            "holds": "the STREAM arrays, or ffn_gate and ffn_up as float32 (stacked when one block is under 2 x LLC) "
            "and their column-major copies",
        }
    if job == "timing_decode":
        # bytesup.timing.decode: the NumPy decoder with resident float32 weights when they fit the budget,
        # else one block's matrices as float32 at a time plus a chunk of the output head (bytesup.model.weights
        # hands each tensor's mapped pages back); beside them, one thing at a time: the float32 copy being written
        # (one tensor), then the memory kernels (3 float64 arrays, before each round of the decode's turns) while
        # llama.cpp maps that copy, the context sweep's KV cache (at most KV_BUDGET_BYTES), llama.cpp on the file; after the model is
        # closed, the Q8_0 product on the specimen's FFN (two int8 matrices with their scales)
        f32_model = sum(4 * math.prod(shape) for _, shape in llama_tensor_shapes(a)) / MB
        resident = f32_model <= resident_budget_mb
        weights = f32_model if resident else block_f32_mb(a) + CHUNK_MB
        stream_mb = 3 * max(4 * llc_mb, 256)
        kv_mb = min(kv_bytes_read(a, max(DECODE_CONTEXTS) + 16), KV_BUDGET_BYTES) / MB if resident else 0.0
        largest = max(type_bytes(type_name, math.prod(shape)) for _, shape in llama_tensor_shapes(a) if len(shape) > 1)
        beside = max(stream_mb, kv_mb, 4 * largest / MB if resident else 0.0)
        return {
            "own_mb": PYTHON_BASE_MB + weights + beside,
            "mapped_mb": max(f32_model, file_bytes(a, type_name) / MB) if resident else largest / MB,
            "holds": (
                "all weights as float32 + the memory kernels or the context sweep's cache; llama.cpp maps "
                "the float32 copy, then the file"
                if resident
                else "one block's matrices as float32 + a head chunk + the STREAM arrays"
            ),
        }
    if job in ("timing_figure", "report"):
        return {
            "own_mb": NOTEBOOK_BASE_MB,
            "mapped_mb": 0.0,
            "holds": "CSV and JSON files: nothing grows with the model",
        }
    raise ValueError(f"no memory model for job {job!r}; known: {', '.join(MODELLED_JOBS)}")


MODELLED_JOBS = (
    "fetch",
    "extract",
    "02_tokens_and_embeddings",
    "timing_cpu",
    "timing_decode",
    "timing_figure",
    "report",
)


def estimate_table(a: Architecture, **kw) -> list[dict]:
    """peak_mb for every modelled job at these shapes, largest own memory first."""
    rows = [{"job": job, **peak_mb(job, a, **kw)} for job in MODELLED_JOBS]
    return sorted(rows, key=lambda r: -r["own_mb"])


COLUMNS = (
    "job",
    "wall_s",
    "runtime_s",
    "within_runtime",
    "max_rss_mb",
    "mem_mb",
    "mem_fraction",
    "within_mem_mb",
    "cpu_s",
    "benchmark",
)


def write_csv(rows: list[dict], path: str | os.PathLike) -> Path:
    """The table as CSV (the report's job_resources.csv): seconds and MB rounded to 0.1, a fraction to 0.001."""
    path = Path(path)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            out = {}
            for col in COLUMNS:
                v = r.get(col)
                if isinstance(v, float):
                    v = round(v, 3 if col == "mem_fraction" else 1)
                out[col] = "" if v is None else v
            writer.writerow(out)
    return path

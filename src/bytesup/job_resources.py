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
shapes this machine cannot run (``estimate_table`` at Llama-3-70B). docs/memory.md prints it.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bytesup.model.configs import Architecture, type_bytes

MB = 2**20  # Snakemake's max_rss and mem_mb are in MiB (psutil bytes / 1024 / 1024)


class BenchmarkError(ValueError):
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
# Every job starts from an interpreter with numpy, gguf-py and the package imported; a lesson job
# adds Snakemake's script process, papermill and a Jupyter kernel with pandas and matplotlib. The
# two bases below are the smallest peaks measured on the tiny synthetic model (tests/test_memory.py),
# rounded up. On top of the base, each job holds the arrays named in its formula.

PYTHON_BASE_MB = 250  # a script job: Snakemake's script wrapper, numpy, gguf-py, bytesup
NOTEBOOK_BASE_MB = 450  # a lesson job: the above plus papermill and a kernel (pandas, matplotlib)
CHUNK_MB = 64  # the row chunk the streaming stages (extract, lesson 2) dequantize or read at a time


def _f32_mb(*shape: int) -> float:
    return 4 * math.prod(shape) / MB


def file_bytes(a: Architecture, type_name: str = "Q8_0") -> int:
    """Bytes of a GGUF of this shape with every matrix as `type_name` and norms as F32 (the tensors)."""
    from bytesup.model.configs import llama_tensor_shapes

    total = 0
    for _, shape in llama_tensor_shapes(a):
        total += 4 * shape[0] if len(shape) == 1 else type_bytes(type_name, math.prod(shape))
    return total


def peak_mb(job: str, a: Architecture, *, resident_budget_mb: int = 2000, type_name: str = "Q8_0") -> dict:
    """{"peak_mb": estimate, "holds": what at once} for one job at these shapes.

    Jobs: fetch, extract, timing_cpu, timing_decode, timing_figure, report, and the lessons
    whose memory this module models: 02_tokens_and_embeddings. The formulas follow the code:
    """
    vocab_row_chunk = min(_f32_mb(a.vocab, a.d_model), CHUNK_MB)
    if job == "fetch":
        # hashes the file in 1 MB reads (or copies it): nothing grows with the model
        return {"peak_mb": PYTHON_BASE_MB, "holds": "the interpreter; the file is hashed in 1 MB pieces"}
    if job == "extract":
        # tensor by tensor, CHUNK_MB of rows at a time: the raw bytes read, their float32 rows, the
        # hashing writer's buffer; the tensor table and metadata (the vocabulary) as Python objects
        vocab_strings = a.vocab * 200 / MB  # a token string in Python, in its list and its JSON text
        return {"peak_mb": PYTHON_BASE_MB + 3 * CHUNK_MB + vocab_strings,
                "holds": "3 row chunks of one tensor (raw bytes, float32, the write) + the vocabulary as text"}
    if job == "02_tokens_and_embeddings":
        # rows of the embedding table CHUNK_MB at a time (read, unit rows, their cosines to 512 sampled
        # rows); 20,000 pairs of rows in chunks; per-row lengths (vocab floats); the vocabulary
        vocab_strings = a.vocab * 200 / MB
        return {"peak_mb": NOTEBOOK_BASE_MB + 3 * vocab_row_chunk + vocab_strings + 8 * a.vocab * 4 / MB,
                "holds": "3 chunks of embedding rows + per-row lengths and cosines (a few floats per token)"}
    if job == "timing_cpu":
        # the sweep stacks real FFN matrices as float32 up to 2 x the last-level cache (config), the
        # STREAM arrays, one FFN matrix dequantized to stack from
        ffn = _f32_mb(a.d_ff, a.d_model)
        return {"peak_mb": PYTHON_BASE_MB + 2 * ffn + 3 * 256,
                "holds": "one FFN matrix as float32, its stacked copies, three STREAM arrays of 256 MB"}
    if job == "timing_decode":
        # float32 weights while they fit the resident budget, else one block at a time from the map;
        # llama.cpp maps the file (its pages are the page cache's, counted while touched)
        block = _f32_mb(a.d_model, 4 * a.d_model) + 3 * _f32_mb(a.d_ff, a.d_model)
        weights = min(resident_budget_mb, block + 2 * _f32_mb(a.vocab, a.d_model))
        return {"peak_mb": PYTHON_BASE_MB + weights + 2 * _f32_mb(a.vocab, a.d_model) / 2,
                "holds": "one block's weights as float32 (or the resident budget), the output head's logits"}
    if job in ("timing_figure", "report"):
        return {"peak_mb": NOTEBOOK_BASE_MB, "holds": "CSV and JSON files; nothing grows with the model"}
    raise ValueError(f"no memory model for job {job!r}; known: fetch, extract, 02_tokens_and_embeddings, "
                     "timing_cpu, timing_decode, timing_figure, report")


MODELLED_JOBS = ("fetch", "extract", "02_tokens_and_embeddings", "timing_cpu", "timing_decode", "timing_figure",
                 "report")


def estimate_table(a: Architecture, **kw) -> list[dict]:
    """peak_mb for every modelled job at these shapes, largest first."""
    rows = [{"job": job, **peak_mb(job, a, **kw)} for job in MODELLED_JOBS]
    return sorted(rows, key=lambda r: -r["peak_mb"])


COLUMNS = ("job", "wall_s", "runtime_s", "within_runtime", "max_rss_mb", "mem_mb", "mem_fraction", "within_mem_mb",
           "cpu_s", "benchmark")


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

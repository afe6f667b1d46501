"""The capstone, "Why LLM decode is memory-bound": bytes per token, and what they allow.

Generating one token at batch 1 multiplies one vector by every weight matrix of the model. Each
weight is fetched from memory, used for one multiply and one add, and not needed again until the
next token. So the time per token cannot be shorter than

    bytes read per token / memory bandwidth

and tokens per second cannot exceed bandwidth / bytes. What is computed, in the lesson's order:

  1. bytes read per generated token, from a tensor table (name, type, shape, bytes), for three
     models: this run's (its GGUF's tensors.csv), the course's specimen deepseek-coder-6.7b Q8_0
     and Llama-3-8B in bf16 (both from their published configurations, laid out as the GGUF
     tensor table they would have);
  2. the ceilings: bandwidth / bytes, for the bandwidths the timing jobs measured on this
     machine (STREAM copy, the cold matvec; the GPU's copy when it was measured) and for the
     course's DGX Spark figures;
  3. the roofline: every point of the timing sweep (one per batch size N), at its arithmetic
     intensity FLOPs / byte and its achieved GFLOP/s, under a sloped roof (measured bandwidth)
     and a flat one (the best GFLOP/s the sweep reached: a measured peak, not a datasheet's);
  4. the whole model, timed (rule timing_decode): the project's NumPy decoder at batch 1 against
     the ceiling of the same job's STREAM copy over the bytes it reads per token (float32 when its
     weights are resident), prefill tokens/s by N, llama.cpp's on the quantized file where
     installed, and for each engine which limit binds decode, read from the measurements: the
     memory floor (bytes / copy) against the arithmetic left per token at the largest N. These
     points join the roofline beside the course's DGX Spark numbers. A skipped record (an
     architecture the forward pass does not follow) leaves those metrics None.

What "read per token" includes (the rule of `per_token_reads`):
  * every weight tensor once: all matrices and norm vectors of every block, the final norm,
    the output head;
  * of a lookup table (token_embd, learned positions) one row: the row of the token being fed in;
  * a model with tied embeddings has no output.weight and multiplies by token_embd as its head:
    that pass reads the whole table, listed as its own line beside the one-row lookup.
Not included: the KV cache (grows with the context; reported separately per token of context),
activations, and the tokenizer. Weights are counted in their stored format (bytes per block from
gguf-py's GGML_QUANT_SIZES, through configs.type_bytes), which is what decode streams when it
dequantizes on the fly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bytesup.gguf.extract import parse_shape
from bytesup.lessons import LessonInputError, figure
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.ffn_walk import dims
from bytesup.lessons.spec import CAPSTONE, Headline, LessonSpec
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.model.configs import (
    DEEPSEEK_CODER_6_7B,
    kv_bytes_per_token,
    llama_tensor_shapes,
)
from bytesup.timing.results import course_machine, number, read_timing  # noqa: F401  (read_timing: the notebook)

SPEC = LessonSpec(
    id="capstone_decode_is_memory_bound",
    title="Why LLM decode is memory-bound",
    kind=CAPSTONE,
    position=8,
    source=("The capstone of the LLM Basics series"),
    reads=(
        "metadata_json",
        "tensors_csv",
        "timing_summary",
        "timing_sweep",
        "gpu_summary",
        "gpu_sweep",
        "decode_summary",
        "decode_prefill",
    ),
    tables=(
        "tensor_reads.csv",
        "bytes_per_token.csv",
        "decode_ceilings.csv",
        "roofline_points.csv",
        "whole_model_timing.csv",
    ),
    figures={
        "bytes_per_token.png": "Bytes one generated token reads (batch 1, weights only), by tensor group: this model, deepseek-coder-6.7b Q8_0 and Llama-3-8B bf16",
        "prefill.png": "The whole model on this machine: prefill tokens/s against N (tokens in one pass) and decode at batch 1, under the memory limit (N x STREAM copy / bytes per token) and the arithmetic limit (the sweep's measured peak / FLOPs per token); llama.cpp beside ours where installed",
        "roofline.png": "This run's timing sweep on a roofline: measured STREAM copy bandwidth (sloped roof) and the sweep's best GFLOP/s (flat roof, a measured peak); the whole model's decode and prefill points, and the course's DGX Spark numbers (quoted 273 GB/s, its CPU matvec at N = 1 and 256)",
    },
    headlines=(
        Headline(
            "model_bytes_per_token_gb", "bytes read per generated token, this model (as stored)", unit="GB", fmt=".4f"
        ),
        Headline("decode_tokens_per_s", "our NumPy decoder, batch 1, measured", unit="tokens/s", fmt=".1f"),
        Headline(
            "decode_ceiling_tokens_per_s",
            "its ceiling: the same job's STREAM copy / its bytes per token",
            unit="tokens/s",
            fmt=".1f",
        ),
        Headline("decode_fraction_of_ceiling", "fraction of that ceiling reached (goal: 60 %)", fmt=".1%"),
        Headline(
            "decode_bytes_per_token", "bytes our decoder reads per token (float32 weights)", unit="bytes", fmt=",d"
        ),
        Headline("prefill_best_tokens_per_s", "our decoder, prefill: best tokens/s over N", unit="tokens/s", fmt=".0f"),
        Headline(
            "decode_crossover_n",
            "N where prefill turns from memory- to arithmetic-bound (measured)",
            unit="tokens",
            fmt=".0f",
        ),
        Headline(
            "llama_cpp_decode_tokens_per_s", "llama.cpp, batch 1, same file and threads", unit="tokens/s", fmt=".1f"
        ),
        Headline(
            "llama_cpp_decode_fraction_of_ceiling", "llama.cpp: fraction of the quantized file's ceiling", fmt=".1%"
        ),
        Headline("model_ffn_share_of_bytes", "FFN share of the bytes per token", fmt=".1%"),
        Headline("model_ceiling_stream_copy_tps", "tokens/s ceiling at STREAM copy bandwidth (as stored)", fmt=".0f"),
        Headline("model_ceiling_matvec_cold_tps", "tokens/s ceiling at cold matvec bandwidth (as stored)", fmt=".0f"),
        Headline("deepseek_q8_0_bytes_per_token_gb", "deepseek-coder-6.7b Q8_0: bytes per token", unit="GB", fmt=".2f"),
        Headline(
            "deepseek_q8_0_ceiling_stream_copy_tps",
            "deepseek-coder-6.7b Q8_0: ceiling on this machine",
            unit="tokens/s",
            fmt=".1f",
        ),
        Headline(
            "deepseek_q8_0_ceiling_course_peak_tps",
            "deepseek-coder-6.7b Q8_0: ceiling at the DGX Spark's quoted peak",
            unit="tokens/s",
            fmt=".1f",
        ),
        Headline("llama3_8b_bf16_bytes_per_token_gb", "Llama-3-8B bf16: bytes per token", unit="GB", fmt=".2f"),
        Headline("llama3_8b_bf16_ffn_bytes_per_token_gb", "Llama-3-8B bf16: FFN bytes per token", unit="GB", fmt=".2f"),
        Headline("roofline_cpu_ridge_intensity", "CPU roofline ridge", unit="FLOP/byte", fmt=".2f"),
        Headline("roofline_cpu_peak_gflops", "CPU measured peak", unit="GFLOP/s", fmt=".0f"),
        Headline("timing_matmul_ratio_256_over_1", "time for 256 tokens / time for 1", fmt=".1f"),
    ),
)


@dataclass(frozen=True)
class Layout:
    """A model laid out as a file: its configuration and the storage type of its tensors."""

    key: str  # prefix of this model's keys in metrics.json
    label: str  # for tables and figures
    arch: configs.Architecture
    matrices: str  # ggml type of every 2-D tensor
    vectors: str  # ggml type of the norm vectors


SPECIMEN = Layout("deepseek_q8_0", "deepseek-coder-6.7b Q8_0", DEEPSEEK_CODER_6_7B, "Q8_0", "F32")
# The published checkpoint stores every tensor, norms included, as bfloat16.
LLAMA3_8B_BF16 = Layout("llama3_8b_bf16", "Llama-3-8B bf16", configs.LLAMA3_8B, "BF16", "BF16")
PUBLISHED_LAYOUTS = (SPECIMEN, LLAMA3_8B_BF16)
MODEL_KEY = "model"  # this run's model

GB = 1e9  # decimal, as the course and STREAM count


# --- 1. what a tensor costs, and what a token reads ----------------------------------------------


def type_bytes(type_name: str, elements: int) -> int:
    """configs.type_bytes, with a lesson's one-line error."""
    try:
        return configs.type_bytes(type_name, elements)
    except ValueError as err:
        raise LessonInputError(str(err)) from None


def config_tensor_table(layout: Layout) -> list[dict]:
    """The tensor table (GGUF names, numpy-order shapes) a llama-style model would have in a file.

    Rows have the columns of the extract stage's tensors.csv that the accounting reads: name,
    type, shape (tuple), bytes, elements.
    """
    try:
        shapes = llama_tensor_shapes(layout.arch)
    except ValueError as err:
        raise LessonInputError(str(err)) from None
    rows = []
    for name, shape in shapes:
        kind = layout.matrices if len(shape) == 2 else layout.vectors
        n = math.prod(shape)
        rows.append({"name": name, "type": kind, "shape": shape, "bytes": type_bytes(kind, n), "elements": n})
    return rows


# How the parts are grouped in tables and the figure.
GROUPS = {
    "FFN (gate, up, down)": pc.FFN,
    "attention (q, k, v, o)": pc.ATTENTION,
    "output head": ("lm_head",),
    "embedding lookup (one row)": pc.LOOKUP_TABLES,
    "norms and other": ("norms", "output_norm", "other"),
}


def summarize_reads(reads: Sequence[Mapping]) -> dict:
    """Totals of one model's reads: bytes per token, shares by group, FLOPs and intensity of decode.

    FLOPs count the matvecs only: each weight of a matrix read does one multiply and one add.
    """
    total = sum(r["bytes_read"] for r in reads)
    file_bytes = sum(r["bytes_in_file"] for r in reads if not r.get("second_pass"))  # each tensor once
    group_bytes = {g: sum(r["bytes_read"] for r in reads if r["part"] in parts) for g, parts in GROUPS.items()}
    matrix_weights = sum(r["elements_read"] for r in reads if r["matrix"])
    flops = 2 * matrix_weights
    ffn_weights = sum(r["elements_read"] for r in reads if r["part"] in pc.FFN)
    return {
        "bytes_per_token": total,
        "bytes_per_token_gb": total / GB,
        "file_tensor_bytes": file_bytes,
        "file_tensor_gb": file_bytes / GB,
        "read_share_of_file": total / file_bytes if file_bytes else None,
        "weights_read": sum(r["elements_read"] for r in reads),
        "ffn_weights": ffn_weights,
        "ffn_bytes_per_token": group_bytes["FFN (gate, up, down)"],
        "ffn_bytes_per_token_gb": group_bytes["FFN (gate, up, down)"] / GB,
        "ffn_share_of_bytes": group_bytes["FFN (gate, up, down)"] / total if total else None,
        "attention_share_of_bytes": group_bytes["attention (q, k, v, o)"] / total if total else None,
        "head_share_of_bytes": group_bytes["output head"] / total if total else None,
        "decode_flops_per_token": flops,
        "decode_intensity": flops / total if total else None,  # FLOPs per byte at batch 1
        "bytes_by_group": group_bytes,
    }


def kv_cache_bytes_per_context_token(a: configs.Architecture, cache_type: str = "F16") -> int:
    """Bytes of K and V one token of context adds to the cache (configs.kv_bytes_per_token).

    Decode reads the whole cache for every new token, so at context length T add T times this to
    the weights' bytes. Not part of `bytes_per_token`, which counts weights only.
    """
    return kv_bytes_per_token(a, cache_type)


def model_architecture(d: Mapping, tensor_rows: Sequence[Mapping], name: str = "this model") -> configs.Architecture:
    """This run's model as a configuration: its sizes from the metadata (ffn_walk.dims), its vocabulary
    from the embedding table's rows, tied when the file has no output.weight."""
    embd = next((r for r in tensor_rows if r["name"] == "token_embd.weight"), None)
    if embd is None:
        raise LessonInputError("tensors.csv: no token_embd.weight row; re-run the extract stage")
    vocab = parse_shape(embd["shape"])[0]
    return pc.architecture_from_gguf(d, (r["name"] for r in tensor_rows), vocab, name)


def model_kv_bytes_per_context_token(d: Mapping) -> int:
    """kv_cache_bytes_per_context_token for this run's model, from its metadata's sizes (a model may
    store values of another length than keys: metadata value_length)."""
    return configs.kv_bytes(d["block_count"], d["head_count_kv"], d["head_dim"], d["value_dim"])


@dataclass
class Accounting:
    key: str
    label: str
    source: str
    reads: list[dict]
    summary: dict


def account(key: str, label: str, source: str, tensor_rows: Iterable[Mapping]) -> Accounting:
    reads = pc.per_token_reads(tensor_rows)
    if not reads:
        raise LessonInputError(f"{source}: no tensors listed; re-run the extract stage")
    return Accounting(key, label, source, reads, summarize_reads(reads))


def account_layout(layout: Layout) -> Accounting:
    source = f"{layout.arch.source}, matrices {layout.matrices}, norms {layout.vectors}"
    return account(layout.key, layout.label, source, config_tensor_table(layout))


def group_table(accounts: Sequence[Accounting]) -> list[dict]:
    """bytes_per_token.csv: one row per model and group of tensors."""
    rows = []
    for acc in accounts:
        total = acc.summary["bytes_per_token"]
        for group, parts in GROUPS.items():
            mine = [r for r in acc.reads if r["part"] in parts]
            rows.append(
                {
                    "model": acc.label,
                    "group": group,
                    "tensors": len(mine),
                    "weights_read": sum(r["elements_read"] for r in mine),
                    "bytes_read": sum(r["bytes_read"] for r in mine),
                    "share_of_bytes": sum(r["bytes_read"] for r in mine) / total if total else None,
                }
            )
        rows.append(
            {
                "model": acc.label,
                "group": "total",
                "tensors": len(acc.reads),
                "weights_read": acc.summary["weights_read"],
                "bytes_read": total,
                "share_of_bytes": 1.0,
            }
        )
    return rows


READS_COLUMNS = ("name", "part", "type", "shape", "read", "elements_read", "bytes_read", "bytes_in_file")


# --- 2. bandwidths and ceilings ------------------------------------------------------------------


def fmt(value, spec: str = ".1f", missing: str = "n/a") -> str:
    """A number for the notebook's prose, or `missing` when the run did not measure it."""
    return missing if value is None else format(value, spec)


def published(claim_id: str) -> float:
    """A number as the course prints it, read from this lesson's claims file (never retyped)."""
    for c in claims_mod.load_claims(SPEC.id):
        if c.claim_id == claim_id:
            return float(claims_mod.parse_published(c.published))
    raise KeyError(claim_id)


def bandwidths(cpu: Mapping, gpu: Mapping) -> tuple[list[dict], list[str]]:
    """Every bandwidth a ceiling is worked out from: this run's measurements, then the course's figures.

    Returns (rows, notes); a row whose value was not measured keeps gbps None and says why.
    """
    notes: list[str] = []
    rows = []

    def add(source, what, value, note=""):
        rows.append({"source": source, "bandwidth": what, "gbps": number(value), "note": note})

    for key, what in (("stream_copy_gbps", "CPU STREAM copy"), ("matvec_cold_gbps", "CPU matvec, cold (N = 1)")):
        if cpu.get(key) is None:
            notes.append(f"cpu summary.json key {key!r} missing")
        add("this run", what, cpu.get(key), "" if cpu.get(key) is not None else "not in cpu summary.json")
    if gpu.get("status") == "measured":
        name = (gpu.get("machine") or {}).get("name") or gpu.get("device") or "GPU"
        add("this run", f"GPU copy ({name})", gpu.get("stream_copy_gbps"))
        by_dtype = gpu.get("by_dtype") if isinstance(gpu.get("by_dtype"), Mapping) else {}
        for dtype, d in sorted(by_dtype.items()):
            add("this run", f"GPU matvec {dtype}, cold (N = 1)", (d or {}).get("matvec_cold_gbps"))
        if not by_dtype:
            add("this run", "GPU matvec, cold (N = 1)", gpu.get("matvec_cold_gbps"))
    else:
        why = gpu.get("skipped") or ("no GPU summary" if not gpu else f"status {gpu.get('status')!r}")
        add("this run", "GPU copy", None, f"not measured: {why}")
        notes.append(f"GPU not measured: {why}")
    add(
        "course (the lesson 3 text)",
        "DGX Spark memory peak (quoted by the course)",
        published("timing.peak_gbps"),
        "a hardware figure the course quotes, not measured here",
    )
    add(
        "course (the lesson 3 text)",
        "DGX Spark CPU matvec (measured by the course)",
        published("timing.matvec_gbps"),
        "the course's run on its machine and model",
    )
    return rows, notes


def ceilings(accounts: Sequence[Accounting], bw_rows: Sequence[Mapping]) -> list[dict]:
    """decode_ceilings.csv: tokens/s ceiling = bandwidth / bytes per token, per model and bandwidth."""
    out = []
    for acc in accounts:
        b = acc.summary["bytes_per_token"]
        for bw in bw_rows:
            g = bw["gbps"]
            tps = g * GB / b if g and b else None
            out.append(
                {
                    "model": acc.label,
                    "bytes_per_token": b,
                    "bandwidth": bw["bandwidth"],
                    "source": bw["source"],
                    "gbps": g,
                    "tokens_per_s_ceiling": tps,
                    "ms_per_token_floor": 1e3 / tps if tps else None,
                    "note": bw["note"],
                }
            )
    return out


# --- 3. the roofline -----------------------------------------------------------------------------

ROOFLINE_COLUMNS = (
    "device",
    "dtype",
    "op",
    "n",
    "flops",
    "bytes",
    "intensity",
    "gflops",
    "median_s",
    "noisy",
    "derived",
)
# The timing sweep's dtype names -> bytes per element, from gguf-py's table (configs.type_bytes).
ITEMSIZE = {
    name: configs.type_bytes(ggml, 1)
    for name, ggml in (("fp32", "F32"), ("float32", "F32"), ("bf16", "BF16"), ("fp16", "F16"))
}


def roofline_points(sweep: Sequence[Mapping], device: str) -> tuple[list[dict], list[str]]:
    """One point per row of a timing sweep: (arithmetic intensity, achieved GFLOP/s).

    intensity = flops / bytes with the timing job's counting (bytes = weights + X read + Y written).
    A missing flops or bytes column is worked out from rows, cols, n and the item size, a missing
    gflops from flops / median_s; `derived` names what was worked out, and notes say so. A row that
    cannot be placed is left out, with a note.
    """
    notes: list[str] = []
    if not sweep:
        return [], notes
    have = set(sweep[0])
    for col in ("flops", "bytes", "gflops"):
        if col not in have:
            notes.append(f"{device} sweep.csv has no column {col!r}")
    points = []
    for raw in sweep:
        n, rows, cols = (number(raw.get(k)) for k in ("n", "rows", "cols"))
        dtype = raw.get("dtype") or "fp32"
        itemsize = number(raw.get("itemsize")) or ITEMSIZE.get(str(dtype).lower())
        flops, nbytes, gflops, median = (number(raw.get(k)) for k in ("flops", "bytes", "gflops", "median_s"))
        derived = []
        if flops is None and None not in (n, rows, cols):
            flops, derived = 2 * rows * cols * n, derived + ["flops"]
        if nbytes is None and None not in (n, rows, cols, itemsize):
            nbytes, derived = (rows * cols + cols * n + rows * n) * itemsize, derived + ["bytes"]
        if gflops is None and flops and median:
            gflops, derived = flops / median / 1e9, derived + ["gflops"]
        if not (flops and nbytes and gflops):
            notes.append(f"{device} sweep row n={raw.get('n')!r} ({dtype}): not enough columns to place it")
            continue
        points.append(
            {
                "device": device,
                "dtype": dtype,
                "op": raw.get("op") or ("matvec" if n == 1 else "matmul"),
                "n": int(n) if n is not None else None,
                "flops": flops,
                "bytes": nbytes,
                "intensity": flops / nbytes,
                "gflops": gflops,
                "median_s": median,
                "noisy": {"true": True, "false": False}.get(str(raw.get("noisy")).strip().lower()),
                "derived": " ".join(derived),
            }
        )
    points.sort(key=lambda p: (p["dtype"], p["n"] or 0))
    if any(p["derived"] for p in points):
        notes.append(f"{device}: some roofline values worked out from other columns (see 'derived')")
    return points, notes


def roofs(points: Sequence[Mapping], bandwidth_gbps) -> dict:
    """The two roofs of one device: measured bandwidth (sloped) and the sweep's best GFLOP/s (flat)."""
    best = max(points, key=lambda p: p["gflops"], default=None)
    bw = number(bandwidth_gbps)
    peak = best["gflops"] if best else None
    return {
        "bandwidth_gbps": bw,
        "peak_gflops": peak,  # the best the sweep reached: a measured peak, not a datasheet number
        "peak_at_n": best["n"] if best else None,
        "peak_dtype": best["dtype"] if best else None,
        "ridge_intensity": peak / bw if peak and bw else None,  # FLOPs/byte where the two roofs meet
    }


def roofline_ceiling(summary: Mapping, rf: Mapping) -> dict:
    """Tokens/s allowed by each roof for one model's decode step, and which roof is lower.

    memory: bandwidth / bytes per token; compute: measured peak / FLOPs per token. The lower one
    binds. 'memory' means the token waits for bytes, not for arithmetic.
    """
    b, f = summary["bytes_per_token"], summary["decode_flops_per_token"]
    mem = rf["bandwidth_gbps"] * GB / b if rf.get("bandwidth_gbps") and b else None
    comp = rf["peak_gflops"] * 1e9 / f if rf.get("peak_gflops") and f else None
    bound = None if mem is None or comp is None else ("memory" if mem <= comp else "compute")
    return {
        "memory_ceiling_tps": mem,
        "compute_ceiling_tps": comp,
        "bound": bound,
        "compute_over_memory_ceiling": comp / mem if mem and comp else None,
    }


def bound_table(accounts: Sequence[Accounting], all_roofs: Mapping[str, Mapping]) -> list[dict]:
    """Per device and model: decode's intensity at batch 1 against the ridge, both ceilings, which binds."""
    rows = []
    for dev, rf in all_roofs.items():
        for acc in accounts:
            c = roofline_ceiling(acc.summary, rf)
            rows.append(
                {
                    "device": dev,
                    "model": acc.label,
                    "decode FLOPs/byte": acc.summary["decode_intensity"],
                    "ridge FLOPs/byte": rf["ridge_intensity"],
                    "memory ceiling tok/s": c["memory_ceiling_tps"],
                    "compute ceiling tok/s": c["compute_ceiling_tps"],
                    "bound": c["bound"],
                }
            )
    return rows


def flops_per_weight_n1(sweep: Sequence[Mapping], points: Sequence[Mapping]) -> float | None:
    """FLOPs the timing job counted for its N = 1 row, per weight of the matrix (rows x cols)."""
    p1 = next((p for p in points if p["n"] == 1 and str(p["dtype"]).lower() in ("fp32", "float32")), None)
    raw = next((r for r in sweep if number(r.get("n")) == 1), None)
    if p1 is None or raw is None:
        return None
    rows, cols = number(raw.get("rows")), number(raw.get("cols"))
    return p1["flops"] / (rows * cols) if rows and cols else None


def point_metrics(points: Sequence[Mapping], prefix: str) -> dict:
    """Counts the course quotes from the sweep: FLOPs per weight at N = 1, the work at N = 256 over N = 1."""
    fp32 = [p for p in points if str(p["dtype"]).lower() in ("fp32", "float32")] or list(points)
    by_n = {p["n"]: p for p in fp32}
    p1, p256 = by_n.get(1), by_n.get(256)
    out = {
        f"{prefix}_matvec_intensity": p1["intensity"] if p1 else None,
        f"{prefix}_matvec_gflops": p1["gflops"] if p1 else None,
        f"{prefix}_work_256_over_1": p256["flops"] / p1["flops"] if p1 and p256 else None,
    }
    return out


# --- 4. the whole model, timed: decode at batch 1, prefill of N tokens ---------------------------
#
# The timing_decode job ran the project's own NumPy decoder (and llama.cpp where installed) on the
# whole model and measured a STREAM copy in the same job. Its decode.json holds the measured
# tokens/s and the bytes a token reads; prefill.csv holds tokens/s for N tokens in one pass.

ENGINE, LLAMA_CPP = "bytesup", "llama.cpp"  # the `engine` column of prefill.csv
WHOLE_MODEL_COLUMNS = (
    "engine",
    "phase",
    "n",
    "tokens_per_s",
    "bytes_per_pass",
    "flops_per_pass",
    "intensity",
    "gflops",
    "gbps",
    "speedup_over_n1",
    "growth_vs_proportional",
    "fraction_of_sweep_peak",
    "noisy",
)
# The keys this lesson takes from decode.json for each engine (None in metrics.json when not measured).
DECODE_KEYS = (
    "decode_tokens_per_s",
    "decode_bytes_per_token",
    "decode_ceiling_tokens_per_s",
    "decode_fraction_of_ceiling",
    "decode_gbps",
)


def _prefill_by_n(rows: Sequence[Mapping], engine: str, fallback: Mapping | None) -> dict[int, dict]:
    """N -> {tokens_per_s, gflops, median_s, noisy} of one engine, from prefill.csv (else decode.json's maps)."""
    out = {}
    for r in rows:
        n, tps = number(r.get("n")), number(r.get("tokens_per_s"))
        if (r.get("engine") or ENGINE) == engine and n and tps:
            out[int(n)] = {
                "tokens_per_s": tps,
                "gflops": number(r.get("gflops")),
                "median_s": number(r.get("median_s")),
                "noisy": {"true": True, "false": False}.get(str(r.get("noisy")).strip().lower()),
            }
    if not out and isinstance(fallback, Mapping):  # an older prefill.csv: the summary's own maps
        for n, tps in (fallback.get("prefill_tokens_per_s") or {}).items():
            g = (fallback.get("prefill_gflops") or {}).get(n)
            if number(tps):
                out[int(n)] = {"tokens_per_s": number(tps), "gflops": number(g), "median_s": None, "noisy": None}
    return dict(sorted(out.items()))


def measured_bound(tps: float | None, bytes_per_token, copy_gbps, prefill: Mapping[int, Mapping]) -> dict:
    """Which limit decode at batch 1 meets, read from the measurements alone.

    A pass of N tokens reads the weights once and does N tokens' arithmetic, so its seconds per
    token are about  memory_floor / N + arithmetic  with
        memory_floor = bytes per token / STREAM copy bandwidth   (the ceiling's own time)
        arithmetic   = seconds per token at the largest N - memory_floor / N   (what batching cannot share)
    Decode (N = 1) is memory-bound when memory_floor >= arithmetic; the two are equal at
    N = memory_floor / arithmetic (`crossover_n`), where prefill stops growing in proportion to N.
    (memory_floor + arithmetic) x decode tokens/s is the share of a decode step the two explain;
    what is left is per-step overhead (Python, small operations, other processes on the CPUs).
    """
    out = {
        "memory_floor_ms": None,
        "arithmetic_ms_per_token": None,
        "bound": None,
        "crossover_n": None,
        "largest_n": None,
        "memory_share_of_decode_time": None,
        "explained_share_of_decode_time": None,
    }
    b, copy = number(bytes_per_token), number(copy_gbps)
    if not (b and copy):
        return out
    mem = b / (copy * GB)
    out["memory_floor_ms"] = 1e3 * mem
    if tps:
        out["memory_share_of_decode_time"] = mem * tps  # memory floor / seconds per decoded token
    if not prefill:
        return out
    n = max(prefill)
    arith = 1 / prefill[n]["tokens_per_s"] - mem / n
    out["largest_n"] = n
    if arith <= 0:  # the largest N ran at the memory roof: arithmetic not seen
        out["bound"] = "memory"
        return out
    out.update(
        arithmetic_ms_per_token=1e3 * arith, bound="memory" if mem >= arith else "arithmetic", crossover_n=mem / arith
    )
    if tps:  # how much of a measured decode step the two terms account for; the rest is overhead
        out["explained_share_of_decode_time"] = (mem + arith) * tps
    return out


def whole_model_points(
    engine: str, tps, bytes_per_token, flops_per_token, prefill: Mapping[int, Mapping], peak_gflops=None
) -> list[dict]:
    """whole_model_timing.csv rows of one engine: decode, then prefill by N, each as a roofline point.

    decode:  intensity = FLOPs per token / bytes per token; GFLOP/s = FLOPs per token x tokens/s
    prefill: a pass of N tokens reads the weights once: intensity = FLOPs of the pass / bytes per
             token (KV cache and activations left out); GFLOP/s as the timing job counted it.
    """
    b, f = number(bytes_per_token), number(flops_per_token)
    peak = number(peak_gflops)
    rows = []
    if tps and b and f:
        g = f * tps / 1e9
        rows.append(
            {
                "engine": engine,
                "phase": "decode",
                "n": 1,
                "tokens_per_s": tps,
                "bytes_per_pass": int(b),
                "flops_per_pass": f,
                "intensity": f / b,
                "gflops": g,
                "gbps": b * tps / GB,
                "speedup_over_n1": 1.0,
                "growth_vs_proportional": 1.0,
                "fraction_of_sweep_peak": g / peak if peak else None,
                "noisy": None,
            }
        )
    first = prefill.get(min(prefill)) if prefill else None
    for n, p in prefill.items():
        t = p["tokens_per_s"]
        g = p["gflops"]
        flops = g * 1e9 * n / t if g else (f * n if f else None)  # FLOPs of the pass of N tokens
        speedup = t / first["tokens_per_s"] if first else None
        rows.append(
            {
                "engine": engine,
                "phase": "prefill",
                "n": n,
                "tokens_per_s": t,
                "bytes_per_pass": int(b) if b else None,
                "flops_per_pass": flops,
                "intensity": flops / b if flops and b else None,
                "gflops": g,
                "gbps": b * t / n / GB if b else None,
                "speedup_over_n1": speedup,
                "growth_vs_proportional": speedup / (n / min(prefill)) if speedup else None,
                "fraction_of_sweep_peak": g / peak if g and peak else None,
                "noisy": p["noisy"],
            }
        )
    return rows


def _engine_metrics(
    prefix: str, record: Mapping, prefill: Mapping[int, Mapping], copy_gbps, flops_per_token, peak_gflops
) -> dict:
    """One engine's numbers: decode.json's as written, then what follows from them."""
    m = {f"{prefix}{k}": number(record.get(k)) for k in DECODE_KEYS}
    b = m[f"{prefix}decode_bytes_per_token"]
    m[f"{prefix}decode_bytes_per_token"] = int(b) if b is not None else None
    tps = m[f"{prefix}decode_tokens_per_s"]
    f = number(flops_per_token)
    m[f"{prefix}decode_gflops"] = f * tps / 1e9 if f and tps else None
    m[f"{prefix}decode_intensity"] = f / b if f and b else None  # FLOPs per byte of weights at batch 1
    gbps = m[f"{prefix}decode_gbps"]
    m[f"{prefix}decode_gbps_over_stream_copy"] = gbps / copy_gbps if gbps and copy_gbps else None
    m[f"{prefix}prefill_tokens_per_s"] = {str(n): p["tokens_per_s"] for n, p in prefill.items()}
    m[f"{prefix}prefill_gflops"] = {str(n): p["gflops"] for n, p in prefill.items()}
    best = max(prefill, key=lambda n: prefill[n]["tokens_per_s"]) if prefill else None
    m[f"{prefix}prefill_best_n"] = best
    m[f"{prefix}prefill_best_tokens_per_s"] = prefill[best]["tokens_per_s"] if best else None
    m[f"{prefix}prefill_best_over_decode"] = prefill[best]["tokens_per_s"] / tps if best and tps else None
    peak = number(peak_gflops)
    m[f"{prefix}prefill_best_gflops_fraction_of_sweep_peak"] = (
        prefill[best]["gflops"] / peak if best and peak and prefill[best]["gflops"] else None
    )
    bound = measured_bound(tps, b, copy_gbps, prefill)
    m.update({f"{prefix}decode_{k}": v for k, v in bound.items()})
    return m


def decode_metrics(
    decode: Mapping | None, prefill_rows: Sequence[Mapping] | None, peak_gflops=None
) -> tuple[dict, list[dict], list[str]]:
    """(metrics, whole_model_timing rows, notes) from decode.json and prefill.csv.

    A skipped record (an architecture the forward pass does not follow) or a missing one leaves
    every measured key None and says why in `decode_skipped`; nothing is made up.
    """
    decode, prefill_rows = dict(decode or {}), list(prefill_rows or [])
    status = decode.get("status") or "missing"
    skipped = (
        decode.get("skipped")
        if status == "skipped"
        else (None if status == "measured" else "no decode.json: the timing_decode job did not run")
    )
    measured = status == "measured"
    copy = number(decode.get("stream_copy_gbps")) if measured else None
    flops = number(decode.get("decode_flops_per_token")) if measured else None
    ours = _prefill_by_n(prefill_rows, ENGINE, decode) if measured else {}
    m = {
        "decode_status": status,
        "decode_skipped": skipped,
        "decode_engine": decode.get("engine") if measured else None,
        "decode_weights": decode.get("weights") if measured else None,
        "decode_threads": decode.get("threads") if measured else None,
        "decode_stream_copy_gbps": copy,
        "decode_flops_per_token": flops,
    }
    m.update(_engine_metrics("", decode if measured else {}, ours, copy, flops, peak_gflops))
    target = decode.get("target") if measured and isinstance(decode.get("target"), Mapping) else {}
    m["decode_target_goal"] = number(target.get("goal"))
    m["decode_target_met"] = target.get("met") if measured else None
    m["decode_target_applies"] = target.get("applies") if measured else None
    m["decode_noisy"] = decode.get("decode_noisy") if measured else None
    m["decode_rel_iqr"] = number(decode.get("decode_rel_iqr")) if measured else None
    m["decode_machine_shared"] = decode.get("machine_shared") if measured else None
    m["decode_other_processes_cpu_fraction"] = number(decode.get("other_processes_cpu_fraction")) if measured else None

    llama = decode.get("llama_cpp") if measured and isinstance(decode.get("llama_cpp"), Mapping) else {}
    l_measured = bool(llama) and "skipped" not in llama
    m["llama_cpp_status"] = "measured" if l_measured else ("skipped" if llama else None)
    m["llama_cpp_skipped"] = llama.get("skipped")
    m["llama_cpp_version"] = llama.get("version")
    theirs = (
        _prefill_by_n(prefill_rows, LLAMA_CPP, {"prefill_tokens_per_s": llama.get("prefill_tokens_per_s")})
        if l_measured
        else {}
    )
    m.update(_engine_metrics("llama_cpp_", llama if l_measured else {}, theirs, copy, flops, None))
    ours_tps, theirs_tps = m["decode_tokens_per_s"], m["llama_cpp_decode_tokens_per_s"]
    m["llama_cpp_over_bytesup_decode"] = theirs_tps / ours_tps if ours_tps and theirs_tps else None

    rows = whole_model_points(ENGINE, ours_tps, m["decode_bytes_per_token"], flops, ours, peak_gflops)
    rows += whole_model_points(LLAMA_CPP, theirs_tps, m["llama_cpp_decode_bytes_per_token"], flops, theirs, peak_gflops)
    notes = [] if measured else [f"whole-model timing not measured: {skipped}"]
    if measured and m["decode_machine_shared"]:
        notes.append(
            "whole-model timing ran while other processes used the CPUs (machine_shared): "
            "its tokens/s are below this machine's"
        )
    return m, rows, notes


def course_points() -> list[dict]:
    """The course's DGX Spark CPU on the roofline (the lesson 3 text): the specimen's ffn_gate, 11008 x 4096
    in float32, streamed at 128 GB/s at N = 1, and N = 256 taking 20 times as long. Bytes count the
    weights only; every number comes from the claims file (published), none is measured here."""
    a = DEEPSEEK_CODER_6_7B
    weights = a.d_ff * a.d_model
    wbytes = type_bytes("F32", weights)
    t1 = wbytes / (published("timing.matvec_gbps") * GB)  # seconds for one token
    out = []
    for n, t in ((1, t1), (256, published("timing.matmul_ratio_256_over_1") * t1)):
        flops = 2 * weights * n
        out.append(
            {
                "device": "DGX Spark (course)",
                "n": n,
                "flops": flops,
                "bytes": wbytes,
                "intensity": flops / wbytes,
                "gflops": flops / t / 1e9,
                "median_s": t,
            }
        )
    return out


# --- the whole lesson ----------------------------------------------------------------------------


def _flat(prefix: str, summary: Mapping) -> dict:
    return {f"{prefix}_{k}": v for k, v in summary.items() if not isinstance(v, Mapping)}


def timing_metrics(cpu: Mapping, cpu_sweep: Sequence[Mapping], gpu: Mapping) -> dict:
    """The timing jobs' numbers this lesson uses, None where a key is missing (listed in timing_missing)."""
    missing = []
    out = {}
    for key in ("stream_copy_gbps", "matvec_cold_gbps", "matvec_warm_gbps", "matmul_ratio_256_over_1"):
        if key not in cpu:
            missing.append(f"cpu summary.json key {key!r}")
        out[f"timing_{key}"] = number(cpu.get(key))
    copy, mv = out["timing_stream_copy_gbps"], out["timing_matvec_cold_gbps"]
    out["timing_matvec_fraction_of_copy"] = mv / copy if mv and copy else None
    if out["timing_matmul_ratio_256_over_1"] is None:  # worked out from the sweep's medians if need be
        med = {int(number(r.get("n"))): number(r.get("median_s")) for r in cpu_sweep if number(r.get("n"))}
        if med.get(1) and med.get(256):
            out["timing_matmul_ratio_256_over_1"] = med[256] / med[1]
            missing.append("matmul_ratio_256_over_1 worked out from sweep.csv medians")
    machine = cpu.get("machine") if isinstance(cpu.get("machine"), Mapping) else {}
    out["timing_cpu_model"] = machine.get("cpu_model")
    llc = number(machine.get("llc_bytes"))
    out["timing_llc_bytes"] = int(llc) if llc else None
    out["timing_course_machine"] = course_machine(cpu)
    out["timing_noisy"] = [str(v) for v in cpu.get("noisy", [])] if isinstance(cpu.get("noisy"), list) else []
    out["timing_machine_shared"] = cpu.get("machine_shared")
    out["gpu_status"] = gpu.get("status") or "missing"
    out["gpu_skipped"] = gpu.get("skipped")
    out["gpu_stream_copy_gbps"] = number(gpu.get("stream_copy_gbps")) if gpu.get("status") == "measured" else None
    out["gpu_matvec_cold_gbps"] = number(gpu.get("matvec_cold_gbps")) if gpu.get("status") == "measured" else None
    gmachine = gpu.get("machine") if isinstance(gpu.get("machine"), Mapping) else {}
    out["gpu_name"] = gmachine.get("name")
    out["timing_missing"] = missing
    return out


def compute(
    metadata: Mapping,
    tensor_rows: Iterable[Mapping],
    *,
    timing_summary: Mapping | None = None,
    timing_sweep: Sequence[Mapping] | None = None,
    gpu_summary: Mapping | None = None,
    gpu_sweep: Sequence[Mapping] | None = None,
    decode_summary: Mapping | None = None,
    decode_prefill: Sequence[Mapping] | None = None,
    timing_notes: Iterable[str] = (),
    model: str = "this model",
) -> dict:
    """Every number of the lesson as a flat dict (what metrics.json holds); `run` also keeps the tables."""
    return run(
        metadata,
        tensor_rows,
        timing_summary=timing_summary,
        timing_sweep=timing_sweep,
        gpu_summary=gpu_summary,
        gpu_sweep=gpu_sweep,
        decode_summary=decode_summary,
        decode_prefill=decode_prefill,
        timing_notes=timing_notes,
        model=model,
    ).metrics


@dataclass
class Run:
    metrics: dict
    accounts: list[Accounting]
    groups: list[dict]
    ceilings: list[dict]
    points: list[dict]
    roofs: dict  # device -> roofs()
    bandwidths: list[dict]
    bounds: list[dict]  # bound_table(): which roof binds decode, per device and model
    whole_model: list[dict]  # whole_model_points(): the decoders' decode and prefill, measured
    course_points: list[dict]  # the course's DGX Spark CPU measurements, as roofline points


def run(
    metadata: Mapping,
    tensor_rows: Iterable[Mapping],
    *,
    timing_summary: Mapping | None = None,
    timing_sweep: Sequence[Mapping] | None = None,
    gpu_summary: Mapping | None = None,
    gpu_sweep: Sequence[Mapping] | None = None,
    decode_summary: Mapping | None = None,
    decode_prefill: Sequence[Mapping] | None = None,
    timing_notes: Iterable[str] = (),
    model: str = "this model",
) -> Run:
    cpu, gpu = dict(timing_summary or {}), dict(gpu_summary or {})
    cpu_sweep, gpu_sweep = list(timing_sweep or []), list(gpu_sweep or [])
    tensor_rows = list(tensor_rows)
    d = dims(metadata)
    m: dict = {
        "architecture": d["architecture"],
        "embedding_length": d["embedding_length"],
        "feed_forward_length": d["feed_forward_length"],
        "block_count": d["block_count"],
    }

    # 1. bytes per token: this model from its file's table, two more from published configurations
    mine = account(MODEL_KEY, model, "tensors.csv of this run's GGUF", tensor_rows)
    others = [account_layout(layout) for layout in PUBLISHED_LAYOUTS]
    accounts = [mine, *others]
    for acc in accounts:
        m.update(_flat(acc.key, acc.summary))
    m["model_tied"] = any(r["read"].startswith("whole table") for r in mine.reads)
    m["model_tensor_count"] = len(tensor_rows)
    m["model_types"] = sorted({str(r["type"]) for r in tensor_rows})
    for layout in PUBLISHED_LAYOUTS:
        m[f"{layout.key}_kv_cache_bytes_per_context_token"] = kv_cache_bytes_per_context_token(layout.arch)
    m["model_kv_cache_bytes_per_context_token"] = model_kv_bytes_per_context_token(d)
    # cross-checks: Llama-3-8B against param_counts (which counts no lookup row), the specimen's
    # tensors as the file would list them against this run's table when the run is the specimen
    m["llama3_8b_param_counts_streamed"] = pc.count(configs.LLAMA3_8B)["streamed_params"]
    m["llama3_8b_matches_param_counts"] = (
        m["llama3_8b_bf16_weights_read"] - configs.LLAMA3_8B.d_model == m["llama3_8b_param_counts_streamed"]
    )
    m["model_bytes_equal_specimen_config"] = mine.summary["bytes_per_token"] == others[0].summary["bytes_per_token"]

    # the course's own arithmetic (the lesson 3 text): the specimen's ffn_gate in float32, 128 of 273 GB/s
    a = DEEPSEEK_CODER_6_7B
    m["course_ffn_gate_fp32_mb"] = type_bytes("F32", a.d_ff * a.d_model) / 1e6
    m["course_matvec_fraction_of_peak"] = published("timing.matvec_gbps") / published("timing.peak_gbps")
    gate = next((r for r in tensor_rows if r["name"] == "blk.0.ffn_gate.weight"), None)
    m["model_ffn_gate_fp32_mb"] = type_bytes("F32", math.prod(parse_shape(gate["shape"]))) / 1e6 if gate else None

    # 2. ceilings from bandwidth alone
    m.update(timing_metrics(cpu, cpu_sweep, gpu))
    bw_rows, bw_notes = bandwidths(cpu, gpu)
    ceil = ceilings(accounts, bw_rows)
    for acc in accounts:
        for key, what in (("stream_copy", "CPU STREAM copy"), ("matvec_cold", "CPU matvec, cold (N = 1)")):
            row = next(c for c in ceil if c["model"] == acc.label and c["bandwidth"] == what)
            m[f"{acc.key}_ceiling_{key}_tps"] = row["tokens_per_s_ceiling"]
        gpu_row = next((c for c in ceil if c["model"] == acc.label and c["bandwidth"].startswith("GPU copy")), None)
        m[f"{acc.key}_ceiling_gpu_copy_tps"] = gpu_row["tokens_per_s_ceiling"] if gpu_row else None
        for key, cid in (("course_peak", "timing.peak_gbps"), ("course_matvec", "timing.matvec_gbps")):
            m[f"{acc.key}_ceiling_{key}_tps"] = published(cid) * GB / acc.summary["bytes_per_token"]
    llc = m["timing_llc_bytes"]
    m["model_bytes_over_llc"] = mine.summary["bytes_per_token"] / llc if llc else None

    # 3. roofline: the sweep's points under the measured roofs
    cpu_points, cpu_notes = roofline_points(cpu_sweep, "cpu")
    gpu_points, gpu_notes = roofline_points(gpu_sweep, "gpu") if gpu.get("status") == "measured" else ([], [])
    all_roofs = {"cpu": roofs(cpu_points, cpu.get("stream_copy_gbps"))}
    if gpu.get("status") == "measured":
        all_roofs["gpu"] = roofs(gpu_points, gpu.get("stream_copy_gbps"))
        if not gpu_points:
            gpu_notes.append("GPU measured, but no GPU sweep rows to place on the roofline")
    for dev, rf in all_roofs.items():
        m.update({f"roofline_{dev}_{k}": v for k, v in rf.items()})
        # decode at batch 1 under both roofs: which one is lower for each model?
        for acc in accounts:
            ceiling = roofline_ceiling(acc.summary, rf)
            m.update({f"{acc.key}_{dev}_{k}": v for k, v in ceiling.items()})
    m.update(point_metrics(cpu_points, "sweep"))
    m["sweep_flops_per_weight_n1"] = flops_per_weight_n1(cpu_sweep, cpu_points)
    m["roofline_points"] = len(cpu_points) + len(gpu_points)

    # 4. the whole model, timed: the decoders at batch 1 and N tokens at once, against the same ceiling
    dm, whole, decode_notes = decode_metrics(decode_summary, decode_prefill, all_roofs["cpu"]["peak_gflops"])
    m.update(dm)
    # the decoder's float32 bytes against this lesson's own count of the weights a token reads
    m["model_float32_bytes_per_token"] = type_bytes("F32", mine.summary["weights_read"])
    course = course_points()
    m["course_spark_matvec_gflops"], m["course_spark_n256_gflops"] = (p["gflops"] for p in course)
    m["notes"] = [*timing_notes, *bw_notes, *cpu_notes, *gpu_notes, *decode_notes]
    return Run(
        m,
        accounts,
        group_table(accounts),
        ceil,
        cpu_points + gpu_points,
        all_roofs,
        bw_rows,
        bound_table(accounts, all_roofs),
        whole,
        course,
    )


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """Check the lesson's published claims against this run's metrics."""
    extra = ["dgx-spark"] if metrics.get("timing_course_machine") else []
    context = claims_mod.run_context(model, sha256, metadata, extra=extra)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- figures -------------------------------------------------------------------------------------


def plot_bytes_per_token(accounts: Sequence[Accounting], title: str = ""):
    """Where each model's bytes per token go: one 100 % bar per model, its total written beside it."""
    fig, ax = figure()
    colours = ["C0", "C1", "C2", "C4", "0.6"]
    for i, acc in enumerate(accounts):
        total = acc.summary["bytes_per_token"]
        left = 0.0
        for (group, b), colour in zip(acc.summary["bytes_by_group"].items(), colours):
            share = b / total
            ax.barh(i, share, left=left, color=colour, label=group if i == 0 else None)
            if share > 0.06:
                ax.text(left + share / 2, i, f"{100 * share:.0f}%", ha="center", va="center", fontsize=8)
            left += share
        ax.text(1.01, i, f"{total / GB:.3g} GB" if total >= GB else f"{total / 1e6:.3g} MB", va="center", fontsize=8)
    ax.set_yticks(range(len(accounts)), [a.label for a in accounts], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.14)
    ax.set_xlabel("share of the bytes read per generated token (batch 1, weights only)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=7, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


FP32_MATVEC_INTENSITY = 2 / configs.type_bytes("F32", 1)  # FLOPs per byte of a float32 matvec: 2 per 4-byte weight


def decode_markers(accounts: Sequence[Accounting]) -> list[tuple[str, float]]:
    """Where batch-1 decode sits on the roofline: fp32 weights (the sweep's), then each model's mix."""
    return [("fp32", FP32_MATVEC_INTENSITY)] + [
        (a.label, a.summary["decode_intensity"]) for a in accounts if a.summary["decode_intensity"]
    ]


WHOLE_MODEL_STYLE = {ENGINE: ("C2", "our NumPy decoder"), LLAMA_CPP: ("C1", "llama.cpp")}


def plot_roofline(
    points: Sequence[Mapping],
    all_roofs: Mapping[str, Mapping],
    warm_gbps=None,
    markers: Sequence[tuple[str, float]] = (("fp32", FP32_MATVEC_INTENSITY),),
    title: str = "",
    whole_model: Sequence[Mapping] = (),
    course: Sequence[Mapping] = (),
    course_gbps=None,
):
    """Achieved GFLOP/s against FLOPs per byte, log-log, under each device's two measured roofs.

    `markers` are (label, intensity) of batch-1 decode, drawn as dotted verticals (see decode_markers).
    `whole_model`: whole_model_points() rows (decode a star, prefill by N a line of diamonds);
    `course`: course_points(), under a sloped roof at `course_gbps` (the DGX Spark's quoted peak).
    """
    import numpy as np

    fig, ax = figure()
    whole_model = [w for w in whole_model if w.get("intensity") and w.get("gflops")]
    xs = (
        [p["intensity"] for p in points]
        + [v for _, v in markers]
        + [w["intensity"] for w in whole_model]
        + [c["intensity"] for c in course]
    )
    lo, hi = min(xs + [0.1]) / 2, max(xs + [10.0]) * 2
    x = np.geomspace(lo, hi, 200)
    styles = {"cpu": ("C0", "o"), "gpu": ("C3", "s")}
    for dev, rf in all_roofs.items():
        colour, marker = styles.get(dev, ("C2", "^"))
        bw, peak = rf["bandwidth_gbps"], rf["peak_gflops"]
        if bw:
            roof = bw * x if not peak else np.minimum(bw * x, peak)
            ax.plot(x, roof, color=colour, lw=1.5, label=f"{dev}: copy {bw:.0f} GB/s (sloped roof)")
        if peak:
            ax.axhline(
                peak,
                color=colour,
                lw=0.8,
                ls="--",
                label=f"{dev}: peak {peak:.0f} GFLOP/s (best of sweep, N = {rf['peak_at_n']})",
            )
        for dtype in sorted({p["dtype"] for p in points if p["device"] == dev}):
            mine = [p for p in points if p["device"] == dev and p["dtype"] == dtype]
            filled = dtype in ("fp32", "float32")
            ax.plot(
                [p["intensity"] for p in mine],
                [p["gflops"] for p in mine],
                marker,
                color=colour,
                mfc=colour if filled else "white",
                ls="none",
                label=f"{dev} {dtype} sweep: one point per N",
            )
            for p in mine:
                if p["n"] in (1, 256) or (p["n"] and p["n"] == max(q["n"] for q in mine)):
                    ax.annotate(
                        f"N={p['n']}",
                        (p["intensity"], p["gflops"]),
                        textcoords="offset points",
                        xytext=(4, -10),
                        fontsize=7,
                    )
    if course_gbps:
        ax.plot(
            x,
            course_gbps * x,
            color="0.45",
            lw=1.0,
            ls="-.",
            label=f"DGX Spark: quoted {course_gbps:.0f} GB/s (course)",
        )
    if course:
        ax.plot(
            [c["intensity"] for c in course],
            [c["gflops"] for c in course],
            "P",
            color="0.45",
            ls="none",
            label="DGX Spark CPU (course): ffn_gate fp32, N = 1, 256",
        )
        for c in course:
            ax.annotate(
                f"N={c['n']}",
                (c["intensity"], c["gflops"]),
                textcoords="offset points",
                xytext=(-30, 4),
                fontsize=7,
                color="0.35",
            )
    for engine, (colour, name) in WHOLE_MODEL_STYLE.items():
        short = {ENGINE: "whole model, ours"}.get(engine, f"whole model, {name}")
        dec = [w for w in whole_model if w["engine"] == engine and w["phase"] == "decode"]
        pre = [w for w in whole_model if w["engine"] == engine and w["phase"] == "prefill"]
        if pre:
            ax.plot(
                [w["intensity"] for w in pre],
                [w["gflops"] for w in pre],
                "D-",
                color=colour,
                ms=4,
                lw=0.8,
                label=f"{short}: prefill, one point per N",
            )
            last = pre[-1]
            ax.annotate(
                f"N={last['n']}",
                (last["intensity"], last["gflops"]),
                textcoords="offset points",
                xytext=(4, 2),
                fontsize=7,
                color=colour,
            )
        if dec:
            ax.plot(
                [dec[0]["intensity"]],
                [dec[0]["gflops"]],
                "*",
                color=colour,
                ms=12,
                mec="k",
                mew=0.5,
                label=f"{short}: decode, {dec[0]['tokens_per_s']:.1f} tokens/s",
            )
    if warm_gbps:
        x_warm = FP32_MATVEC_INTENSITY
        ax.plot(
            [x_warm], [x_warm * warm_gbps], "x", color="C0", label=f"cpu matvec, warm (in cache): {warm_gbps:.0f} GB/s"
        )
    for name, v in markers:
        ax.axvline(v, color="0.7", lw=0.6, ls=":")
        ax.text(
            v,
            0.02,
            f"decode {name} ",
            transform=ax.get_xaxis_transform(),
            rotation=90,
            fontsize=7,
            color="0.4",
            va="bottom",
            ha="right",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity, FLOPs per byte moved")
    ax.set_ylabel("achieved GFLOP/s")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_prefill(
    whole_model: Sequence[Mapping], ceiling_tps=None, peak_gflops=None, llama_ceiling_tps=None, title: str = ""
):
    """Prefill tokens/s against N, log-log, under the two limits of our decoder.

    memory: N x the decode ceiling (a pass reads the weights once for N tokens; it grows in
    proportion to N); arithmetic: the sweep's measured peak / FLOPs per token at that N. Measured
    points follow the lower of the two; where they stop growing with N, arithmetic has taken over.
    """
    import numpy as np

    fig, ax = figure()
    pre = [w for w in whole_model if w["phase"] == "prefill"]
    ns = sorted({w["n"] for w in pre}) or [1]
    x = np.geomspace(min(ns), max(ns), 100)
    for engine, (colour, name) in WHOLE_MODEL_STYLE.items():
        mine = [w for w in pre if w["engine"] == engine]
        if mine:
            ax.plot(
                [w["n"] for w in mine],
                [w["tokens_per_s"] for w in mine],
                "D-",
                color=colour,
                ms=5,
                label=f"{name}: measured prefill",
            )
        dec = next((w for w in whole_model if w["engine"] == engine and w["phase"] == "decode"), None)
        if dec:
            ax.plot(
                [1],
                [dec["tokens_per_s"]],
                "*",
                color=colour,
                ms=12,
                mec="k",
                mew=0.5,
                label=f"{name}: decode, one token per pass with the KV cache",
            )
    if ceiling_tps:
        ax.plot(
            x,
            ceiling_tps * x,
            color="C2",
            lw=1.2,
            ls="--",
            label=f"memory limit, ours: N x {ceiling_tps:.1f} tokens/s (STREAM copy / float32 bytes)",
        )
    if llama_ceiling_tps:
        ax.plot(
            x,
            llama_ceiling_tps * x,
            color="C1",
            lw=1.2,
            ls="--",
            label=f"memory limit, llama.cpp: N x {llama_ceiling_tps:.1f} tokens/s (copy / file bytes)",
        )
    ours = [w for w in pre if w["engine"] == ENGINE and w["flops_per_pass"]]
    if peak_gflops and ours:
        ax.plot(
            [w["n"] for w in ours],
            [peak_gflops * 1e9 * w["n"] / w["flops_per_pass"] for w in ours],
            color="C0",
            lw=1.2,
            ls=":",
            label=f"arithmetic limit: sweep's peak {peak_gflops:.0f} GFLOP/s / FLOPs per token",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N, tokens in one forward pass")
    ax.set_ylabel("tokens per second")
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=1, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig

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
gguf-py's GGML_QUANT_SIZES, through bytesup.gguf.sizes.type_bytes), which is what decode streams
when it dequantizes on the fly.

The lesson's parts, by concern: accounting (step 1), roofline (steps 2 and 3), whole_model (step 4)
and figures; this module holds the SPEC, the course's published numbers and ``run``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bytesup.gguf.sizes import parse_shape, type_bytes
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.decode_memory_bound.accounting import (
    GB,
    PUBLISHED_LAYOUTS,
    Accounting,
    account,
    account_layout,
    group_table,
    kv_cache_bytes_per_context_token,
    model_kv_layers,
)
from bytesup.lessons.decode_memory_bound.roofline import (
    bound_table,
    ceilings,
    flops_per_weight_n1,
    point_metrics,
    roofline_ceiling,
    roofline_points,
    roofs,
)
from bytesup.lessons.decode_memory_bound.whole_model import decode_metrics
from bytesup.lessons.ffn_walk import dims
from bytesup.lessons.spec import CAPSTONE, Headline, LessonSpec
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.model.configs import DEEPSEEK_CODER_6_7B, kv_cache_bytes
from bytesup.timing.ceiling import CONTEXT_4K, FLOAT32, STORED, tokens_per_s
from bytesup.timing.results import course_machine, number

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
            "decode_read_ceiling_gbps",
            "read ceiling, measured in the same job: the best of STREAM copy, a threaded sum, a dot and a large gemv stored by rows or by columns",
            unit="GB/s",
            fmt=".1f",
        ),
        Headline(
            "decode_ceiling_tokens_per_s",
            "its ceiling: that read ceiling / the bytes it reads per token",
            unit="tokens/s",
            fmt=".1f",
        ),
        Headline(
            "decode_fraction_of_read_ceiling",
            "fraction of the read ceiling reached (goal: 70 %)",
            fmt=".1%",
        ),
        Headline(
            "decode_products_fraction_of_read_ceiling",
            "the step's matrix-vector products alone, nothing between them: fraction of the read ceiling",
            fmt=".1%",
        ),
        Headline(
            "decode_products_share_of_step",
            "those products' share of a decode step's time (the rest: norms, rope, attention, Python)",
            fmt=".0%",
        ),
        Headline(
            "llama_cpp_f32_decode_tokens_per_s",
            "llama.cpp on a float32 copy of the same model: the same bytes, threads and minutes",
            unit="tokens/s",
            fmt=".1f",
        ),
        Headline(
            "decode_over_llama_cpp_f32", "our decoder's tokens/s over llama.cpp's on those bytes (goal: 0.9)", fmt=".2f"
        ),
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
            "llama_cpp_decode_fraction_of_read_ceiling",
            "llama.cpp: fraction of the quantized file's ceiling (the read ceiling / the file's bytes per token)",
            fmt=".1%",
        ),
        Headline(
            "decode_slowdown_at_longest_context",
            "decode at the longest context measured: how many times slower than with an empty cache",
            fmt=".2f",
        ),
        Headline(
            "decode_kv_visible_context",
            "context at which the KV cache is 10 % of the bytes our decoder reads per token",
            unit="tokens",
            fmt=",d",
        ),
        Headline(
            "deepseek_q8_0_kv_visible_context",
            "deepseek-coder-6.7b Q8_0 (F16 cache): context at which the KV cache is 10 % of the bytes",
            unit="tokens",
            fmt=",d",
        ),
        Headline(
            "decode_streamed_dequant_share",
            "a streamed decode step (weights dequantized at every step): dequantization's share of its time",
            fmt=".0%",
        ),
        Headline(
            "q8_0_product_fraction_of_read_ceiling",
            "the product that reads Q8_0 blocks directly (the specimen's FFN shape): fraction of the read ceiling",
            fmt=".1%",
        ),
        Headline(
            "deepseek_q8_0_tokens_per_s_q8_product",
            "deepseek-coder-6.7b Q8_0 decode if every product ran at that speed",
            unit="tokens/s",
            fmt=".2f",
        ),
        Headline("model_ffn_share_of_bytes", "FFN share of the bytes per token", fmt=".1%"),
        Headline("model_ceiling_stream_copy_tps", "tokens/s ceiling at STREAM copy bandwidth (as stored)", fmt=".0f"),
        Headline("model_ceiling_matvec_cold_tps", "tokens/s ceiling at cold matvec bandwidth (as stored)", fmt=".0f"),
        Headline(
            "model_ceiling_stream_copy_4k_tps",
            "the same ceiling with lesson 7's 4k tokens in the KV cache (as stored)",
            unit="tokens/s",
            fmt=".0f",
        ),
        Headline(
            "model_ceiling_stream_copy_float32_tps",
            "the same ceiling for float32 weights (what our decoder reads)",
            unit="tokens/s",
            fmt=".1f",
        ),
        Headline("deepseek_q8_0_bytes_per_token_gb", "deepseek-coder-6.7b Q8_0: bytes per token", unit="GB", fmt=".2f"),
        Headline(
            "deepseek_q8_0_ceiling_stream_copy_tps",
            "deepseek-coder-6.7b Q8_0: ceiling on this machine",
            unit="tokens/s",
            fmt=".2f",
        ),
        Headline(
            "deepseek_q8_0_ceiling_stream_copy_4k_tps",
            "deepseek-coder-6.7b Q8_0: ceiling on this machine at 4k context",
            unit="tokens/s",
            fmt=".2f",
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
MODEL_KEY = "model"  # this run's model


# --- 2. bandwidths and ceilings ------------------------------------------------------------------


def fmt(value, spec: str = ".1f", missing: str = "n/a") -> str:
    """A number for the notebook's prose, or `missing` when the run did not measure it."""
    return missing if value is None else format(value, spec)


def published(claim_id: str) -> float:
    """A number as the course prints it, read from this lesson's claims file (never retyped)."""
    return float(claims_mod.published_value(SPEC.id, claim_id))


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
    out["timing_read_ceiling_gbps"] = read = number(cpu.get("read_ceiling_gbps"))  # best of the read kernels
    out["timing_read_ceiling_kernel"] = cpu.get("read_ceiling_kernel")
    out["timing_matvec_fraction_of_read_ceiling"] = mv / read if mv and read else None
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
    # the KV cache at the context lesson 7 compares at (4k tokens), layer by layer: on a model with
    # sliding-window layers only the global ones hold the whole context
    kv_at = {}
    for layout in PUBLISHED_LAYOUTS:
        per_token = kv_cache_bytes_per_context_token(layout.arch)
        m[f"{layout.key}_kv_cache_bytes_per_context_token"] = per_token
        kv_at[layout.key] = per_token * CONTEXT_4K
    layers = model_kv_layers(metadata)
    windows = {w for _, w in layers if w is not None}
    m["model_kv_cache_bytes_per_context_token"] = sum(per for per, _ in layers)  # while every layer still grows
    m["model_sliding_window"] = min(windows) if windows else None
    m["model_kv_global_layers"] = sum(w is None for _, w in layers)
    kv_at[MODEL_KEY] = kv_cache_bytes(layers, CONTEXT_4K)
    m["kv_context_tokens"] = CONTEXT_4K
    for key, kv in kv_at.items():
        m[f"{key}_kv_cache_4k_bytes"] = kv
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
    m["course_matvec_gbps"], m["course_peak_gbps"] = published("timing.matvec_gbps"), published("timing.peak_gbps")
    m["course_matmul_ratio_256_over_1"] = published("timing.matmul_ratio_256_over_1")
    m["timing_ratio_tokens"] = int(published("matmul.work_256_over_1"))  # the N of "256 times the work"
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
            m[f"{acc.key}_ceiling_{key}_tps"] = tokens_per_s(published(cid), acc.summary["bytes_per_token"])
        # the same ceiling with lesson 7's 4k tokens of context in the cache (its fit table's number)
        m[f"{acc.key}_ceiling_stream_copy_4k_tps"] = tokens_per_s(
            m["timing_stream_copy_gbps"], acc.summary["bytes_per_token"], kv_at[acc.key]
        )
        m[f"{acc.key}_kv_4k_share_of_read"] = kv_at[acc.key] / (acc.summary["bytes_per_token"] + kv_at[acc.key])
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
    dm, whole, decode_notes = decode_metrics(
        decode_summary, decode_prefill, all_roofs["cpu"]["peak_gflops"], specimen=others[0].summary
    )
    m.update(dm)
    # the decoder's float32 bytes against this lesson's own count of the weights a token reads
    m["model_float32_bytes_per_token"] = type_bytes("F32", mine.summary["weights_read"])
    m["model_float32_over_stored"] = m["model_float32_bytes_per_token"] / mine.summary["bytes_per_token"]
    # a float32 decoder's ceiling at the timing job's copy bandwidth, the same function as the others
    m["model_ceiling_stream_copy_float32_tps"] = tokens_per_s(
        m["timing_stream_copy_gbps"], m["model_float32_bytes_per_token"]
    )
    m["ceiling_weights_stored"], m["ceiling_weights_float32"] = STORED, FLOAT32
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

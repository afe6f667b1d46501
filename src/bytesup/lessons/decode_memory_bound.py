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
     and a flat one (the best GFLOP/s the sweep reached: a measured peak, not a datasheet's).

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
from dataclasses import dataclass, replace


from bytesup import claims as claims_mod
from bytesup import param_counts as pc
from bytesup.model import configs
from bytesup.model.configs import DEEPSEEK_CODER_6_7B, kv_bytes_per_token, llama_tensor_shapes
from bytesup.lessons.spec import CAPSTONE, Headline, LessonSpec
from bytesup.lessons import LessonInputError, figure
from bytesup.ffn_walk import dims
from bytesup.timing_results import course_machine, read_timing  # noqa: F401  (read_timing: the notebook)

SPEC = LessonSpec(
    id='capstone_decode_is_memory_bound',
    title='Why LLM decode is memory-bound',
    kind=CAPSTONE,
    position=8,
    source=(
        'The capstone of the LLM Basics series'
    ),
    reads=('metadata_json', 'tensors_csv', 'timing_summary', 'timing_sweep', 'gpu_summary', 'gpu_sweep'),
    tables=('tensor_reads.csv', 'bytes_per_token.csv', 'decode_ceilings.csv', 'roofline_points.csv'),
    figures={
        'bytes_per_token.png': 'Bytes one generated token reads (batch 1, weights only), by tensor group: this model, deepseek-coder-6.7b Q8_0 and Llama-3-8B bf16',
        'roofline.png': "This run's timing sweep on a roofline: measured STREAM copy bandwidth (sloped roof) and the sweep's best GFLOP/s (flat roof, a measured peak)",
    },
    headlines=(
        Headline('model_bytes_per_token_gb', 'bytes read per generated token, this model', unit='GB', fmt='.4f'),
        Headline('model_ffn_share_of_bytes', 'FFN share of those bytes', fmt='.1%'),
        Headline('model_ceiling_stream_copy_tps', 'tokens/s ceiling at STREAM copy bandwidth', fmt='.0f'),
        Headline('model_ceiling_matvec_cold_tps', 'tokens/s ceiling at cold matvec bandwidth', fmt='.0f'),
        Headline('deepseek_q8_0_bytes_per_token_gb', 'deepseek-coder-6.7b Q8_0: bytes per token', unit='GB', fmt='.2f'),
        Headline('deepseek_q8_0_ceiling_stream_copy_tps', 'deepseek-coder-6.7b Q8_0: ceiling on this machine', unit='tokens/s', fmt='.1f'),
        Headline('deepseek_q8_0_ceiling_course_peak_tps', "deepseek-coder-6.7b Q8_0: ceiling at the DGX Spark's quoted peak", unit='tokens/s', fmt='.1f'),
        Headline('llama3_8b_bf16_bytes_per_token_gb', 'Llama-3-8B bf16: bytes per token', unit='GB', fmt='.2f'),
        Headline('llama3_8b_bf16_ffn_bytes_per_token_gb', 'Llama-3-8B bf16: FFN bytes per token', unit='GB', fmt='.2f'),
        Headline('roofline_cpu_ridge_intensity', 'CPU roofline ridge', unit='FLOP/byte', fmt='.2f'),
        Headline('roofline_cpu_peak_gflops', 'CPU measured peak', unit='GFLOP/s', fmt='.0f'),
        Headline('timing_matmul_ratio_256_over_1', 'time for 256 tokens / time for 1', fmt='.1f'),
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


def parse_shape(shape) -> tuple[int, ...]:
    """tensors.csv writes shapes in numpy order as '49152x576'; tuples and lists pass through."""
    if isinstance(shape, str):
        try:
            return tuple(int(s) for s in shape.lower().split("x"))
        except ValueError:
            raise LessonInputError(f"tensors.csv: shape {shape!r} is not like 49152x576") from None
    return tuple(int(s) for s in shape)


LOOKUP_TABLES = ("token_embd", "positions")  # param_counts.role() names of tables read one row at a time


def per_token_reads(rows: Iterable[Mapping]) -> list[dict]:
    """One line per read a generated token makes: every tensor once, one row of a lookup table.

    A model without output.weight (tied embeddings) multiplies by token_embd as its head; that
    pass reads the whole table and gets its own line, 'token_embd.weight (tied output head)'.
    """
    rows = list(rows)
    names = {r["name"] for r in rows}
    tied = "token_embd.weight" in names and "output.weight" not in names
    reads = []
    for r in rows:
        shape, part = parse_shape(r["shape"]), pc.role(r["name"])
        nbytes, elements = int(r["bytes"]), int(r["elements"])
        line = {"name": r["name"], "part": part, "type": r["type"], "shape": "x".join(map(str, shape)),
                "elements_in_file": elements, "bytes_in_file": nbytes}
        if part in LOOKUP_TABLES and len(shape) == 2:
            if nbytes % shape[0]:
                raise LessonInputError(f"tensors.csv: {r['name']} has {nbytes} bytes, not a whole number of rows")
            reads.append({**line, "read": "one row (the token's lookup)", "elements_read": shape[1],
                          "bytes_read": nbytes // shape[0], "matrix": False})
            if part == "token_embd" and tied:
                reads.append({**line, "name": f"{r['name']} (tied output head)", "part": "lm_head",
                              "read": "whole table (tied output head)", "elements_read": elements,
                              "bytes_read": nbytes, "matrix": True, "second_pass": True})
        else:
            reads.append({**line, "read": "whole tensor", "elements_read": elements, "bytes_read": nbytes,
                          "matrix": len(shape) == 2})
    return reads


# How the parts are grouped in tables and the figure.
GROUPS = {
    "FFN (gate, up, down)": pc.FFN,
    "attention (q, k, v, o)": pc.ATTENTION,
    "output head": ("lm_head",),
    "embedding lookup (one row)": LOOKUP_TABLES,
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


def model_kv_bytes_per_context_token(d: Mapping, tensor_rows: Sequence[Mapping]) -> int:
    """kv_cache_bytes_per_context_token for this run's model. A model whose values are not as long as
    its keys (metadata value_length) caches K at one width and V at the other: half of each count."""
    arch = model_architecture(d, tensor_rows)
    if d["value_dim"] == d["head_dim"]:
        return kv_cache_bytes_per_context_token(arch)
    return sum(kv_cache_bytes_per_context_token(replace(arch, head_dim=w)) for w in (d["head_dim"], d["value_dim"])) // 2


@dataclass
class Accounting:
    key: str
    label: str
    source: str
    reads: list[dict]
    summary: dict


def account(key: str, label: str, source: str, tensor_rows: Iterable[Mapping]) -> Accounting:
    reads = per_token_reads(tensor_rows)
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
            rows.append({
                "model": acc.label, "group": group, "tensors": len(mine),
                "weights_read": sum(r["elements_read"] for r in mine),
                "bytes_read": sum(r["bytes_read"] for r in mine),
                "share_of_bytes": sum(r["bytes_read"] for r in mine) / total if total else None,
            })
        rows.append({"model": acc.label, "group": "total", "tensors": len(acc.reads),
                     "weights_read": acc.summary["weights_read"], "bytes_read": total, "share_of_bytes": 1.0})
    return rows


READS_COLUMNS = ("name", "part", "type", "shape", "read", "elements_read", "bytes_read", "bytes_in_file")


# --- 2. bandwidths and ceilings ------------------------------------------------------------------


def _num(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


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
        rows.append({"source": source, "bandwidth": what, "gbps": _num(value), "note": note})

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
    add("course (text 000)", "DGX Spark memory peak (quoted by the course)", published("timing.peak_gbps"),
        "a hardware figure the course quotes, not measured here")
    add("course (text 000)", "DGX Spark CPU matvec (measured by the course)", published("timing.matvec_gbps"),
        "the course's run on its machine and model")
    return rows, notes


def ceilings(accounts: Sequence[Accounting], bw_rows: Sequence[Mapping]) -> list[dict]:
    """decode_ceilings.csv: tokens/s ceiling = bandwidth / bytes per token, per model and bandwidth."""
    out = []
    for acc in accounts:
        b = acc.summary["bytes_per_token"]
        for bw in bw_rows:
            g = bw["gbps"]
            tps = g * GB / b if g and b else None
            out.append({"model": acc.label, "bytes_per_token": b, "bandwidth": bw["bandwidth"],
                        "source": bw["source"], "gbps": g, "tokens_per_s_ceiling": tps,
                        "ms_per_token_floor": 1e3 / tps if tps else None, "note": bw["note"]})
    return out


# --- 3. the roofline -----------------------------------------------------------------------------

ROOFLINE_COLUMNS = ("device", "dtype", "op", "n", "flops", "bytes", "intensity", "gflops", "median_s", "noisy",
                    "derived")
# The timing sweep's dtype names -> bytes per element, from gguf-py's table (configs.type_bytes).
ITEMSIZE = {name: configs.type_bytes(ggml, 1) for name, ggml in
            (("fp32", "F32"), ("float32", "F32"), ("bf16", "BF16"), ("fp16", "F16"))}


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
        n, rows, cols = (_num(raw.get(k)) for k in ("n", "rows", "cols"))
        dtype = raw.get("dtype") or "fp32"
        itemsize = _num(raw.get("itemsize")) or ITEMSIZE.get(str(dtype).lower())
        flops, nbytes, gflops, median = (_num(raw.get(k)) for k in ("flops", "bytes", "gflops", "median_s"))
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
        points.append({
            "device": device, "dtype": dtype, "op": raw.get("op") or ("matvec" if n == 1 else "matmul"),
            "n": int(n) if n is not None else None, "flops": flops, "bytes": nbytes, "intensity": flops / nbytes,
            "gflops": gflops, "median_s": median,
            "noisy": {"true": True, "false": False}.get(str(raw.get("noisy")).strip().lower()),
            "derived": " ".join(derived),
        })
    points.sort(key=lambda p: (p["dtype"], p["n"] or 0))
    if any(p["derived"] for p in points):
        notes.append(f"{device}: some roofline values worked out from other columns (see 'derived')")
    return points, notes


def roofs(points: Sequence[Mapping], bandwidth_gbps) -> dict:
    """The two roofs of one device: measured bandwidth (sloped) and the sweep's best GFLOP/s (flat)."""
    best = max(points, key=lambda p: p["gflops"], default=None)
    bw = _num(bandwidth_gbps)
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
    return {"memory_ceiling_tps": mem, "compute_ceiling_tps": comp, "bound": bound,
            "compute_over_memory_ceiling": comp / mem if mem and comp else None}


def bound_table(accounts: Sequence[Accounting], all_roofs: Mapping[str, Mapping]) -> list[dict]:
    """Per device and model: decode's intensity at batch 1 against the ridge, both ceilings, which binds."""
    rows = []
    for dev, rf in all_roofs.items():
        for acc in accounts:
            c = roofline_ceiling(acc.summary, rf)
            rows.append({"device": dev, "model": acc.label, "decode FLOPs/byte": acc.summary["decode_intensity"],
                         "ridge FLOPs/byte": rf["ridge_intensity"], "memory ceiling tok/s": c["memory_ceiling_tps"],
                         "compute ceiling tok/s": c["compute_ceiling_tps"], "bound": c["bound"]})
    return rows


def flops_per_weight_n1(sweep: Sequence[Mapping], points: Sequence[Mapping]) -> float | None:
    """FLOPs the timing job counted for its N = 1 row, per weight of the matrix (rows x cols)."""
    p1 = next((p for p in points if p["n"] == 1 and str(p["dtype"]).lower() in ("fp32", "float32")), None)
    raw = next((r for r in sweep if _num(r.get("n")) == 1), None)
    if p1 is None or raw is None:
        return None
    rows, cols = _num(raw.get("rows")), _num(raw.get("cols"))
    return p1["flops"] / (rows * cols) if rows and cols else None


def point_metrics(points: Sequence[Mapping], prefix: str) -> dict:
    """Counts the course quotes from the sweep: FLOPs per weight at N = 1, the work at N = 256 over N = 1."""
    fp32 = [p for p in points if str(p["dtype"]).lower() in ("fp32", "float32")] or list(points)
    by_n = {p["n"]: p for p in fp32}
    p1, p256 = by_n.get(1), by_n.get(256)
    out = {f"{prefix}_matvec_intensity": p1["intensity"] if p1 else None,
           f"{prefix}_matvec_gflops": p1["gflops"] if p1 else None,
           f"{prefix}_work_256_over_1": p256["flops"] / p1["flops"] if p1 and p256 else None}
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
        out[f"timing_{key}"] = _num(cpu.get(key))
    copy, mv = out["timing_stream_copy_gbps"], out["timing_matvec_cold_gbps"]
    out["timing_matvec_fraction_of_copy"] = mv / copy if mv and copy else None
    if out["timing_matmul_ratio_256_over_1"] is None:  # worked out from the sweep's medians if need be
        med = {int(_num(r.get("n"))): _num(r.get("median_s")) for r in cpu_sweep if _num(r.get("n"))}
        if med.get(1) and med.get(256):
            out["timing_matmul_ratio_256_over_1"] = med[256] / med[1]
            missing.append("matmul_ratio_256_over_1 worked out from sweep.csv medians")
    machine = cpu.get("machine") if isinstance(cpu.get("machine"), Mapping) else {}
    out["timing_cpu_model"] = machine.get("cpu_model")
    llc = _num(machine.get("llc_bytes"))
    out["timing_llc_bytes"] = int(llc) if llc else None
    out["timing_course_machine"] = course_machine(cpu)
    out["timing_noisy"] = [str(v) for v in cpu.get("noisy", [])] if isinstance(cpu.get("noisy"), list) else []
    out["timing_machine_shared"] = cpu.get("machine_shared")
    out["gpu_status"] = gpu.get("status") or "missing"
    out["gpu_skipped"] = gpu.get("skipped")
    out["gpu_stream_copy_gbps"] = _num(gpu.get("stream_copy_gbps")) if gpu.get("status") == "measured" else None
    out["gpu_matvec_cold_gbps"] = _num(gpu.get("matvec_cold_gbps")) if gpu.get("status") == "measured" else None
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
    timing_notes: Iterable[str] = (),
    model: str = "this model",
) -> dict:
    """Every number of the lesson as a flat dict (what metrics.json holds); `run` also keeps the tables."""
    return run(metadata, tensor_rows, timing_summary=timing_summary, timing_sweep=timing_sweep,
               gpu_summary=gpu_summary, gpu_sweep=gpu_sweep, timing_notes=timing_notes, model=model).metrics


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


def run(
    metadata: Mapping,
    tensor_rows: Iterable[Mapping],
    *,
    timing_summary: Mapping | None = None,
    timing_sweep: Sequence[Mapping] | None = None,
    gpu_summary: Mapping | None = None,
    gpu_sweep: Sequence[Mapping] | None = None,
    timing_notes: Iterable[str] = (),
    model: str = "this model",
) -> Run:
    cpu, gpu = dict(timing_summary or {}), dict(gpu_summary or {})
    cpu_sweep, gpu_sweep = list(timing_sweep or []), list(gpu_sweep or [])
    tensor_rows = list(tensor_rows)
    d = dims(metadata)
    m: dict = {"architecture": d["architecture"], "embedding_length": d["embedding_length"],
               "feed_forward_length": d["feed_forward_length"], "block_count": d["block_count"]}

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
    m["model_kv_cache_bytes_per_context_token"] = model_kv_bytes_per_context_token(d, tensor_rows)
    # cross-checks: Llama-3-8B against param_counts (which counts no lookup row), the specimen's
    # tensors as the file would list them against this run's table when the run is the specimen
    m["llama3_8b_param_counts_streamed"] = pc.count(configs.LLAMA3_8B)["streamed_params"]
    m["llama3_8b_matches_param_counts"] = (
        m["llama3_8b_bf16_weights_read"] - configs.LLAMA3_8B.d_model == m["llama3_8b_param_counts_streamed"])
    m["model_bytes_equal_specimen_config"] = mine.summary["bytes_per_token"] == others[0].summary["bytes_per_token"]

    # the course's own arithmetic (text 000): the specimen's ffn_gate in float32, 128 of 273 GB/s
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
    m["notes"] = [*timing_notes, *bw_notes, *cpu_notes, *gpu_notes]
    return Run(m, accounts, group_table(accounts), ceil, cpu_points + gpu_points, all_roofs, bw_rows,
               bound_table(accounts, all_roofs))


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
    return [("fp32", FP32_MATVEC_INTENSITY)] + [(a.label, a.summary["decode_intensity"]) for a in accounts
                              if a.summary["decode_intensity"]]


def plot_roofline(points: Sequence[Mapping], all_roofs: Mapping[str, Mapping], warm_gbps=None,
                  markers: Sequence[tuple[str, float]] = (("fp32", FP32_MATVEC_INTENSITY),), title: str = ""):
    """Achieved GFLOP/s against FLOPs per byte, log-log, under each device's two measured roofs.

    `markers` are (label, intensity) of batch-1 decode, drawn as dotted verticals (see decode_markers).
    """
    import numpy as np

    fig, ax = figure()
    xs = [p["intensity"] for p in points] + [v for _, v in markers]
    lo, hi = min(xs + [0.1]) / 2, max(xs + [10.0]) * 2
    x = np.geomspace(lo, hi, 200)
    styles = {"cpu": ("C0", "o"), "gpu": ("C3", "s")}
    for dev, rf in all_roofs.items():
        colour, marker = styles.get(dev, ("C2", "^"))
        bw, peak = rf["bandwidth_gbps"], rf["peak_gflops"]
        if bw:
            roof = bw * x if not peak else np.minimum(bw * x, peak)
            ax.plot(x, roof, color=colour, lw=1.5, label=f"{dev}: copy bandwidth {bw:.0f} GB/s (sloped roof)")
        if peak:
            ax.axhline(peak, color=colour, lw=0.8, ls="--",
                       label=f"{dev}: measured peak {peak:.0f} GFLOP/s (best of sweep, N = {rf['peak_at_n']})")
        for dtype in sorted({p["dtype"] for p in points if p["device"] == dev}):
            mine = [p for p in points if p["device"] == dev and p["dtype"] == dtype]
            filled = dtype in ("fp32", "float32")
            ax.plot([p["intensity"] for p in mine], [p["gflops"] for p in mine], marker, color=colour,
                    mfc=colour if filled else "white", ls="none", label=f"{dev} {dtype}: one point per N")
            for p in mine:
                if p["n"] in (1, 256) or (p["n"] and p["n"] == max(q["n"] for q in mine)):
                    ax.annotate(f"N={p['n']}", (p["intensity"], p["gflops"]), textcoords="offset points",
                                xytext=(4, -10), fontsize=7)
    if warm_gbps:
        x_warm = FP32_MATVEC_INTENSITY
        ax.plot([x_warm], [x_warm * warm_gbps], "x", color="C0", label=f"cpu matvec, warm (in cache): {warm_gbps:.0f} GB/s")
    for name, v in markers:
        ax.axvline(v, color="0.7", lw=0.6, ls=":")
        ax.text(v, 0.02, f"decode {name} ", transform=ax.get_xaxis_transform(), rotation=90, fontsize=7,
                color="0.4", va="bottom", ha="right")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity, FLOPs per byte moved")
    ax.set_ylabel("achieved GFLOP/s")
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig

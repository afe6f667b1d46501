"""Lesson 3, "A layer is matrix multiplication": one token through block 0's feed-forward network.

What is computed, in the lesson's order:
  1. the model's dimensions, read from metadata (never assumed);
  2. the toy arithmetic: dot, length, cosine of [3, 4] and [4, 3]; a 2 x 3 matvec; RMS of [4, -2, 0, 4];
  3. the real walk, following the model's recipe from the architecture table (bytesup.lessons.ffn_walk):
     the token's embedding row x (times sqrt(d_model) on Gemma) -> RMSNorm -> gate and up matvecs
     -> the gate's activation (SiLU on llama, GELU-tanh on Gemma) -> down matvec (-> post_ffw_norm
     on Gemma) -> residual, with the statistics the course reports at each step. Metrics named
     after SiLU (silu_abs_below_*) are written for SiLU models only; the act_* keys for every model;
  4. the cost: FLOPs per token for one whole block, from the metadata;
  5. the matvec-versus-matmul timing, read from the timing stage's files.

Arithmetic is float32 throughout, like the model: the weights are the float32 arrays the extract
stage dequantized, and every activation stays float32. (llama.cpp itself goes one step further for
quantized weights: it rounds the activations to 8 bits before each dot product, so its values
differ from these in the last digits.) The one exception is the re-check of the first gate output
with a plain Python loop, whose floats are 64-bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from bytesup.lessons import claims as claims_mod
from bytesup.lessons import figure
from bytesup.lessons.ffn_walk import BLOCK, FOLLOWED, Recipe, Walk, dims, recipe, walk  # noqa: F401  (Walk, BLOCK: the notebook)
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model.arch import ARCHITECTURES, recipe_summary
from bytesup.model.configs import DEEPSEEK_CODER_6_7B
from bytesup.model.forward import activation
from bytesup.model.layers import matvec, matvec_naive, rms, silu
from bytesup.model.vectors import angle_deg, angle_from_cosine, cosine, dot, length
from bytesup.timing.results import course_machine, number, read_timing  # noqa: F401  (read_timing: the notebook)

SPEC = LessonSpec(
    id="03_ffn_by_hand",
    title="A layer is matrix multiplication",
    kind=SERIES,
    position=3,
    source=('Lesson 3 of the LLM Basics series, "A layer is matrix multiplication"'),
    reads=("metadata_json", "tensors_index", "timing_summary", "timing_sweep"),
    tensors=("token_embd.weight", "blk.0.ffn_*", "?blk.0.post_ffw_norm.weight"),
    tables=("flops_per_token.csv", "matvec_vs_matmul.csv"),
    figures={
        "gate_histogram.png": "Block 0's gate values g for the followed token, and the valve the model's activation (SiLU or GELU-tanh) sets for each",
        "flops_per_token.png": "FLOPs per token for one whole block, by step: the matvecs dominate",
    },
    headlines=(
        Headline("token_id", "token id of the followed token"),
        Headline("x_rms", "RMS of its embedding x", fmt=".4g"),
        Headline("x_length", "length |x|", fmt=".4g"),
        Headline("gate_first", "first gate output, numpy", fmt=".6f"),
        Headline("gate_first_naive", "first gate output, plain Python loop", fmt=".6f"),
        Headline("gate_negative_fraction", "gate values that are negative", fmt="%"),
        Headline("act_abs_below_0_1_fraction", "valves with |act(g)| < 0.1 (the model's activation)", fmt="%"),
        Headline("act_abs_below_0_01_fraction", "valves with |act(g)| < 0.01 (the model's activation)", fmt="%"),
        Headline("out_length", "length of the FFN output |out|", fmt=".3g"),
        Headline("cosine_x_y", "cosine(x, y) across the block", fmt=".3f"),
        Headline("angle_deg", "angle between x and y", unit="degrees", fmt=".1f"),
    ),
    config_keys=("token",),
    architectures=FOLLOWED,  # the rows whose FFN gate and up are two tensors (ffn_walk.recipe)
)

# The course's specimen as the text states it; used only to recheck the text's own arithmetic
# and to give the FLOPs table a column for the specimen (the text says attn_k and attn_v are
# 4096 -> 4096, so it has as many key/value heads as query heads).
COURSE_DIMS = {
    "embedding_length": DEEPSEEK_CODER_6_7B.d_model,
    "feed_forward_length": DEEPSEEK_CODER_6_7B.d_ff,
    "block_count": DEEPSEEK_CODER_6_7B.n_layers,
    "head_count": DEEPSEEK_CODER_6_7B.n_heads,
    "head_count_kv": DEEPSEEK_CODER_6_7B.n_kv_heads,
}
COURSE_PRINTED = {
    "x_first3": [-0.1781, -0.0918, 0.1531],
    "x_mean_square": 0.02917,
    "x_rms": 0.1708,
    "cosine_x_y": 0.95,
}


def tensor_names(block: int = BLOCK, post_ffn_norm: bool = False) -> list[str]:
    """The tensors this lesson reads (the extract stage must select them); post_ffw_norm on Gemma."""
    names = ["token_embd.weight"] + [f"blk.{block}.ffn_{p}.weight" for p in ("norm", "gate", "up", "down")]
    return names + [f"blk.{block}.post_ffw_norm.weight"] * post_ffn_norm


# --- 1. dimensions ---------------------------------------------------------------------------


# --- 2. the toys, checkable by hand -------------------------------------------------------------


def toys() -> dict:
    """The lesson's small worked examples, computed with the same functions as the real walk."""
    a, b = np.array([3.0, 4.0]), np.array([4.0, 3.0])
    W = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])
    v = np.array([4.0, -2.0, 0.0, 4.0])
    z = np.linspace(-6.0, 0.0, 600_001)  # SiLU's lowest point lies in here; step 1e-5
    s = silu(z)
    return {
        "toy_dot": dot(a, b),
        "toy_length": length(a),
        "toy_cosine": cosine(a, b),
        "toy_angle_deg": angle_deg(a, b),
        "toy_matvec": matvec(W, np.array([3.0, 1.0, 2.0])),
        "toy_matvec_naive": matvec_naive(W, [3.0, 1.0, 2.0]),
        "toy_rms": rms(v),
        "toy_mean": v.mean(),  # the plain average lets signs cancel ...
        "toy_mean_pair": np.mean([5.0, -5.0]),  # ... down to 0 for two large numbers
        "toy_normalised": v / rms(v),
        "toy_normalised_rms": rms(v / rms(v)),
        "silu_2": silu(2.0),
        "two_silu_1": 2 * silu(1.0),
        "silu_min": s.min(),
        "silu_argmin": z[np.argmin(s)],
    }


def course_arithmetic() -> dict:
    """The text's own arithmetic on its printed numbers (no model involved)."""
    d, p = COURSE_DIMS, COURSE_PRINTED
    return {
        "course_first3_squared": [e * e for e in p["x_first3"]],
        "course_sqrt_mean_square": math.sqrt(p["x_mean_square"]),
        "course_length_from_rms": p["x_rms"] * math.sqrt(d["embedding_length"]),
        "course_angle_from_cosine": angle_from_cosine(p["cosine_x_y"]),
        "course_ffn_widening": d["feed_forward_length"] / d["embedding_length"],
        "course_ffn_gate_fp32_mb": d["feed_forward_length"] * d["embedding_length"] * 4 / 1e6,
    }


# --- 3. one token through block 0's FFN ---------------------------------------------------------


def walk_metrics(wk: Walk) -> dict:
    """The statistics the lesson reports along the walk.

    x is the block's input (the embedding row times the recipe's scale); act is the model's gate
    activation. The silu_* keys are written only when act is SiLU; act_* always.
    """
    x, t, rc = wk.x, wk.trace, wk.recipe
    n = x.shape[0]
    s = activation(rc.activation)(t.g)
    g2 = matvec(wk.w_gate, 2 * t.xn)  # linearity: W(2x) against 2(Wx)
    gsum = matvec(wk.w_gate, t.xn + x)  # additivity: W(a + b) against Wa + Wb
    ref = float(np.abs(t.g).max()) or 1.0
    naive = matvec_naive(wk.w_gate[:1], t.xn)[0]  # the course's loop, for output 0 only
    valves = {
        "act_abs_below_0_1_fraction": np.mean(np.abs(s) < 0.1),
        "act_abs_below_0_01_fraction": np.mean(np.abs(s) < 0.01),
        "act_gate_min": s.min(),
    }
    m = {
        "token": wk.token,
        "token_id": wk.token_id,
        "token_vocab_form": wk.vocab_form,
        # the recipe
        "activation": rc.activation,
        "embedding_scale": rc.embed_scale,
        "post_ffn_norm": rc.post_ffn_norm,
        "embedding_rms": rms(wk.embedding),
        # step 1, RMSNorm
        "x_first3": x[:3],
        "x_first3_squared": x[:3] * x[:3],
        "x_mean_square": np.mean(x * x),
        "x_rms": rms(x),
        "x_rms_after_dividing": rms(x / rms(x)),
        "x_length": length(x),
        "x_length_from_rms": rms(x) * math.sqrt(n),
        "xn_rms": rms(t.xn),
        # step 2, the first gate output two ways
        "gate_first": t.g[0],
        "gate_first_naive": naive,
        "gate_first_naive_abs_diff": abs(float(t.g[0]) - naive),
        "gate_linearity_max_abs_diff": np.abs(g2 - 2 * t.g).max(),
        "gate_additivity_max_rel_diff": np.abs(gsum - (t.g + matvec(wk.w_gate, x))).max() / ref,
        # step 3, the valves
        "gate_negative_fraction": np.mean(t.g < 0),
        "gate_positive_fraction": np.mean(t.g > 0),
        **valves,
        "gate_min": t.g.min(),
        "gate_max": t.g.max(),
        # steps 4 and 5, down (and Gemma's post_ffw_norm) and residual
        "down_length": length(wk.down),
        "out_length": length(t.out),
        "out_over_x_length": length(t.out) / length(x),
        "y_length": length(t.y),
        "cosine_x_y": cosine(x, t.y),
        "angle_deg": angle_deg(x, t.y),
    }
    if rc.activation == "silu":  # today's names, kept for SiLU models
        m.update(
            silu_abs_below_0_1_fraction=valves["act_abs_below_0_1_fraction"],
            silu_abs_below_0_01_fraction=valves["act_abs_below_0_01_fraction"],
            silu_gate_min=valves["act_gate_min"],
        )
    return m


# --- 4. what a block costs per token ------------------------------------------------------------


ACT_LABELS = {"silu": "SiLU", "gelu_tanh": "GELU-tanh"}
ACT_FLOPS = {"silu": 4, "gelu_tanh": 8}  # per element; see flops_per_token


def flops_per_token(d: Mapping, rc: Recipe | None = None, qk_norm: bool = False) -> list[dict]:
    """FLOPs for one token through one whole block, step by step, following the recipe (llama's when None).

    Counted: each matvec at 2 FLOPs per weight (one multiply, one add); RMSNorm at 4 per element
    (square, add, divide, gain); SiLU at 4 per element (exp, add, divide, multiply); GELU-tanh at 8
    (cube, multiply, add, scale, tanh, add 1, halve, multiply); the gate product and each residual
    add at 1; Gemma's extra norms (per-head RMSNorm of q and k, the norm on each half's output)
    at 4 per element. Not counted: attention's scores, softmax and weighted sum (they grow with the
    token's position; lesson 6), RoPE, and the final norm and output head, which run once per token
    rather than once per block. Each row's "key" names the step whatever the activation is called.
    """
    e, f = d["embedding_length"], d["feed_forward_length"]
    act = rc.activation if rc else "silu"
    post = bool(rc and rc.post_ffn_norm)
    head_dim = d.get("head_dim", e // d["head_count"])
    value_dim = d.get("value_dim", head_dim)
    q = d["head_count"] * head_dim  # queries: one head_dim slice per head
    k = d["head_count_kv"] * head_dim  # keys and values: fewer heads under grouped-query attention
    v = d["head_count_kv"] * value_dim

    def mv(step, half, rows, cols):
        return {
            "step": step,
            "half": half,
            "kind": "matvec",
            "rows": rows,
            "cols": cols,
            "weights": rows * cols,
            "flops": 2 * rows * cols,
            "key": step + half,
        }

    def ew(step, half, n, per, key=None):
        return {
            "step": step,
            "half": half,
            "kind": "elementwise",
            "rows": n,
            "cols": None,
            "weights": 0,
            "flops": per * n,
            "key": (key or step) + half,
        }

    rows = [
        ew("attn_norm (RMSNorm)", "attention", e, 4),
        mv("attn_q", "attention", q, e),
        mv("attn_k", "attention", k, e),
        mv("attn_v", "attention", v, e),
    ]
    if qk_norm:
        rows.append(ew("attn_q_norm, attn_k_norm (RMSNorm per head)", "attention", q + k, 4))
    rows.append(mv("attn_output", "attention", e, d["head_count"] * value_dim))
    if post:
        rows.append(ew("post_attention_norm (RMSNorm)", "attention", e, 4))
    rows += [
        ew("residual add", "attention", e, 1),
        ew("ffn_norm (RMSNorm)", "ffn", e, 4),
        mv("ffn_gate", "ffn", f, e),
        mv("ffn_up", "ffn", f, e),
        ew(ACT_LABELS[act], "ffn", f, ACT_FLOPS[act], key="activation"),
        ew(f"{ACT_LABELS[act]}(g) * u", "ffn", f, 1, key="gate product"),
        mv("ffn_down", "ffn", e, f),
    ]
    if post:
        rows.append(ew("post_ffw_norm (RMSNorm)", "ffn", e, 4))
    rows.append(ew("residual add", "ffn", e, 1))
    return rows


def flops_table(d: Mapping, rc: Recipe | None = None, qk_norm: bool = False) -> list[dict]:
    """flops_per_token for this model, with the course specimen's published config beside it
    (course_flops empty for the steps the specimen's llama block does not have)."""
    course = {r["key"]: r["flops"] for r in flops_per_token(COURSE_DIMS)}
    rows = flops_per_token(d, rc, qk_norm)
    total = sum(r["flops"] for r in rows)
    return [{**r, "share": r["flops"] / total, "course_flops": course.get(r["key"])} for r in rows]


def flops_metrics(rows: Iterable[dict], d: Mapping, prefix: str = "flops", flops_key: str = "flops") -> dict:
    rows = [r for r in rows if r[flops_key] is not None]
    mv = sum(r[flops_key] for r in rows if r["kind"] == "matvec")
    ew = sum(r[flops_key] for r in rows if r["kind"] == "elementwise")
    ffn_mv = sum(r[flops_key] for r in rows if r["kind"] == "matvec" and r["half"] == "ffn")
    return {
        f"{prefix}_matvec_per_token_block": mv,
        f"{prefix}_elementwise_per_token_block": ew,
        f"{prefix}_total_per_token_block": mv + ew,
        f"{prefix}_matvec_share": mv / (mv + ew),
        f"{prefix}_ffn_matvec_share": ffn_mv / mv,
        f"{prefix}_per_token_all_blocks": (mv + ew) * d["block_count"],
    }


# --- 5. one token versus many: read from the timing stage ----------------------------------------

SWEEP_COLUMNS = ("n", "median_s", "gflops", "gbps")  # needed for the table
SWEEP_EXTRAS = ("op", "rows", "cols", "weight_bytes", "time_over_n1", "rel_iqr", "noisy")  # shown when present
SUMMARY_KEYS = ("matmul_ratio_256_over_1", "matvec_cold_gbps", "stream_copy_gbps")
TABLE_COLUMNS = ("op", "n", "rows", "cols", "weight_bytes", "median_s", "time_over_n1", "gflops", "gbps", "noisy")


def _bool(text):
    return {"true": True, "false": False}.get(str(text).strip().lower())


def matvec_vs_matmul(summary: Mapping, sweep: list[Mapping], notes: Iterable[str] = ()) -> tuple[list[dict], dict]:
    """The timing table (one row per batch size N) and its metrics, using only what was measured.

    time_over_n1 is each row's median time over the N = 1 row's: N times the work took how many
    times as long. It is taken from sweep.csv, or worked out from median_s if the column is absent.
    Columns or keys the timing stage did not write are listed in timing_missing.
    """
    missing = list(notes)
    if sweep:
        missing += [f"sweep.csv column {c!r}" for c in SWEEP_COLUMNS if c not in sweep[0]]
    rows = []
    for raw in sweep:
        row = {
            c: number(raw.get(c)) for c in (*SWEEP_COLUMNS, "rows", "cols", "weight_bytes", "time_over_n1", "rel_iqr")
        }
        row["op"] = raw.get("op")
        row["noisy"] = _bool(raw.get("noisy"))
        rows.append(row)
    rows = [r for r in rows if r["n"] is not None]
    rows.sort(key=lambda r: r["n"])
    t1 = next((r["median_s"] for r in rows if r["n"] == 1 and r["median_s"]), None)
    for r in rows:
        for key in ("n", "rows", "cols", "weight_bytes"):
            r[key] = None if r[key] is None else int(r[key])
        if r["time_over_n1"] is None and t1 and r["median_s"] is not None:
            r["time_over_n1"] = r["median_s"] / t1  # sweep.csv lacks it: from the medians
    if sweep and "time_over_n1" not in sweep[0]:
        missing.append("sweep.csv column 'time_over_n1' (worked out from median_s)")

    metrics = {}
    for key in SUMMARY_KEYS:
        value = number(summary.get(key)) if key in summary else None
        if key not in summary:
            missing.append(f"summary.json key {key!r}")
        metrics[f"timing_{key}"] = value
    source = "summary.json" if metrics["timing_matmul_ratio_256_over_1"] is not None else None
    if source is None:
        r256 = next((r["time_over_n1"] for r in rows if r["n"] == 256), None)
        if r256 is not None:
            metrics["timing_matmul_ratio_256_over_1"], source = r256, "sweep.csv"
    metrics["timing_ratio_source"] = source or "missing"
    metrics["timing_sizes"] = [r["n"] for r in rows]
    weight_bytes = sorted({r["weight_bytes"] for r in rows if r["weight_bytes"] is not None})
    metrics["timing_weight_mb"] = weight_bytes[0] / 1e6 if len(weight_bytes) == 1 else None
    machine = summary.get("machine") if isinstance(summary.get("machine"), Mapping) else {}
    metrics["timing_cpu_model"] = machine.get("cpu_model")
    weights = summary.get("weights") if isinstance(summary.get("weights"), Mapping) else {}
    metrics["timing_weights_what"] = weights.get("what")
    noisy = summary.get("noisy")
    metrics["timing_noisy"] = [str(v) for v in noisy] if isinstance(noisy, list) else []
    metrics["timing_course_machine"] = course_machine(summary)
    metrics["timing_missing"] = missing
    return rows, metrics


# --- the whole lesson -------------------------------------------------------------------------


def run(
    metadata: Mapping,
    tensors: Mapping[str, np.ndarray],
    token: str = " cat",
    *,
    timing_summary: Mapping | None = None,
    timing_sweep: list[Mapping] | None = None,
    timing_notes: Iterable[str] = (),
) -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports (numpy scalars; see lessons.plain), and the
    tables behind them, each computed once: "walk" (the Walk, arrays kept), "flops" (flops_table's
    rows) and "timing" (matvec_vs_matmul's rows)."""
    d = dims(metadata)
    metrics: dict = dict(d)
    metrics["vocab_size"] = len(metadata.get("tokenizer.ggml.tokens") or [])
    metrics["ffn_widening"] = d["feed_forward_length"] / d["embedding_length"]
    metrics["ffn_gate_shape"] = [d["feed_forward_length"], d["embedding_length"]]
    metrics["ffn_gate_fp32_mb"] = d["feed_forward_length"] * d["embedding_length"] * 4 / 1e6
    metrics.update(toys())
    metrics.update(course_arithmetic())
    wk = walk(metadata, tensors, token)
    metrics.update(walk_metrics(wk))
    metrics["recipe"] = recipe_summary(wk.recipe.architecture)
    table = flops_table(
        d, wk.recipe, qk_norm=ARCHITECTURES[wk.recipe.architecture].tensors.keys() >= {"q_norm", "k_norm"}
    )
    metrics.update(flops_metrics(table, d))
    metrics.update(flops_metrics(table, COURSE_DIMS, prefix="course_flops", flops_key="course_flops"))
    timing_rows, timing = matvec_vs_matmul(timing_summary or {}, list(timing_sweep or []), timing_notes)
    metrics.update(timing)
    return metrics, {"walk": wk, "flops": table, "timing": timing_rows}


def compute(metadata: Mapping, tensors: Mapping[str, np.ndarray], token: str = " cat", **timing) -> dict:
    """The metrics of ``run`` alone."""
    return run(metadata, tensors, token, **timing)[0]


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """Check the lesson's published claims against this run's metrics."""
    extra = ["dgx-spark"] if metrics.get("timing_course_machine") else []
    context = claims_mod.run_context(model, sha256, metadata, extra=extra)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- figures ------------------------------------------------------------------------------------


def plot_gate_histogram(g: np.ndarray, title: str = "", act: str = "silu"):
    """Histogram of the gate values g, with the activation (SiLU, GELU-tanh) drawn over it and the valve bands shaded."""
    g = np.asarray(g, dtype=np.float64)
    fig, ax = figure()
    lo, hi = min(float(g.min()), -6.0), max(float(g.max()), 3.0)
    z = np.linspace(lo, hi, 2001)
    sz = activation(act)(z)
    name = ACT_LABELS[act]
    band = ax.get_xaxis_transform()  # x in data units, y from 0 to 1 of the axes: full-height bands
    ax.fill_between(
        z,
        0,
        1,
        where=np.abs(sz) < 0.1,
        transform=band,
        color="C1",
        alpha=0.15,
        lw=0,
        label=f"|{name}(g)| < 0.1: passes under a tenth",
    )
    ax.fill_between(
        z, 0, 1, where=np.abs(sz) < 0.01, transform=band, color="C3", alpha=0.3, lw=0, label=f"|{name}(g)| < 0.01: shut"
    )
    ax.hist(g, bins=np.linspace(lo, hi, 121), color="0.45", label=f"gate values g ({g.size:,})")
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("g = W_gate · xn")
    ax.set_ylabel("count")
    ax2 = ax.twinx()
    ax2.plot(z, sz, color="C0", label=f"{name}(g), right axis")
    ax2.set_ylim(-0.5, float(activation(act)(hi)) * 1.05)
    ax2.set_ylabel(f"{name}(g)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_flops(rows: list[dict], title: str = ""):
    """FLOPs per step of one block for one token, log scale: matvecs dwarf everything else."""
    fig, ax = figure()
    labels = [f"{r['step']} ({r['half']})" if r["step"] == "residual add" else r["step"] for r in rows]
    colours = ["C0" if r["kind"] == "matvec" else "C1" for r in rows]
    ax.barh(range(len(rows)), [r["flops"] for r in rows], color=colours)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("FLOPs per token (blue: matvec, orange: element by element)")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig

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
from bytesup.lessons.ffn_by_hand.across import tokens_and_blocks, top_share, verdicts
from bytesup.lessons.ffn_by_hand.cost import COURSE_DIMS, flops_metrics, flops_table, matvec_vs_matmul
from bytesup.lessons.ffn_walk import BLOCK, Walk, dims, walk
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model.arch import ARCHITECTURES, recipe_summary
from bytesup.model.forward import activation
from bytesup.model.layers import matvec, matvec_naive, rms, silu
from bytesup.model.vectors import angle_deg, angle_from_cosine, cosine, dot, length

SPEC = LessonSpec(
    id="03_ffn_by_hand",
    title="A layer is matrix multiplication",
    kind=SERIES,
    position=3,
    source=('Lesson 3 of the LLM Basics series, "A layer is matrix multiplication"'),
    reads=("model_gguf", "metadata_json", "tensors_index", "timing_summary", "timing_sweep"),
    tensors=("token_embd.weight", "blk.0.ffn_*", "?blk.0.post_ffw_norm.weight"),
    tables=("flops_per_token.csv", "matvec_vs_matmul.csv", "across_blocks.csv"),
    figures={
        "gate_histogram.png": "Block 0's gate values g for the followed token, and the valve the model's activation (SiLU or GELU-tanh) sets for each",
        "ffn_across_blocks.png": "What the FFN half adds in every block of a real forward pass over a passage (medians over its tokens): its length over the stream's, and how far it turns the stream; the course's block-0 value for one token marked",
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
        Headline("out_top1_share", "share of |out|² in its largest dimension", fmt="%"),
        Headline(
            "vocab_angle_deg_median", "block 0, tokens across the vocabulary: median turn", unit="degrees", fmt=".1f"
        ),
        Headline("vocab_out_over_x_median", "block 0, tokens across the vocabulary: median |out| / |x|", fmt=".3g"),
        Headline(
            "pass_block0_ffn_angle_deg_median", "real pass, block 0's FFN: median turn", unit="degrees", fmt=".1f"
        ),
        Headline(
            "pass_later_ffn_angle_deg_median", "real pass, later blocks' FFN: median turn", unit="degrees", fmt=".1f"
        ),
        Headline("pass_later_ffn_over_h_median", "real pass, later blocks: median |FFN(h)| / |h|", fmt=".3g"),
        Headline("pass_residual_start_median", "real pass: stream length after the embedding (median)"),
        Headline("pass_residual_end_median", "real pass: stream length after the last block (median)"),
        # the same quantities where the narrative says which of the course's statements hold (None where not)
        *(
            Headline(key, f"{what} (where it holds)", unit="degrees", fmt=".1f")
            for key, what in (
                ("block0_overwrites_angle_deg", "block 0 overwrites: median turn"),
                ("block0_nudges_angle_deg", "block 0 nudges: median turn"),
                ("pass_block0_overwrites_angle_deg", "real pass, block 0 overwrites: median turn"),
                ("pass_block0_nudges_angle_deg", "real pass, block 0 nudges: median turn"),
                ("later_blocks_nudge_angle_deg", "later blocks nudge: median turn"),
                ("later_blocks_overwrite_angle_deg", "later blocks overwrite: median turn"),
                ("pass_later_ffn_angle_deg_max_block", "later blocks: the largest median turn"),
                ("course_angle_deg", "the course's turn for its token"),
            )
        ),
    ),
    config_keys=("token", "forward"),
    architectures=tuple(ARCHITECTURES),  # the walk follows every row of the table (ffn_walk.recipe)
    runs_model=True,  # the forward pass over a passage (across.py): weights resident when they fit forward's budget
)
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


# The course's own values for the walk, read from the claims file, so that the narrative can set
# them beside this run's (claim id -> metrics key; shares as fractions, as this run writes them).
COURSE_VALUES = {
    "walk.x_length": ("course_x_length", 1.0),
    "walk.out_length": ("course_out_length", 1.0),
    "walk.cosine_x_y": ("course_cosine_x_y", 1.0),
    "walk.angle": ("course_angle_deg", 1.0),
    "walk.gate_negative": ("course_gate_negative_share", 0.01),
    "walk.silu_below_0_1": ("course_act_below_0_1_share", 0.01),
    "dims.embedding_length": ("course_embedding_length", 1.0),
    "dims.feed_forward_length": ("course_feed_forward_length", 1.0),
    "dims.block_count": ("course_block_count", 1.0),
    "timing.matmul_ratio_256_over_1": ("course_matmul_ratio_256_over_1", 1.0),
    "timing.matvec_gbps": ("course_matvec_gbps", 1.0),
    "timing.peak_gbps": ("course_peak_gbps", 1.0),
}


def course_values() -> dict:
    return {key: claims_mod.published_value(SPEC.id, cid) * scale for cid, (key, scale) in COURSE_VALUES.items()}


def recipe_facts(wk: Walk, tensors: Mapping) -> dict:
    """What the model's recipe does around the walk, as numbers the narrative cites where they apply:
    None on a model that does not do it (a llama: no embedding scale, no post-FFN norm)."""
    rc = wk.recipe
    m = {"embedding_scale_applied": rc.embed_scale if rc.embed_scale != 1.0 else None}
    # GELU-tanh falls to 0 below zero much faster than SiLU: many more of its valves are fully shut
    m["gelu_shut_share"] = m["silu_shut_share_same_gates"] = None
    if rc.activation == "gelu_tanh":
        m["gelu_shut_share"] = float(np.mean(np.abs(activation(rc.activation)(wk.trace.g)) < 0.01))
        m["silu_shut_share_same_gates"] = float(np.mean(np.abs(silu(wk.trace.g)) < 0.01))
    gains = tensors.get(f"blk.{BLOCK}.post_ffw_norm.weight") if rc.post_ffn_norm else None
    m["post_ffn_norm_gain_min"] = float(np.min(gains)) if gains is not None else None
    m["post_ffn_norm_gain_max"] = float(np.max(gains)) if gains is not None else None
    m["down_length_before_post_norm"] = length(wk.down) if rc.post_ffn_norm else None
    return m


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
        # where |out|^2 sits: in one or two outlier dimensions, or spread over many
        "out_top1_share": top_share(t.out),
        "out_top3_share": top_share(t.out, 3),
    }
    if rc.activation == "silu":  # today's names, kept for SiLU models
        m.update(
            silu_abs_below_0_1_fraction=valves["act_abs_below_0_1_fraction"],
            silu_abs_below_0_01_fraction=valves["act_abs_below_0_01_fraction"],
            silu_gate_min=valves["act_gate_min"],
        )
    return m


# --- the whole lesson -------------------------------------------------------------------------


def run(
    metadata: Mapping,
    tensors: Mapping[str, np.ndarray],
    token: str = " cat",
    *,
    timing_summary: Mapping | None = None,
    timing_sweep: list[Mapping] | None = None,
    timing_notes: Iterable[str] = (),
    model_gguf=None,
    forward: Mapping | None = None,
) -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports (numpy scalars; see lessons.plain), and the
    tables behind them, each computed once: "walk" (the Walk, arrays kept), "flops" (flops_table's
    rows), "timing" (matvec_vs_matmul's rows), "across" (across.block_rows: the forward pass over the
    passage, block by block) and "halves" (its streams, across.Halves); without `model_gguf` those two
    are empty and the pass's metrics null."""
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
    metrics.update(recipe_facts(wk, tensors))
    metrics.update(course_values())
    # beyond " cat" and block 0: many tokens through block 0, and every block of a real forward pass
    wide, rows, halves = tokens_and_blocks(model_gguf, metadata, tensors, wk.x, forward)
    metrics.update(wide)
    metrics.update(verdicts(metrics))
    return metrics, {"walk": wk, "flops": table, "timing": timing_rows, "across": rows, "halves": halves}


def compute(metadata: Mapping, tensors: Mapping[str, np.ndarray], token: str = " cat", **timing) -> dict:
    """The metrics of ``run`` alone."""
    return run(metadata, tensors, token, **timing)[0]


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """Check the lesson's published claims against this run's metrics."""
    extra = ["dgx-spark"] if metrics.get("timing_course_machine") else []
    context = claims_mod.run_context(model, sha256, metadata, extra=extra)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)

"""Lesson 3's steps 4 and 5: what a block costs per token, and one token against many (the timing stage's sweep)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bytesup.lessons.ffn_walk import Recipe
from bytesup.model.configs import DEEPSEEK_CODER_6_7B
from bytesup.timing.results import course_machine, number

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
RATIO_TOKENS = 256  # the N of the course's "256 times the work", and of timing_matmul_ratio_256_over_1
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
        r256 = next((r["time_over_n1"] for r in rows if r["n"] == RATIO_TOKENS), None)
        if r256 is not None:
            metrics["timing_matmul_ratio_256_over_1"], source = r256, "sweep.csv"
    metrics["timing_ratio_source"] = source or "missing"
    metrics["timing_ratio_tokens"] = RATIO_TOKENS
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

"""Lesson 3b's steps 1, 2 and 6: the FFN regrouped as a sum of slots, the slots that fire hardest, and the
course's toy bank."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from bytesup.lessons.ffn_stores.memory import matvec64, row_blocks
from bytesup.lessons.ffn_walk import Walk, dims, walk
from bytesup.model.forward import activation
from bytesup.model.layers import silu

BLOCK = 0

# The FFN-stores text's toy key-value bank (panel v): the slots' gate and up scores as printed. The weights
# behind them are not printed, but each coefficient a = SiLU(g) u follows from these two numbers.
TOY_SLOTS = (
    ("landmark + 'is in'", 1.70, 1.20),
    ("British context", -0.12, 0.14),
    ("function word next", -0.10, 0.31),
    ("tower-name continuation", 0.26, 0.69),
    ("weak noise slot", 0.20, 0.14),
    ("query, not a name", 1.17, -0.84),
)


# --- 1. the regrouping -------------------------------------------------------------------------


def ffn_by_slots(a: np.ndarray, W_down: np.ndarray) -> np.ndarray:
    """sum_i a_i v_i, one slot at a time: start from zero and add each value column, scaled.

    The clear version of W_down @ a. Same products, added in a different order.
    """
    out = np.zeros(W_down.shape[0], dtype=np.result_type(a, W_down))
    for i in range(a.shape[0]):
        out += a[i] * W_down[:, i]  # slot i writes its value v_i, scaled by its coefficient a_i
    return out


def coefficients(X: np.ndarray, w_gate, w_up, ffn_norm, eps, act: str = "silu", scale: float = 1.0) -> np.ndarray:
    """a = act(W_gate xn) * (W_up xn) for every embedding row x of X at once (the keys of many tokens).

    act: the model's activation by its table name; scale: the embedding scale (Gemma: sqrt(d_model)).

    The batched twin of the walk's first steps (ffn_walk.ffn_step): scale, RMSNorm each row, two
    matmuls, the gate.
    """
    X = np.asarray(X)
    if scale != 1.0:
        X = X * X.dtype.type(scale)  # Gemma: the embedding row times sqrt(d_model), as the walk does
    eps = X.dtype.type(eps)
    Xn = X / np.sqrt(np.mean(X * X, axis=1, keepdims=True) + eps) * ffn_norm
    return activation(act)(Xn @ w_gate.T) * (Xn @ w_up.T)


@dataclass
class Slots:
    """One token's walk through block ``block``'s FFN, seen slot by slot."""

    walk: Walk
    w_up: np.ndarray
    w_down: np.ndarray
    ffn_norm: np.ndarray
    eps: float
    a: np.ndarray  # the coefficients a_i = h_i
    by_slots: np.ndarray  # sum_i a_i v_i
    order: np.ndarray = field(repr=False)  # slot indices by decreasing |a_i|


def slots(metadata: Mapping, tensors: Mapping, token: str = " cat", block: int = BLOCK) -> Slots:
    wk = walk(metadata, tensors, token, block)  # checks the tensors' shapes against the metadata
    d = dims(metadata)
    w_up = np.asarray(tensors[f"blk.{block}.ffn_up.weight"], dtype=np.float32)
    w_down = np.asarray(tensors[f"blk.{block}.ffn_down.weight"], dtype=np.float32)
    norm = np.asarray(tensors[f"blk.{block}.ffn_norm.weight"], dtype=np.float32)
    a = wk.trace.h
    return Slots(
        walk=wk,
        w_up=w_up,
        w_down=w_down,
        ffn_norm=norm,
        eps=d["rms_epsilon"],
        a=a,
        by_slots=ffn_by_slots(a, w_down),
        order=np.argsort(-np.abs(a), kind="stable"),
    )


def regroup_metrics(s: Slots) -> dict:
    out = s.walk.down  # W_down @ h, the matvec
    a64 = s.a.astype(np.float64)  # float64 coefficients make every product below float64 (W_down stays float32)
    diff = np.abs(s.by_slots - out).max()
    ref = float(np.abs(out).max()) or 1.0
    return {
        "slots_per_layer": s.a.shape[0],
        "value_length": s.w_down.shape[0],
        "regroup_max_abs_diff": diff,  # float32, two summation orders
        "regroup_rel_diff": diff / ref,
        "regroup_max_abs_diff_float64": np.abs(ffn_by_slots(a64, s.w_down) - matvec64(s.w_down, a64)).max(),
        "ffn_out_length": np.linalg.norm(out.astype(np.float64)),
        "ffn_out_max_abs": ref,
    }


# --- 2. the slots that fire hardest -------------------------------------------------------------


def rebuild_error(s: Slots, counts: Iterable[int]) -> dict[int, float]:
    """|out - (sum over the m largest |a_i| of a_i v_i)| / |out|, for each m in counts.

    The partial sums run in float64, ROW_BLOCK slots at a time: each block's running sums start
    from the previous block's last one, so they are the one long cumulative sum, in the same order,
    with only d x ROW_BLOCK float64 numbers alive.
    """
    out = s.walk.down.astype(np.float64)
    a = s.a.astype(np.float64)
    n = np.linalg.norm(out) or 1.0
    n_slots = a.shape[0]
    wanted = {min(m, n_slots) for m in counts}
    err: dict[int, float] = {}
    carry = np.zeros(out.shape[0])  # the sum of the terms already added
    for cols in row_blocks(n_slots):
        idx = s.order[cols]  # the next slots, largest |a_i| first
        terms = np.asarray(s.w_down[:, idx], dtype=np.float64) * a[idx]  # a_i v_i, one column per slot
        partial = np.cumsum(np.column_stack([carry, terms]), axis=1)[:, 1:]  # carry, then one more term each
        for m in wanted.intersection(range(cols.start + 1, cols.stop + 1)):
            err[m] = float(np.linalg.norm(out - partial[:, m - 1 - cols.start]) / n)
        carry = partial[:, -1]
    return {m: err[min(m, n_slots)] for m in counts}


def rebuild_curve(s: Slots) -> dict[int, float]:
    """rebuild_error for every m from 1 to the number of slots: the right panel of the slots figure."""
    return rebuild_error(s, range(1, s.a.shape[0] + 1))


REBUILD_SHARE = 0.9  # "the slots that make up 90 % of the output": its relative error at most 10 %


def slot_metrics(s: Slots, top_k: int, curve: Mapping[int, float]) -> dict:
    """The top slots by |a_i|, and how many slots rebuild the output (from ``rebuild_curve``)."""
    a = s.a.astype(np.float64)
    g = s.walk.trace.g
    top = s.order[:top_k]
    counts = [c for c in (1, 10, 100, s.a.shape[0] // 4, s.a.shape[0] // 2) if c <= s.a.shape[0]]
    err = {m: curve[m] for m in counts}
    slots_for_half = next(m for m, e in curve.items() if e <= 0.5)
    slots_for_90 = next(m for m, e in curve.items() if e <= 1 - REBUILD_SHARE)
    return {
        "top_slots": top,
        "top_slot_coefficients": a[top],
        "top_slot_gate_scores": g[top],
        "top_slot": int(top[0]),
        "top_slot_coefficient": a[top[0]],
        "coefficients_negative_fraction": np.mean(a < 0),
        "coefficient_abs_median": np.median(np.abs(a)),
        "coefficient_abs_max": np.abs(a).max(),
        "rebuild_error_by_top_m": {str(m): e for m, e in err.items()},
        "slots_for_half_of_output": slots_for_half,  # error <= 50 %
        "slots_for_90pct_of_output": slots_for_90,  # error <= 10 %
        "rebuild_share": REBUILD_SHARE,
    }


def top_slot_table(s: Slots, top_k: int) -> list[dict]:
    t = s.walk.trace
    vlen = np.linalg.norm(s.w_down.astype(np.float64), axis=0)
    rows = []
    for rank, i in enumerate(s.order[:top_k], 1):
        rows.append(
            {
                "rank": rank,
                "slot": int(i),
                "gate_score": float(t.g[i]),
                "act_gate": float(activation(s.walk.recipe.activation)(t.g[i])),
                "up_score": float(t.u[i]),
                "coefficient": float(s.a[i]),
                "value_length": float(vlen[i]),
                "written_length": float(abs(s.a[i]) * vlen[i]),
            }
        )
    return rows


# --- 6. the toy bank and SiLU's dip ------------------------------------------------------------


def toy_metrics() -> dict:
    g = np.array([t[1] for t in TOY_SLOTS])
    u = np.array([t[2] for t in TOY_SLOTS])
    a = silu(g) * u
    z = np.linspace(-6.0, 0.0, 600_001)  # step 1e-5
    sz = silu(z)
    return {
        "toy_slot_coefficients": a,
        "toy_slot1_coefficient": a[0],
        "toy_slot_negative": [t[0] for t, ai in zip(TOY_SLOTS, a) if ai < 0],
        "silu_min": sz.min(),
        "silu_argmin": z[np.argmin(sz)],
    }

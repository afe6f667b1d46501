"""Lesson 3 beyond one token and one block: is " cat" through block 0 what this model does in general?

The course follows one token's embedding through block 0's FFN and finds a small turn ("nudged,
not overwritten"). Two measurements say how far that holds for the run's model:

  1. many tokens, block 0, the lesson's own set-up: rows of the embedding table spread evenly over
     the vocabulary (times the recipe's scale), each through block 0's FFN half exactly as the
     walk does it (ffn_walk.ffn_step, here on all rows at once): |FFN(x)| / |x|, the angle between x
     and x + FFN(x), the share of nearly shut valves, and where |FFN(x)|^2 sits (its largest
     dimension's share);
  2. the real forward pass over a passage of text (every position, every block): the residual
     stream entering each block, what the attention half adds to it (h = x + attention), and what
     the FFN half adds to h (y = h + FFN(h), on Gemma after post_ffw_norm): |FFN(h)| / |h| and the
     angle between h and y per block, medians over the positions.

Plus one fact of the arithmetic: RMSNorm divides its input by its own RMS first, so the FFN sees
only the direction of what it reads: FFN(c x) = FFN(x) for any c > 0 (up to eps). What it adds has
a size of its own, set by its weights, and whether that nudges or overwrites depends on how long
the residual already is. The medians leave out position 0 of the passage: the first position
collects very large values in many models (its length is reported on its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bytesup.lessons import resident_budget_bytes
from bytesup.lessons.ffn_walk import BLOCK, Recipe, dims, ffn_weights, recipe
from bytesup.model.forward import Model, Trace, activation, attention_block, embed, ffn_block, rms_norm, rope_angles
from bytesup.model.tokenizer import Tokenizer

# A passage of plain English for the forward pass (any text would do; this one is the lesson's).
PASSAGE = (
    "The cat sat by the window and watched the rain. When it stopped, she went out into the garden, "
    "where a dog was barking at two birds on the fence. Nobody knew why the birds did not fly away."
)
VOCAB_SAMPLE = 512  # embedding rows taken evenly over the vocabulary for block 0's FFN
TURN_DEG = 45.0  # a turn past this angle keeps less of the old direction than it adds: "overwritten"
CONCENTRATED = 0.25  # the largest dimension holding more of |FFN(x)|^2 than this: a few dimensions carry it
SCALES = (2.0, 10.0)  # the FFN's input scaled up by these: its output must not change (RMSNorm)


def _angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Angle between the rows of a and b, in degrees (float64)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def _length(a: np.ndarray) -> np.ndarray:
    return np.linalg.norm(a.astype(np.float64), axis=-1)


def top_share(out: np.ndarray, k: int = 1) -> np.ndarray:
    """Share of |out|^2 held by the k largest |elements| of each row: near 1 when a few outlier
    dimensions carry the vector, near k / d when its length is spread out."""
    sq = np.sort(out.astype(np.float64) ** 2, axis=-1)[..., ::-1]
    return sq[..., :k].sum(-1) / sq.sum(-1)


def ffn_rows(X: np.ndarray, w: Mapping[str, np.ndarray], eps: float, rc: Recipe) -> tuple[np.ndarray, np.ndarray]:
    """The walk's FFN half (ffn_walk.ffn_step) on many rows at once: (out, act(g)) for each row of X."""
    xn = rms_norm(X, w["ffn_norm"], eps)  # ffn rmsnorm, row by row
    g = xn @ w["ffn_gate"].T
    valve = activation(rc.activation)(g)
    down = (valve * (xn @ w["ffn_up"].T)) @ w["ffn_down"].T
    out = rms_norm(down, w["post_ffw_norm"], eps) if rc.post_ffn_norm else down
    return out, valve


def _quartiles(prefix: str, values: np.ndarray) -> dict:
    q = np.percentile(values, [10, 50, 90])
    return {f"{prefix}_p10": q[0], f"{prefix}_median": q[1], f"{prefix}_p90": q[2]}


def vocabulary_metrics(metadata: Mapping, tensors: Mapping, x: np.ndarray, n: int = VOCAB_SAMPLE) -> dict:
    """Block 0's FFN on `n` embedding rows spread evenly over the vocabulary (the lesson's set-up:
    the row times the recipe's scale, no attention first), and on the lesson's own x scaled."""
    d, rc = dims(metadata), recipe(metadata)
    w = ffn_weights(tensors, d, BLOCK, rc)
    E = tensors["token_embd.weight"]
    ids = np.unique(np.linspace(0, E.shape[0] - 1, n).round().astype(np.int64))
    X = np.asarray(E[ids], dtype=np.float32) * np.float32(rc.embed_scale)
    out, valve = ffn_rows(X, w, d["rms_epsilon"], rc)
    angle = _angle_deg(X, X + out)
    m = {
        "vocab_tokens": len(ids),
        "vocab_row_length_median": np.median(_length(X)),
        **_quartiles("vocab_out_over_x", _length(out) / _length(X)),
        **_quartiles("vocab_angle_deg", angle),
        "vocab_turned_past_share": np.mean(angle > TURN_DEG),
        "vocab_act_below_0_1_share_median": np.median(np.mean(np.abs(valve) < 0.1, axis=1)),
        "vocab_out_top1_share_median": np.median(top_share(out)),
        "turn_threshold_deg": TURN_DEG,
    }
    # RMSNorm first: the FFN reads only x's direction, so scaling x leaves its output unchanged
    base, _ = ffn_rows(x[None, :], w, d["rms_epsilon"], rc)
    scaled = [ffn_rows(np.float32(c) * x[None, :], w, d["rms_epsilon"], rc)[0] for c in SCALES]
    m["ffn_scale_change_max_rel"] = max(float(_length(s - base)[0] / _length(base)[0]) for s in scaled)
    m["ffn_scales_tried"] = list(SCALES)
    return m


@dataclass
class Halves:
    """The real forward pass over the passage, half by half: arrays (blocks, positions, d_model)."""

    ids: list[int]
    x: np.ndarray  # the residual entering each block
    h: np.ndarray  # after its attention half: x + attention(x)
    y: np.ndarray  # after its FFN half: h + FFN(h) (= the next block's x)


def forward_halves(model: Model, ids) -> Halves:
    """Run the model on `ids` from position 0 and keep the stream before and after each half, for
    every position; the logits' final norm and head are not needed here. The steps are the
    package's own (bytesup.model.forward: embed, attention_block, ffn_block); a traced pass of the
    same ids checks that the stream after each block is the model's."""
    spec, weights = model.spec, model.weights
    ids = model.check_ids(ids, None)
    cache = model.new_cache(len(ids))
    x = embed(weights, ids)
    if spec.embed_scale != 1.0:  # Gemma: the row times sqrt(d_model)
        x = x * np.float32(spec.embed_scale)
    xs, hs, ys = [], [], []
    for layer in range(spec.n_layers):
        w = weights.block(layer)
        cos, sin = rope_angles(np.arange(len(ids)), spec.n_rot, spec.layer_rope_base(layer))
        xs.append(np.array(x))
        x = attention_block(x, w, layer, 0, cos, sin, spec, cache)  # h = x + attention(rmsnorm(x))
        hs.append(np.array(x))
        x = ffn_block(x, w, spec)  # y = h + FFN(rmsnorm(h)) (Gemma: post_ffw_norm before the add)
        ys.append(np.array(x))
    return Halves(ids=[int(i) for i in ids], x=np.stack(xs), h=np.stack(hs), y=np.stack(ys))


def check_against_trace(model: Model, halves: Halves) -> float:
    """Largest |difference| / |stream| between our stream after each block and a traced model.forward's."""
    trace = Trace(all_positions=True)
    model.forward(halves.ids, trace=trace)
    traced = np.stack(trace.residual[1:])  # after block 0, 1, ...
    return float(np.abs(traced - halves.y).max() / np.abs(traced).max())


def block_rows(halves: Halves) -> list[dict]:
    """across_blocks.csv: per block, medians over the passage's positions 1.. (position 0 apart)."""
    rows = []
    for b in range(halves.x.shape[0]):
        x, h, y = halves.x[b], halves.h[b], halves.y[b]
        attn, ffn = h - x, y - h
        later = slice(1, None)
        rows.append(
            {
                "block": b,
                "residual_in_median": np.median(_length(x[later])),
                "attention_over_x_median": np.median((_length(attn) / _length(x))[later]),
                "ffn_over_h_median": np.median((_length(ffn) / _length(h))[later]),
                "ffn_angle_deg_median": np.median(_angle_deg(h, y)[later]),
                "block_angle_deg_median": np.median(_angle_deg(x, y)[later]),
                "ffn_top1_share_median": np.median(top_share(ffn)[later]),
                "first_position_residual_in": float(_length(x[:1])[0]),
            }
        )
    return rows


def pass_metrics(halves: Halves, rows: list[dict]) -> dict:
    """The passage's summary: block 0 against the blocks after it, and the residual's growth."""
    later = slice(1, None)
    ffn = halves.y - halves.h
    ratio = _length(ffn) / _length(halves.h)  # (blocks, positions)
    angle = _angle_deg(halves.h, halves.y)
    out_len = _length(halves.y[-1][later])
    first = [r["first_position_residual_in"] for r in rows] + [float(_length(halves.y[-1][:1])[0])]
    start, end = rows[0]["residual_in_median"], float(np.median(out_len))
    others = [r["residual_in_median"] for r in rows[1:]] + [end]
    later_angles = [r["ffn_angle_deg_median"] for r in rows[1:]]
    m = {
        "pass_text": PASSAGE,
        "pass_tokens": len(halves.ids),
        "pass_blocks": len(rows),
        "pass_block0_attention_over_x_median": rows[0]["attention_over_x_median"],
        "pass_block0_ffn_over_h_median": rows[0]["ffn_over_h_median"],
        "pass_block0_ffn_angle_deg_median": rows[0]["ffn_angle_deg_median"],
        "pass_block0_h_length_median": float(np.median(_length(halves.h[0][later]))),
        "pass_later_ffn_over_h_median": float(np.median(ratio[1:, later])) if len(rows) > 1 else None,
        "pass_later_ffn_angle_deg_median": float(np.median(angle[1:, later])) if len(rows) > 1 else None,
        "pass_later_ffn_angle_deg_max_block": max(later_angles) if later_angles else None,
        "pass_later_ffn_angle_deg_max_block_at": int(np.argmax(later_angles)) + 1 if later_angles else None,
        "pass_ffn_top1_share_median": float(np.median(top_share(ffn[:, later]))),
        "pass_residual_start_median": start,
        "pass_residual_end_median": end,
        "pass_residual_growth": end / start,
        "pass_first_position_max_length": max(first),
        "pass_first_position_max_over_others": max(first) / max(others),
    }
    return m


def embedding_facts(model: Model, m: Mapping) -> dict:
    """The embedding table's part in it: this model's rows are also its output head when the file
    ties them (no output.weight); they enter block 0 as they are, or scaled (Gemma: sqrt(d_model))."""
    spec = model.spec
    tied, scaled = spec.tied, spec.embed_scale != 1.0
    return {
        "model_tied": tied,
        "tied_unscaled_row_length_median": m["vocab_row_length_median"] if tied and not scaled else None,
        "tied_scaled_row_length_median": m["vocab_row_length_median"] if tied and scaled else None,
    }


# Everything the forward pass adds to the metrics (null without one).
PASS_KEYS = (
    "pass_text", "pass_tokens", "pass_blocks", "pass_block0_attention_over_x_median", "pass_block0_ffn_over_h_median",
    "pass_block0_ffn_angle_deg_median", "pass_block0_h_length_median", "pass_later_ffn_over_h_median",
    "pass_later_ffn_angle_deg_median", "pass_later_ffn_angle_deg_max_block", "pass_later_ffn_angle_deg_max_block_at",
    "pass_ffn_top1_share_median", "pass_residual_start_median", "pass_residual_end_median", "pass_residual_growth",
    "pass_first_position_max_length", "pass_first_position_max_over_others", "pass_check_max_rel_diff", "model_tied",
    "tied_unscaled_row_length_median", "tied_scaled_row_length_median",
)  # fmt: skip


def verdicts(m: Mapping) -> dict:
    """Which of the course's statements hold for this model, as numbers the narrative can cite:
    each key is the measured value where the statement it names is true, and None where it is
    not (so the sentence that needs it is left out, and the other one stays)."""

    def when(ok: bool, value):
        return value if ok and value is not None else None

    b0 = m.get("vocab_angle_deg_median")
    pass0 = m.get("pass_block0_ffn_angle_deg_median")
    later = m.get("pass_later_ffn_angle_deg_median")
    shut = m.get("act_abs_below_0_1_fraction")
    top1 = m.get("pass_ffn_top1_share_median")
    return {
        # block 0 in the real pass, after its attention half
        "pass_block0_overwrites_angle_deg": when(pass0 is not None and pass0 > TURN_DEG, pass0),
        "pass_block0_nudges_angle_deg": when(pass0 is not None and pass0 <= TURN_DEG, pass0),
        # where the FFN's output sits over the passage: spread over many dimensions, or in a few
        "ffn_output_spread_top1_share": when(top1 is not None and top1 <= CONCENTRATED, top1),
        "ffn_output_concentrated_top1_share": when(top1 is not None and top1 > CONCENTRATED, top1),
        "concentrated_share": CONCENTRATED,
        # block 0, the lesson's set-up, over many tokens
        "block0_overwrites_angle_deg": when(b0 is not None and b0 > TURN_DEG, b0),
        "block0_nudges_angle_deg": when(b0 is not None and b0 <= TURN_DEG, b0),
        # the blocks after it, in the real forward pass
        "later_blocks_nudge_angle_deg": when(later is not None and later <= TURN_DEG, later),
        "later_blocks_overwrite_angle_deg": when(later is not None and later > TURN_DEG, later),
        # the valves for the followed token: most nearly shut, or most passing something
        "valves_mostly_shut_share": when(shut is not None and shut > 0.5, shut),
        "valves_mostly_open_share": when(shut is not None and shut <= 0.5, None if shut is None else 1 - shut),
    }


def tokens_and_blocks(model_gguf, metadata: Mapping, tensors: Mapping, x: np.ndarray, forward: Mapping | None = None):
    """(metrics, rows of across_blocks.csv, the Halves): the vocabulary sample, then the forward pass
    when `model_gguf` is given (else its metrics are null, and rows and halves empty)."""
    m = vocabulary_metrics(metadata, tensors, x)
    if model_gguf is None:  # no forward pass: its numbers are null, and the sentences citing them left out
        return {**m, **dict.fromkeys(PASS_KEYS)}, [], None
    with Model.from_gguf(model_gguf, resident_budget_bytes=resident_budget_bytes(forward)) as model:
        ids = Tokenizer.from_metadata(model.gguf.metadata).encode(PASSAGE)[
            : model.spec.context_length
        ]  # a tiny model's context may be shorter
        halves = forward_halves(model, ids)
        m["pass_check_max_rel_diff"] = check_against_trace(model, halves)
        m.update(embedding_facts(model, m))
    rows = block_rows(halves)
    m.update(pass_metrics(halves, rows))
    return m, rows, halves

"""Lesson 3's deep dive, "What the FFN stores" (course the FFN-stores text): the FFN as a bank of key-value memories.

What is computed, in the lesson's order:
  1. the regrouping, on this model's real block-``block`` weights: W_down h is a sum of columns,
     W_down h = sum_i a_i v_i with a_i = act(gate_i . xn) (up_i . xn) and v_i = column i of
     W_down, act the model's activation (SiLU on llama, GELU-tanh on Gemma; the walk follows the
     model's recipe, bytesup.lessons.ffn_walk, so on Gemma x is the embedding row times sqrt(d_model) and
     the sum is what post_ffw_norm then rescales). The slot-by-slot sum is compared with the matvec;
  2. the slots with the largest |a_i| for the lesson's token, and how many slots it takes to
     rebuild the FFN's output;
  3. each top slot's value vector read through the unembedding (output.weight, or the token
     embedding table when the model ties them): which next tokens it promotes and suppresses;
  4. where the parameters are: this model (metadata and tensor table), and Llama-3-8B and GPT-2
     small from their published configurations (bytesup.model.param_counts);
  5. a ROME-style rank-one edit with C = I on the real W_down: k* = this token's h, and
     v* = W k* + |W k*| e_target / |e_target| (the old output plus a push along the target
     token's embedding, as long as that output). The edit maps k* to v* exactly and moves every
     other key k by (k*.k / |k*|^2)(v* - W k*); the keys tested are the h of other tokens. For
     comparison, ROME's full update with C = K K^T estimated from a separate draw of keys.

As in lesson 3, the FFN is fed the token's embedding row as the model's recipe prepares it (times
sqrt(d_model) on Gemma), without block 0's attention half first (a real forward pass runs it).
The weights are the float32 arrays the extract stage dequantized; the walk is float32 like the
model. The edit is done in float64: it is algebra on the weights, and float64 shows how exact it
is. Memory stays below peak_bytes (no FFN x FFN matrix; issue 15).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from bytesup.lessons import LessonInputError, figure
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.ffn_walk import Walk, dims, walk
from bytesup.lessons.spec import COMPANION, Headline, LessonSpec
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.model.arch import ARCHITECTURES
from bytesup.model.forward import activation
from bytesup.model.layers import silu
from bytesup.model.tokens import display, lookup, tokenizer_of

SPEC = LessonSpec(
    id="03b_what_the_ffn_stores",
    title="What the FFN stores",
    kind=COMPANION,
    position=3.5,
    source=(
        'Lesson 3\'s deep dive, from part 5 of the series "Transformers from the Weights Up": MLPs and what the FFN stores'
    ),
    reads=("metadata_json", "tensors_index", "tensors_csv"),
    tensors=("token_embd.weight", "blk.0.ffn_*", "?blk.0.post_ffw_norm.weight", "?output.weight"),
    tables=("top_slots.csv", "value_vectors.csv", "parameters.csv", "rome_drift.csv"),
    figures={
        "slot_coefficients.png": "Block 0 coefficients aᵢ for the token, the top ones marked, and the error of rebuilding the FFN output from the largest terms",
        "rome_drift.png": "Rank-one edit of block 0's W_down: each key's drift against its overlap with k*",
        "parameter_shares.png": "Parameter shares by part: this model, Llama-3-8B and GPT-2 small",
    },
    headlines=(
        Headline("slots_per_layer", "slots in block 0", fmt=",d"),
        Headline("regroup_rel_diff", "regrouping Σ aᵢvᵢ vs W_down·h, relative difference", fmt=".1e"),
        Headline("top_slot", "top slot for the token", fmt="d"),
        Headline("top_slot_coefficient", "its coefficient", fmt=".3f"),
        Headline("slots_for_90pct_of_output", "slots needed for 90 % of the output", fmt="d"),
        Headline("model_total", "model parameters", fmt=",d"),
        Headline("model_ffn_share", "FFN share of the model", fmt=".1%"),
        Headline("model_block_ffn_share", "FFN share of a block", fmt=".1%"),
        Headline("llama3_8b_total", "Llama-3-8B parameters", fmt=",d"),
        Headline("llama3_8b_ffn_share", "Llama-3-8B FFN share", fmt=".1%"),
        Headline("rome_target_rel_err", "rank-one edit: relative error at k*", fmt=".1e"),
        Headline("rome_relative_drift_median", "median relative drift of other keys, C = I", fmt=".3f"),
        Headline("rome_cov_relative_drift_median", "median relative drift of other keys, ROME's C", fmt=".4f"),
        Headline("rome_target_rank_before", "target token's rank before the edit", fmt=",d"),
        Headline("rome_target_rank_after", "target token's rank after the edit", fmt=",d"),
    ),
    config_keys=("token", "seed"),
    architectures=tuple(ARCHITECTURES),  # the walk follows every row of the table (ffn_walk.recipe)
    mem_mb=2000,  # peak_bytes at the specimen's block (d 4,096, FFN 11,008): 1.75 GB; measured 1.54 GB (run and notebook)
)
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


def metadata_map(doc: Mapping) -> Mapping:
    """The key -> value metadata, whether given the extract stage's metadata.json or the bare map.

    metadata.json (format bytesup.metadata/1) nests the keys under "metadata", beside the file's
    header facts and the keys' GGUF types.
    """
    inner = doc.get("metadata")
    if isinstance(inner, Mapping) and "general.architecture" not in doc:
        return inner
    return doc


def tensor_names(block: int = BLOCK) -> list[str]:
    """The tensors this lesson reads (output.weight only when the model has one)."""
    return ["token_embd.weight", "?output.weight"] + [
        f"blk.{block}.ffn_{p}.weight" for p in ("norm", "gate", "up", "down")
    ]


# --- memory: the big matrices a block of rows at a time ------------------------------------------
#
# W_down (d x FFN) stays the float32 array the extract stage wrote (memory-mapped); float64 work on
# it converts ROW_BLOCK rows (or slots) at a time, and no FFN x FFN matrix is ever formed. See
# ``run`` for the peak this leaves.

ROW_BLOCK = 256  # rows (or columns) of a big matrix converted to float64 at a time
KEY_BATCH = 256  # tokens whose keys are computed at a time


def row_blocks(n: int, size: int | None = None):
    """slice(0, size), slice(size, 2 size), ... covering range(n); size defaults to ROW_BLOCK."""
    size = size or ROW_BLOCK
    for i in range(0, n, size):
        yield slice(i, min(i + size, n))


def matvec64(W: np.ndarray, v: np.ndarray) -> np.ndarray:
    """W @ v in float64 for a float32 W, ROW_BLOCK rows at a time: the numbers of
    W.astype(float64) @ v without the float64 copy of W."""
    v = np.asarray(v, dtype=np.float64)
    out = np.empty(W.shape[0])
    for rows in row_blocks(W.shape[0]):
        out[rows] = np.asarray(W[rows], dtype=np.float64) @ v
    return out


def keys_times(K: np.ndarray, W: np.ndarray) -> np.ndarray:
    """K @ W.T in float64 (one row per key: what W writes for it), ROW_BLOCK rows of W at a time."""
    out = np.empty((K.shape[0], W.shape[0]))
    for rows in row_blocks(W.shape[0]):
        out[:, rows] = K @ np.asarray(W[rows], dtype=np.float64).T
    return out


def peak_bytes(d: int, ffn: int, vocab: int, n_keys: int = 2000, baseline: int = 300_000_000) -> dict[str, int]:
    """The lesson's peak memory, part by part, for a block of width d and ffn slots (bytes).

    The largest of the two phases, plus ``baseline`` (Python, numpy, matplotlib, the kernel):

      lesson.run, while the edits are measured:
        3 d ffn x 4         W_gate, W_up, W_down, float32 (memory-mapped, every page read)
      + 2 n ffn x 8         the keys K of the n tested tokens and of the n tokens behind ROME's C
      + 6 KEY_BATCH ffn x 4 one batch of keys being computed (two matmuls and SiLU's temporaries)
      + 2 n^2 x 8           the keys' Gram matrix and its solve (Woodbury; never ffn x ffn)
      + 3 n d x 8           both edits' drifts and W k for every key
      + 4 ROW_BLOCK ffn x 8 one block of rows of W, of the update, of W_hat and of W_hat - W
      + 2 n d x 4           the embedding rows read for the keys
      + VOCAB_BLOCK d x 4   one block of the unembedding, read from its file

      the notebook, once run() has returned:
        3 d ffn x 4 + d ffn x 8   the FFN weights and the one float64 copy of W_down it edits

    Before (issue 15), three ffn x ffn float64 matrices were alive at once, for ROME's C, and an SVD
    of the d x ffn update: 5.0 GB at the specimen's 4,096 x 11,008.
    """
    n = n_keys
    weights = 3 * d * ffn * 4
    run_parts = {
        "ffn_weights": weights,
        "keys": 2 * n * ffn * 8,
        "key_batch": 6 * KEY_BATCH * ffn * 4,
        "gram": 2 * n * n * 8,
        "drifts": 3 * n * d * 8,
        "row_blocks": 4 * ROW_BLOCK * ffn * 8,
        "embedding_rows": 2 * n * d * 4,
        "unembedding_block": min(VOCAB_BLOCK, vocab) * d * 4,
    }
    run_total = sum(run_parts.values())
    notebook_total = weights + d * ffn * 8
    return {
        **run_parts,
        "baseline": baseline,
        "run": run_total + baseline,
        "notebook": notebook_total + baseline,
        "peak": max(run_total, notebook_total) + baseline,
    }


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


def slot_metrics(s: Slots, top_k: int, curve: Mapping[int, float]) -> dict:
    """The top slots by |a_i|, and how many slots rebuild the output (from ``rebuild_curve``)."""
    a = s.a.astype(np.float64)
    g = s.walk.trace.g
    top = s.order[:top_k]
    counts = [c for c in (1, 10, 100, s.a.shape[0] // 4, s.a.shape[0] // 2) if c <= s.a.shape[0]]
    err = {m: curve[m] for m in counts}
    slots_for_half = next(m for m, e in curve.items() if e <= 0.5)
    slots_for_90 = next(m for m, e in curve.items() if e <= 0.1)
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


# --- 3. value vectors in vocabulary space --------------------------------------------------------


def unembedding(tensors: Mapping) -> tuple[str, np.ndarray]:
    """(name, matrix) of the output projection: output.weight, or token_embd when they are tied."""
    name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    if name not in tensors:
        raise LessonInputError("neither 'output.weight' nor 'token_embd.weight' was extracted")
    return name, tensors[name]


VOCAB_BLOCK = 4096  # rows of the unembedding read at a time


def vocab_scores(W_U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """W_U V in float32 (V: one vector per column, or one vector): a score per vocabulary entry.

    A memory-mapped W_U (the extract stage's .npy) is read from its file VOCAB_BLOCK rows at a
    time rather than through the mapping, so the whole table (4.2 GB at a 70B model's 128,256 x
    8,192) never sits in this process's memory; any other array is used as it is.
    """
    V = np.asarray(V, dtype=np.float32)
    base = getattr(W_U, "base", None)
    if not (isinstance(W_U, np.memmap) and isinstance(base, mmap.mmap) and W_U.flags.c_contiguous):
        return np.asarray(W_U, dtype=np.float32) @ V
    out = np.empty((W_U.shape[0], *V.shape[1:]), dtype=np.float32)
    row_bytes = W_U.itemsize * W_U.shape[1]
    with open(W_U.filename, "rb") as f:
        for rows in row_blocks(W_U.shape[0], VOCAB_BLOCK):
            f.seek(W_U.offset + rows.start * row_bytes)
            block = np.fromfile(f, dtype=W_U.dtype, count=(rows.stop - rows.start) * W_U.shape[1])
            out[rows] = block.reshape(-1, W_U.shape[1]).astype(np.float32, copy=False) @ V
    return out


def promoted(W_U: np.ndarray, v: np.ndarray, k: int, scores: np.ndarray | None = None):
    """W_U v: one score per vocabulary entry. Returns (scores, k highest ids, k lowest ids).

    scores: W_U v when already computed (vocab_scores of several vectors at once)."""
    scores = vocab_scores(W_U, v) if scores is None else scores
    hi = np.argsort(-scores, kind="stable")[:k]
    lo = np.argsort(scores, kind="stable")[:k]
    return scores, hi, lo


def value_vector_table(s: Slots, tensors: Mapping, metadata: Mapping, top_k: int, n_tokens: int) -> list[dict]:
    """For each top slot: the tokens its value vector promotes and suppresses through W_U.

    A slot with a negative coefficient writes -v_i for this token, so what it actually pushes
    for this token is the 'suppresses' list; the 'writes for this token' column says which.
    """
    vocab, tok_model = tokenizer_of(metadata)
    _, W_U = unembedding(tensors)
    top = s.order[:top_k]
    all_scores = vocab_scores(W_U, s.w_down[:, top])  # one pass over W_U for every top slot's value vector
    rows = []
    for rank, i in enumerate(top, 1):
        scores, hi, lo = promoted(W_U, s.w_down[:, i], n_tokens, all_scores[:, rank - 1])
        rows.append(
            {
                "rank": rank,
                "slot": int(i),
                "coefficient": float(s.a[i]),
                "writes_for_this_token": "+v (promotes list)" if s.a[i] >= 0 else "-v (suppresses list)",
                "promotes": " ".join(display(vocab[j], tok_model) for j in hi),
                "promote_scores": " ".join(f"{scores[j]:.3f}" for j in hi),
                "suppresses": " ".join(display(vocab[j], tok_model) for j in lo),
                "suppress_scores": " ".join(f"{scores[j]:.3f}" for j in lo),
            }
        )
    return rows


def ffn_output_reading(s: Slots, tensors: Mapping, metadata: Mapping, n_tokens: int) -> dict:
    """The whole FFN output read the same way: which tokens the sum of all slots promotes."""
    vocab, tok_model = tokenizer_of(metadata)
    name, W_U = unembedding(tensors)
    _, hi, _ = promoted(W_U, s.walk.down, n_tokens)
    return {
        "unembedding": name,
        "tied": name == "token_embd.weight",
        "ffn_out_promotes": [display(vocab[j], tok_model) for j in hi],
    }


# --- 4. where the parameters are -----------------------------------------------------------------


def _check_block_zero(arch: configs.Architecture, tensor_rows: Sequence[Mapping]) -> None:
    """Refuse, in one line, a file whose block 0 holds other tensor sizes than its metadata gives."""
    held: dict[str, int] = {}
    for r in tensor_rows:
        if r["name"].startswith("blk.0."):
            held[pc.role(r["name"])] = held.get(pc.role(r["name"]), 0) + int(r["elements"])
    wrong = [f"{part} holds {held.get(part, 0):,} weights, the metadata's sizes give {n:,}"
             for part, n in pc.block_counts(arch).items() if held.get(part, 0) != n]  # fmt: skip
    if wrong:
        raise LessonInputError(f"tensors.csv: block 0 does not match the metadata: {'; '.join(wrong[:3])}; the"
                               " file's metadata or its tensors are wrong")  # fmt: skip


def model_accounting(
    metadata: Mapping, tensor_rows: Sequence[Mapping], name: str = "this model"
) -> tuple[configs.Architecture, dict]:
    """This model's counts from its metadata, checked against the tensor table, plus its file bytes."""
    d = dims(metadata)
    vocab = metadata.get(f"{d['architecture']}.vocab_size") or len(tokenizer_of(metadata)[0])
    arch = pc.architecture_from_gguf(d, (r["name"] for r in tensor_rows), vocab, name)
    _check_block_zero(arch, tensor_rows)
    c = pc.count(arch)
    table = pc.table_counts(tensor_rows)
    p, b = table["params"], table["bytes"]
    total_table = sum(p.values())
    expect = {part: c[f"block_{part}"] * arch.n_layers for part in pc.BLOCK_PARTS if c[f"block_{part}"]}
    expect.update(token_embd=c["token_embd"], output_norm=c["output_norm"])
    if c["lm_head"]:
        expect["lm_head"] = c["lm_head"]
    mismatches = {k: (v, p.get(k, 0)) for k, v in expect.items() if p.get(k, 0) != v}
    ffn_bytes = sum(b.get(part, 0) for part in pc.FFN)
    all_bytes = sum(b.values())
    # per token the whole file is read except the lookup table, which a tied model reads as its head
    streamed_bytes = all_bytes - (0 if arch.tied else b.get("token_embd", 0))
    out = dict(c)
    out.update(
        total_from_table=total_table,
        table_blocks=table["n_blocks"],
        counts_match_table=not mismatches and total_table == c["total"],
        count_mismatches={k: list(v) for k, v in mismatches.items()},
        ffn_bytes_in_file=ffn_bytes,
        file_tensor_bytes=all_bytes,
        streamed_bytes_in_file=streamed_bytes,
        ffn_share_of_streamed_file_bytes=ffn_bytes / streamed_bytes,
        bytes_per_slot_in_file=ffn_bytes / c["slots"],
        tied=arch.tied,
    )
    return arch, out


def parameter_table(archs: Sequence[configs.Architecture], counted: Sequence[Mapping]) -> list[dict]:
    keys = list(pc.count(archs[0]).keys())
    return [{"quantity": k, **{a.name: c[k] for a, c in zip(archs, counted)}} for k in keys]


# --- 5. a rank-one edit (ROME with C = I) --------------------------------------------------------


def rome_edit(W: np.ndarray, k_star: np.ndarray, v_star: np.ndarray) -> np.ndarray:
    """W_hat = W + (v* - W k*) k*^T / (k*^T k*): ROME's update with the key covariance C = I.

    Check: W_hat k* = W k* + (v* - W k*) (k*.k*)/(k*.k*) = v*. Any other key k moves by
    (k*.k / |k*|^2)(v* - W k*): only its component along k* sees the edit.
    """
    r = v_star - W @ k_star  # what the old memory gets wrong for k*
    return W + np.outer(r, k_star) / (k_star @ k_star)


def rome_edit_cov(W: np.ndarray, k_star: np.ndarray, v_star: np.ndarray, C: np.ndarray) -> np.ndarray:
    """ROME's full update, W + (v* - W k*) (C^-1 k*)^T / ((C^-1 k*)^T k*), C = uncentered key covariance.

    Still maps k* to v* exactly; a key k now moves in proportion to (C^-1 k*).k, which is small
    for the directions the layer's keys usually take, so common keys are disturbed less.
    """
    u = np.linalg.solve(C, k_star)
    return W + np.outer(v_star - W @ k_star, u) / (u @ k_star)


def key_covariance(K: np.ndarray, ridge: float) -> np.ndarray:
    """C = K^T K / n (uncentered, one key per row) plus ridge x its mean eigenvalue on the diagonal.

    The ridge keeps C invertible when there are fewer keys than dimensions.
    """
    C = K.T @ K / max(K.shape[0], 1)
    scale = np.trace(C) / C.shape[0]
    return C + ridge * (scale if scale > 0 else 1.0) * np.eye(C.shape[0])


def solve_key_covariance(K: np.ndarray, ridge: float, k: np.ndarray) -> np.ndarray:
    """C^-1 k for C = key_covariance(K, ridge), without forming the FFN x FFN matrix C.

    C = K^T K / n + lam I, with lam = ridge x C's mean eigenvalue = ridge |K|^2 / (n FFN). Woodbury's
    identity moves the inverse to the small side, the n x n Gram matrix K K^T of the n keys:

        C^-1 k = (k - K^T (n lam I + K K^T)^-1 K k) / lam

    so the memory is n x n, not FFN x FFN (2,000 keys: 32 MB; 11,008 slots: 969 MB per matrix).
    """
    K = np.asarray(K, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    n = max(K.shape[0], 1)
    flat = K.ravel()
    scale = float(flat @ flat) / (n * K.shape[1])  # mean eigenvalue of K^T K / n: its trace over FFN
    lam = ridge * (scale if scale > 0 else 1.0)
    G = K @ K.T  # the keys' Gram matrix, n x n
    G[np.diag_indices_from(G)] += n * lam
    return (k - K.T @ np.linalg.solve(G, K @ k)) / lam


@dataclass
class Applied:
    """What applying one rank-one edit measured (see apply_edit)."""

    hit: np.ndarray  # W_hat k*: where the edited matrix sends the edited key
    drift: np.ndarray  # K (W_hat - W)^T: how far the edit moved each key's output, one row per key
    off_rank_one: float  # |(W_hat - W) - r u^T / (u.k*)|_F: the applied update's distance from the formula


def apply_edit(W: np.ndarray, k_star: np.ndarray, r: np.ndarray, u: np.ndarray, K: np.ndarray) -> Applied:
    """Apply W_hat = W + r u^T / (u.k*) in float64, ROW_BLOCK rows at a time, and measure as it goes.

    r = v* - W k*; u = k* is the edit with C = I (rome_edit), u = C^-1 k* ROME's (rome_edit_cov).
    Each block of rows is edited, then read: its rows of W_hat k*, of every key's drift
    K (W_hat - W)^T, and of the update as it landed, W_hat - W, against the rank-one formula.
    The same numbers as rome_edit and drift on the whole matrix, with two ROW_BLOCK x FFN float64
    blocks alive instead of three d x FFN matrices.
    """
    u = np.asarray(u, dtype=np.float64) / (u @ k_star)
    hit = np.empty(W.shape[0])
    D = np.empty((K.shape[0], W.shape[0]))
    off = 0.0
    for rows in row_blocks(W.shape[0]):
        Wb = np.asarray(W[rows], dtype=np.float64)
        step = np.outer(r[rows], u)  # these rows of the update r u^T / (u.k*)
        W_hat = Wb + step  # these rows of the edited matrix
        hit[rows] = W_hat @ k_star
        applied = W_hat - Wb  # the update as it landed, float64 rounding included
        D[:, rows] = K @ applied.T
        off += float(np.sum((applied - step) ** 2))
    return Applied(hit=hit, drift=D, off_rank_one=float(np.sqrt(off)))


def drift(W: np.ndarray, W_hat: np.ndarray, K: np.ndarray) -> np.ndarray:
    """W_hat k - W k for every key k (a row of K): how far the edit moved each output."""
    return K @ (W_hat - W).T


def predicted_drift(W: np.ndarray, k_star: np.ndarray, v_star: np.ndarray, K: np.ndarray) -> np.ndarray:
    """(k*.k / |k*|^2)(v* - W k*) for every key k: the formula, without building W_hat."""
    overlap = K @ k_star / (k_star @ k_star)
    return overlap[:, None] * (v_star - matvec64(W, k_star))[None, :]


@dataclass
class Rome:
    token: str
    target: str
    k_star: np.ndarray
    v_star: np.ndarray
    key_ids: np.ndarray
    key_names: list
    overlap: np.ndarray  # k*.k / |k*|^2 per key
    cosine: np.ndarray  # cos(k, k*) per key
    drift_length: np.ndarray  # |W_hat k - W k|
    output_length: np.ndarray  # |W k|
    relative_drift_cov: np.ndarray  # |W_cov k - W k| / |W k| with ROME's C = K K^T
    residual_length: float  # |v* - W k*|
    metrics: dict


COV_RIDGE = 0.1  # ridge for the key covariance, in units of its mean eigenvalue


def key_ids(vocab_size: int, exclude: Iterable[int], n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint draws of up to n token ids with the run's seed, never an excluded id.

    The first tests the edit; the second estimates the key covariance for ROME's C. A vocabulary
    too small for both is split half and half.
    """
    rng = np.random.default_rng(seed)
    pool = np.setdiff1d(np.arange(vocab_size), np.fromiter(exclude, dtype=np.int64))
    drawn = rng.permutation(pool)
    n = min(n, (drawn.size + 1) // 2)
    return np.sort(drawn[:n]), np.sort(drawn[n : 2 * n])


def rome(
    metadata: Mapping,
    tensors: Mapping,
    s: Slots,
    target: str,
    *,
    seed: int = 0,
    n_keys: int = 2000,
    neighbours: Sequence[str] = (),
) -> Rome:
    """Edit W_down so that this token's key k* writes v* = W k* + delta, and measure what else moves.

    delta points along the target token's embedding and is as long as the FFN's own output for
    this token, |W k*|: "write toward ' dog' as strongly as you now write anything".
    The keys the edit is tested on are the h vectors of the target, a few named neighbours, and
    n_keys tokens drawn with the run's seed.
    """
    vocab, tok_model = tokenizer_of(metadata)
    E = tensors["token_embd.weight"]
    _, W_U = unembedding(tensors)
    tid = s.walk.token_id
    target_id, _ = lookup(metadata, target)
    W = s.w_down  # float32, d x FFN; the float64 work below converts it a block of rows at a time
    k_star = s.a.astype(np.float64)
    old = matvec64(W, k_star)
    e_target = np.asarray(E[target_id], dtype=np.float64)
    delta = np.linalg.norm(old) * e_target / np.linalg.norm(e_target)
    v_star = old + delta
    r = v_star - old  # what the old memory gets wrong for k*

    named = []
    for word in [target, *neighbours]:
        try:
            i, _ = lookup(metadata, word)
        except KeyError:
            continue  # not a single token in this vocabulary: leave it out
        if i != tid and i not in named:
            named.append(i)
    sampled, fit_ids = key_ids(len(vocab), [tid, *named], n_keys, seed)
    ids = np.array(named + sampled.tolist(), dtype=np.int64)

    rc = s.walk.recipe

    def keys(rows):  # h of each token's embedding row: what W_down reads for that token, KEY_BATCH at a time
        K = np.empty((rows.size, k_star.size))
        for b in row_blocks(rows.size, KEY_BATCH):
            X = np.asarray(E[rows[b]], dtype=np.float32)
            K[b] = coefficients(X, s.walk.w_gate, s.w_up, s.ffn_norm, s.eps, rc.activation, rc.embed_scale)
        return K

    K = keys(ids)
    edit = apply_edit(W, k_star, r, k_star, K)  # C = I
    u_cov = solve_key_covariance(keys(fit_ids), COV_RIDGE, k_star)  # C^-1 k*, C from the second draw
    edit_cov = apply_edit(W, k_star, r, u_cov, K)
    olen = np.linalg.norm(keys_times(K, W), axis=1)  # |W k| of every key
    rel_cov = np.linalg.norm(edit_cov.drift, axis=1) / olen

    D = edit.drift
    P = predicted_drift(W, k_star, v_star, K)
    kk = k_star @ k_star
    overlap = K @ k_star / kk
    cos = overlap * np.sqrt(kk) / np.linalg.norm(K, axis=1)
    del K
    dlen = np.linalg.norm(D, axis=1)
    rel = dlen / olen
    hit = edit.hit
    # Singular values of the update r k*^T / |k*|^2: one is |r| / |k*| (closed form, rank one); every
    # other is at most the update's distance from that rank-one matrix (Weyl), measured as it was applied.
    sv1 = np.linalg.norm(r) / np.sqrt(kk)
    sv_ratio = edit.off_rank_one / sv1  # an upper bound of the second singular value over the first

    def cos_(p, q):
        return float(p @ q / (np.linalg.norm(p) * np.linalg.norm(q)))

    def rank_of(scores, token_id):  # 1 = the token W_U vec scores highest
        return int(np.sum(scores > scores[token_id])) + 1

    before_after = vocab_scores(W_U, np.column_stack([old, hit]))  # the FFN's output, before and after

    smp = slice(len(named), None)
    has_sample = ids.size > len(named)
    most = int(np.argmax(np.abs(cos[smp]))) + len(named) if has_sample else None
    metrics = {
        "rome_token": s.walk.token,
        "rome_target": target,
        "rome_target_id": target_id,
        "rome_v_star_rule": "v* = W k* + |W k*| e_target / |e_target|",
        "rome_key_length": np.sqrt(kk),
        "rome_old_output_length": np.linalg.norm(old),
        "rome_residual_length": np.linalg.norm(r),  # |v* - W k*| = |delta|
        "rome_target_max_abs_diff": np.abs(hit - v_star).max(),
        "rome_target_rel_err": np.linalg.norm(hit - v_star) / np.linalg.norm(v_star),
        "rome_update_singular_value": sv1,
        "rome_update_rank": 1 if sv_ratio < 1e-10 else None,  # None: not shown to be rank one
        "rome_update_singular_ratio": sv_ratio,
        "rome_drift_formula_max_abs_diff": np.abs(D - P).max(),
        "rome_drift_formula_rel_err": np.abs(D - P).max() / (np.abs(P).max() or 1.0),
        "rome_keys": int(ids.size),
        "rome_keys_sampled": int(ids.size - len(named)),
        "rome_cos_median": np.median(cos[smp]) if has_sample else None,
        "rome_abs_cos_median": np.median(np.abs(cos[smp])) if has_sample else None,
        "rome_abs_cos_max": np.abs(cos[smp]).max() if has_sample else None,
        "rome_abs_cos_max_token": display(vocab[int(ids[most])], tok_model) if has_sample else None,
        "rome_random_abs_cos_typical": np.sqrt(2 / np.pi / k_star.size),  # E|cos| of two random directions
        "rome_relative_drift_median": np.median(rel[smp]) if has_sample else None,
        "rome_relative_drift_max": rel[smp].max() if has_sample else None,
        "rome_relative_drift_over_10pct": np.mean(rel[smp] > 0.1) if has_sample else None,
        "rome_cov_keys_fit": int(fit_ids.size),
        "rome_cov_ridge": COV_RIDGE,
        "rome_cov_target_max_abs_diff": np.abs(edit_cov.hit - v_star).max(),
        "rome_cov_relative_drift_median": np.median(rel_cov[smp]) if has_sample else None,
        "rome_cov_relative_drift_max": rel_cov[smp].max() if has_sample else None,
        "rome_cov_relative_drift_over_10pct": np.mean(rel_cov[smp] > 0.1) if has_sample else None,
        "rome_out_cos_target_before": cos_(old, e_target),
        "rome_out_cos_target_after": cos_(hit, e_target),
        "rome_target_rank_before": rank_of(before_after[:, 0], target_id),
        "rome_target_rank_after": rank_of(before_after[:, 1], target_id),
    }
    named_keys = {}
    for j, i in enumerate(named):
        named_keys[display(vocab[i], tok_model)] = {
            "cos": cos[j],
            "overlap": overlap[j],
            "drift_length": dlen[j],
            "relative_drift": rel[j],
            "relative_drift_rome_c": rel_cov[j],
        }
    metrics["rome_named_keys"] = named_keys
    names = [display(vocab[int(i)], tok_model) for i in ids]
    return Rome(
        token=s.walk.token,
        target=target,
        k_star=k_star,
        v_star=v_star,
        key_ids=ids,
        key_names=names,
        overlap=overlap,
        cosine=cos,
        drift_length=dlen,
        output_length=olen,
        relative_drift_cov=rel_cov,
        residual_length=float(np.linalg.norm(r)),
        metrics=metrics,
    )


def rome_table(ro: Rome) -> list[dict]:
    """One row per key: its overlap with k*, the measured drift, and the formula's drift."""
    rows = []
    for j, i in enumerate(ro.key_ids):
        rows.append(
            {
                "token_id": int(i),
                "token": ro.key_names[j],
                "cos_with_k_star": ro.cosine[j],
                "overlap": ro.overlap[j],
                "drift_length": ro.drift_length[j],
                "formula_drift_length": abs(ro.overlap[j]) * ro.residual_length,
                "output_length": ro.output_length[j],
                "relative_drift": ro.drift_length[j] / ro.output_length[j],
                "relative_drift_rome_c": ro.relative_drift_cov[j],
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


# --- the whole lesson ---------------------------------------------------------------------------


def published_metrics() -> dict:
    """Llama-3-8B and GPT-2 small from their published configurations, prefixed."""
    out = {}
    for prefix, a in (("llama3_8b", configs.LLAMA3_8B), ("gpt2_small", configs.GPT2_SMALL)):
        c = pc.count(a)
        out.update({f"{prefix}_{k}": v for k, v in c.items()})
        out.update(
            {
                f"{prefix}_d_model": a.d_model,
                f"{prefix}_d_ff": a.d_ff,
                f"{prefix}_vocab": a.vocab,
                f"{prefix}_kv_heads": a.n_kv_heads,
                f"{prefix}_head_dim": a.head_dim,
                f"{prefix}_block_ffn_gate_share": c["block_ffn_gate"] / c["block_total"],
            }
        )
    return out


@dataclass
class Lesson:
    metrics: dict
    slots: Slots
    rome: Rome
    top_slots: list
    value_vectors: list
    parameters: list
    archs: list
    counted: list  # pc.count(...) of each architecture, this model's with its file bytes added
    rebuild_curve: dict  # m -> relative error of the output rebuilt from the m largest terms
    rome_drift: list  # rome_table(rome): one row per key the edit was tested on


def run(
    metadata: Mapping,
    tensors: Mapping,
    tensor_rows: Sequence[Mapping],
    token: str = " cat",
    target: str = " dog",
    *,
    seed: int = 0,
    n_keys: int = 2000,
    top_k: int = 10,
    n_tokens: int = 8,
    block: int = BLOCK,
    model: str = "this model",
    neighbours: Sequence[str] = (" cats", " kitten", " the", " house"),
) -> Lesson:
    """Everything the lesson computes: metrics, the arrays behind the figures, and its tables.

    Memory: see ``peak_bytes``; nothing here grows with FFN x FFN.
    """
    metadata = metadata_map(metadata)
    s = slots(metadata, tensors, token, block)
    m: dict = {"block": block, "token": token, "token_id": s.walk.token_id, "seed": seed}
    m.update(regroup_metrics(s))
    curve = rebuild_curve(s)
    m.update(slot_metrics(s, top_k, curve))
    m.update(ffn_output_reading(s, tensors, metadata, n_tokens))
    arch, acc = model_accounting(metadata, tensor_rows, model)
    m.update({f"model_{k}": v for k, v in acc.items()})
    m.update(published_metrics())
    m.update(toy_metrics())
    ro = rome(metadata, tensors, s, target, seed=seed, n_keys=n_keys, neighbours=neighbours)
    m.update(ro.metrics)
    archs = [arch, configs.LLAMA3_8B, configs.GPT2_SMALL]
    counted = [acc, pc.count(configs.LLAMA3_8B), pc.count(configs.GPT2_SMALL)]
    return Lesson(
        metrics=m,
        slots=s,
        rome=ro,
        top_slots=top_slot_table(s, top_k),
        value_vectors=value_vector_table(s, tensors, metadata, top_k, n_tokens),
        parameters=parameter_table(archs, counted),
        archs=archs,
        counted=counted,
        rebuild_curve=curve,
        rome_drift=rome_table(ro),
    )


def compute(
    metadata: Mapping,
    tensors: Mapping,
    tensor_rows: Sequence[Mapping],
    token: str = " cat",
    target: str = " dog",
    **kwargs,
) -> dict:
    """Every number the lesson reports, as a flat dict (numpy values; see lessons.plain)."""
    return run(metadata, tensors, tensor_rows, token, target, **kwargs).metrics


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """Check the lesson's published claims against this run's metrics."""
    context = claims_mod.run_context(model, sha256, None if metadata is None else metadata_map(metadata))
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- figures ------------------------------------------------------------------------------------


def plot_slots(s: Slots, curve: Mapping[int, float], top_k: int = 10, title: str = ""):
    """Left: every slot's coefficient a_i, the top ones marked. Right: how many slots rebuild the output
    (``curve`` from rebuild_curve)."""
    a = s.a.astype(np.float64)
    fig, (ax1, ax2) = figure(1, 2)
    ax1.vlines(np.arange(a.size), 0, a, color="0.55", lw=0.5)
    top = s.order[:top_k]
    ax1.plot(top, a[top], "o", color="C3", ms=3, label=f"top {top_k} by |a|")
    ax1.axhline(0, color="k", lw=0.6)
    ax1.set_xlabel("slot i")
    ax1.set_ylabel(f"a_i = {s.walk.recipe.activation}(g_i) u_i")
    ax1.legend(fontsize=7)
    ax2.plot(list(curve), list(curve.values()), color="C0")
    ax2.set_xscale("log")
    ax2.set_ylim(0, 1.05)
    ax2.axhline(0.1, color="0.6", ls="--", lw=0.8)
    ax2.set_xlabel("slots kept (largest |a_i| first)")
    ax2.set_ylabel("|out - partial sum| / |out|")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_rome(ro: Rome, title: str = ""):
    """Left: each key's drift against its overlap with k*, on the formula's line.
    Right: the sampled keys' relative drift, with C = I and with ROME's C = K K^T."""
    fig, (ax1, ax2) = figure(1, 2)
    x = ro.overlap
    ax1.scatter(x, ro.drift_length, s=4, color="C0", lw=0, label="keys: measured |W_hat k - W k|")
    s = np.array([min(float(x.min()), 0.0), 0.0, 1.0])  # from the lowest overlap up to k* itself
    ax1.plot(s, np.abs(s) * ro.residual_length, color="C3", lw=0.8, label="|k*.k|/|k*|^2 x |v* - W k*|")
    n_named = len(ro.key_ids) - int(ro.metrics["rome_keys_sampled"])
    for j in range(n_named):
        ax1.annotate(ro.key_names[j], (x[j], ro.drift_length[j]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax1.plot([1.0], [ro.residual_length], "*", color="C1", ms=9, label="k* itself (moved onto v*)")
    ax1.set_xlabel("overlap k*.k / |k*|^2")
    ax1.set_ylabel("output drift")
    ax1.legend(fontsize=6, loc="upper left")
    rel = ro.drift_length[n_named:] / ro.output_length[n_named:]
    rel_cov = ro.relative_drift_cov[n_named:]
    lo = max(min(float(rel.min()), float(rel_cov.min())), 1e-6)
    hi = max(float(rel.max()), float(rel_cov.max()), lo * 10)
    bins = np.geomspace(lo, hi, 50)
    ax2.hist(rel, bins=bins, color="C0", alpha=0.6, label="C = I")
    ax2.hist(rel_cov, bins=bins, color="C2", alpha=0.6, label="C = K K^T (ROME)")
    ax2.set_xscale("log")
    ax2.set_xlabel("|W_hat k - W k| / |W k|, sampled keys")
    ax2.set_ylabel("keys")
    ax2.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_parameters(archs: Sequence[configs.Architecture], counted: Sequence[Mapping]):
    """Where each model's parameters are: attention, FFN, norms, embeddings and head, as shares."""
    parts = (
        ("FFN", lambda c: c["ffn_total"]),
        ("attention", lambda c: c["attention_total"]),
        ("norms", lambda c: c["layers"] * c["block_norms"] + c["output_norm"]),
        ("embeddings + head", lambda c: c["embeddings_and_head"] + c["positions"]),
    )
    fig, ax = figure()
    left = np.zeros(len(archs))
    for (label, f), colour in zip(parts, ("C3", "C0", "C2", "C7")):
        share = np.array([f(c) / c["total"] for c in counted])
        ax.barh(range(len(archs)), share, left=left, color=colour, label=label)
        for y, (l0, w) in enumerate(zip(left, share)):
            if w > 0.05:
                ax.text(l0 + w / 2, y, f"{100 * w:.1f} %", ha="center", va="center", fontsize=8, color="w")
        left += share
    ax.set_yticks(range(len(archs)), [f"{a.name}\n{c['total']:,} params" for a, c in zip(archs, counted)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of all parameters")
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4, frameon=False)
    fig.tight_layout()
    return fig

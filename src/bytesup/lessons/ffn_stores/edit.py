"""Lesson 3b's step 5: a rank-one edit of W_down (ROME with C = I, and with ROME's key covariance)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bytesup.lessons.ffn_stores import memory
from bytesup.lessons.ffn_stores.memory import keys_times, matvec64, row_blocks
from bytesup.lessons.ffn_stores.regroup import Slots, coefficients
from bytesup.lessons.ffn_stores.vocabulary import unembedding, vocab_scores
from bytesup.model.tokens import display, lookup, tokenizer_of

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
        for b in row_blocks(rows.size, memory.KEY_BATCH):
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

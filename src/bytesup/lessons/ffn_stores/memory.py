"""Memory for lesson 3b: the big matrices a block of rows at a time, and the peak that leaves (issue 15)."""

from __future__ import annotations

import numpy as np

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


VOCAB_BLOCK = 4096  # rows of the unembedding read at a time

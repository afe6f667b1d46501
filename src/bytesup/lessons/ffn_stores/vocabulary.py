"""Lesson 3b's step 3: value vectors read through the unembedding (which next tokens a slot promotes)."""

from __future__ import annotations

import mmap
from collections.abc import Mapping

import numpy as np

from bytesup.lessons import LessonInputError
from bytesup.lessons.ffn_stores import memory
from bytesup.lessons.ffn_stores.memory import row_blocks
from bytesup.lessons.ffn_stores.regroup import Slots
from bytesup.model.tokens import display, tokenizer_of

# --- 3. value vectors in vocabulary space --------------------------------------------------------


def unembedding(tensors: Mapping) -> tuple[str, np.ndarray]:
    """(name, matrix) of the output projection: output.weight, or token_embd when they are tied."""
    name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    if name not in tensors:
        raise LessonInputError("neither 'output.weight' nor 'token_embd.weight' was extracted")
    return name, tensors[name]


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
        for rows in row_blocks(W_U.shape[0], memory.VOCAB_BLOCK):
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

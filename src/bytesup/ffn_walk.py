"""One token's embedding through one block's feed-forward network, on the extracted tensors.

Shared by lesson 3 (a layer is matrix multiplication) and its deep dive (what the FFN stores):
the model's sizes read from the metadata, the block's FFN weights with their shapes checked, and
the walk itself (bytesup.layers.ffn), kept as arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bytesup.layers import FFNTrace, ffn
from bytesup.lessons import LessonInputError
from bytesup.tokens import lookup

BLOCK = 0


def meta_value(metadata: Mapping, key: str, default=None):
    if key in metadata:
        return metadata[key]
    if default is not None:
        return default
    raise LessonInputError(f"metadata.json: no key {key!r}; is this a GGUF of a llama-style model?")


def dims(metadata: Mapping) -> dict:
    """The model's sizes, read with the architecture's prefix (llama.embedding_length, ...)."""
    arch = meta_value(metadata, "general.architecture")
    n_embd = int(meta_value(metadata, f"{arch}.embedding_length"))
    n_head = int(meta_value(metadata, f"{arch}.attention.head_count"))
    # Grouped-query attention stores fewer key/value heads; absent means "as many as query heads".
    n_head_kv = int(meta_value(metadata, f"{arch}.attention.head_count_kv", n_head))
    head_dim = int(meta_value(metadata, f"{arch}.attention.key_length", n_embd // n_head))
    return {
        "architecture": arch,
        "embedding_length": n_embd,
        "feed_forward_length": int(meta_value(metadata, f"{arch}.feed_forward_length")),
        "block_count": int(meta_value(metadata, f"{arch}.block_count")),
        "head_count": n_head,
        "head_count_kv": n_head_kv,
        "head_dim": head_dim,
        "value_dim": int(meta_value(metadata, f"{arch}.attention.value_length", head_dim)),
        "rms_epsilon": float(meta_value(metadata, f"{arch}.attention.layer_norm_rms_epsilon")),
    }


@dataclass(frozen=True)
class Walk:
    token: str
    token_id: int
    vocab_form: str
    x: np.ndarray  # the token's embedding row, float32
    w_gate: np.ndarray
    trace: FFNTrace


def _weights(tensors: Mapping, d: dict, block: int) -> dict[str, np.ndarray]:
    """The lesson's tensors as float32, with their shapes checked in numpy order (rows x cols)."""
    n_embd, n_ff = d["embedding_length"], d["feed_forward_length"]
    want = {
        f"blk.{block}.ffn_norm.weight": (n_embd,),
        f"blk.{block}.ffn_gate.weight": (n_ff, n_embd),
        f"blk.{block}.ffn_up.weight": (n_ff, n_embd),
        f"blk.{block}.ffn_down.weight": (n_embd, n_ff),
    }
    out = {}
    for name, shape in want.items():
        if name not in tensors:
            raise LessonInputError(f"tensor {name!r} missing from the extracted tensors; add it to the selection")
        arr = np.asarray(tensors[name], dtype=np.float32)
        if arr.shape != shape:
            raise LessonInputError(
                f"tensor {name!r} has shape {arr.shape}, expected {shape} (numpy order, rows x cols)"
            )
        out[name.split(".")[2]] = arr  # "ffn_gate", ...
    return out


def walk(metadata: Mapping, tensors: Mapping, token: str = " cat", block: int = BLOCK) -> Walk:
    """Look the token up, take its embedding row, and run it through block ``block``'s FFN."""
    d = dims(metadata)
    tid, form = lookup(metadata, token)
    if "token_embd.weight" not in tensors:
        raise LessonInputError("tensor 'token_embd.weight' missing from the extracted tensors")
    E = tensors["token_embd.weight"]
    if E.ndim != 2 or E.shape[1] != d["embedding_length"] or E.shape[0] <= tid:
        raise LessonInputError(
            f"tensor 'token_embd.weight' has shape {E.shape}; expected (vocab, {d['embedding_length']})"
        )
    x = np.array(E[tid], dtype=np.float32)  # one row: the token's vector
    w = _weights(tensors, d, block)
    trace = ffn(x, w["ffn_gate"], w["ffn_up"], w["ffn_down"], w["ffn_norm"], d["rms_epsilon"])
    return Walk(token=token, token_id=tid, vocab_form=form, x=x, w_gate=w["ffn_gate"], trace=trace)


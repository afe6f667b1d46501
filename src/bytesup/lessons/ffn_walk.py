"""One token's embedding through one block's feed-forward network, on the extracted tensors.

Shared by lesson 3 (a layer is matrix multiplication) and its deep dive (what the FFN stores):
the model's sizes read from the metadata, the block's FFN weights with their shapes checked, and
the walk itself, kept as arrays. The walk follows the model's own recipe from the architecture
table (bytesup.model.arch), step by step:

    x   = embedding row x embedding scale        (Gemma: sqrt(d_model); llama: 1)
    xn  = RMSNorm(x) * ffn_norm
    g   = W_gate xn,  u = W_up xn
    h   = act(g) * u                             (act: SiLU for llama, GELU-tanh for Gemma)
    down = W_down h
    out = RMSNorm(down) * post_ffw_norm          (Gemma only; llama adds down as it is)
    y   = x + out                                (the residual)

On a llama model this is exactly bytesup.model.layers.ffn (same operations, same float32 rounding).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bytesup.lessons import LessonInputError
from bytesup.model.arch import ARCHITECTURES
from bytesup.model.forward import activation as activation_fn
from bytesup.model.layers import FFNTrace, matvec, rms_norm
from bytesup.model.tokens import lookup

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
class Recipe:
    """What the walk takes from the architecture table for this model."""

    architecture: str
    activation: str  # "silu" or "gelu_tanh": the gate's non-linearity
    embed_scale: float  # the embedding row is multiplied by this before block 0
    post_ffn_norm: bool  # the FFN's output is RMS-normalized (post_ffw_norm) before the residual add


def recipe(metadata: Mapping) -> Recipe:
    """The architecture table's row for this model; an architecture it lacks is refused in one line.

    Only the row's FFN facts are read (activation, embedding scale, post-FFN norm), so the lesson
    needs no metadata beyond its own (dims).
    """
    arch = meta_value(metadata, "general.architecture")
    facts = ARCHITECTURES.get(arch)
    if facts is None:
        raise LessonInputError(
            f"metadata.json: architecture {arch!r} is not in the architecture table"
            f" (known: {', '.join(ARCHITECTURES)}); lessons 3 and 3b follow only those"
        )
    scale = 1.0
    if facts.embed_scale == "sqrt_d_model":
        scale = math.sqrt(int(meta_value(metadata, f"{arch}.embedding_length")))
    return Recipe(
        architecture=arch,
        activation=facts.activation,
        embed_scale=scale,
        post_ffn_norm="post_ffn_norm" in facts.tensors,
    )


@dataclass(frozen=True)
class Walk:
    token: str
    token_id: int
    vocab_form: str
    recipe: Recipe
    embedding: np.ndarray  # the token's embedding row as stored, float32
    x: np.ndarray  # the block's input: the row times recipe.embed_scale, float32
    w_gate: np.ndarray
    down: np.ndarray  # W_down h, before any post-FFN norm (= trace.out on llama)
    trace: FFNTrace  # trace.out: what is added to x; trace.y = x + trace.out


def ffn_step(x, w: Mapping[str, np.ndarray], eps: float, rc: Recipe) -> tuple[FFNTrace, np.ndarray]:
    """The FFN half of one block for one token, as the model's recipe has it: (trace, W_down h)."""
    act = activation_fn(rc.activation)
    xn = rms_norm(x, w["ffn_norm"], eps)  # ffn rmsnorm
    g = matvec(w["ffn_gate"], xn)  # n_embd -> n_ff: the valves
    u = matvec(w["ffn_up"], xn)  # n_embd -> n_ff: the values
    h = act(g) * u  # the gate: SiLU (SwiGLU) or GELU-tanh (GeGLU)
    down = matvec(w["ffn_down"], h)  # n_ff -> n_embd
    out = rms_norm(down, w["post_ffw_norm"], eps) if rc.post_ffn_norm else down  # Gemma: normalize what is added
    y = x + out  # the residual: add an adjustment, don't replace the vector
    return FFNTrace(xn=xn, g=g, u=u, h=h, out=out, y=y), down


def ffn_weights(tensors: Mapping, d: dict, block: int, rc: Recipe) -> dict[str, np.ndarray]:
    """The lesson's tensors as float32, with their shapes checked in numpy order (rows x cols)."""
    n_embd, n_ff = d["embedding_length"], d["feed_forward_length"]
    want = {
        f"blk.{block}.ffn_norm.weight": (n_embd,),
        f"blk.{block}.ffn_gate.weight": (n_ff, n_embd),
        f"blk.{block}.ffn_up.weight": (n_ff, n_embd),
        f"blk.{block}.ffn_down.weight": (n_embd, n_ff),
    }
    if rc.post_ffn_norm:
        want[f"blk.{block}.post_ffw_norm.weight"] = (n_embd,)
    out = {}
    for name, shape in want.items():
        if name not in tensors:
            raise LessonInputError(f"tensor {name!r} missing from the extracted tensors; add it to the selection")
        arr = np.asarray(tensors[name], dtype=np.float32)
        if arr.shape != shape:
            raise LessonInputError(
                f"tensor {name!r} has shape {arr.shape}, expected {shape} (numpy order, rows x cols)"
            )
        out[name.split(".")[2]] = arr  # "ffn_gate", ..., "post_ffw_norm"
    return out


def walk(metadata: Mapping, tensors: Mapping, token: str = " cat", block: int = BLOCK) -> Walk:
    """Look the token up, take its embedding row, and run it through block ``block``'s FFN."""
    d = dims(metadata)
    rc = recipe(metadata)
    tid, form = lookup(metadata, token)
    if "token_embd.weight" not in tensors:
        raise LessonInputError("tensor 'token_embd.weight' missing from the extracted tensors")
    E = tensors["token_embd.weight"]
    if E.ndim != 2 or E.shape[1] != d["embedding_length"] or E.shape[0] <= tid:
        raise LessonInputError(
            f"tensor 'token_embd.weight' has shape {E.shape}; expected (vocab, {d['embedding_length']})"
        )
    row = np.array(E[tid], dtype=np.float32)  # one row: the token's vector
    x = row * np.float32(rc.embed_scale) if rc.embed_scale != 1.0 else row  # Gemma scales it by sqrt(d_model)
    w = ffn_weights(tensors, d, block, rc)
    trace, down = ffn_step(x, w, d["rms_epsilon"], rc)
    return Walk(
        token=token,
        token_id=tid,
        vocab_form=form,
        recipe=rc,
        embedding=row,
        x=x,
        w_gate=w["ffn_gate"],
        down=down,
        trace=trace,
    )

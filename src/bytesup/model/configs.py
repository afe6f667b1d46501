"""Published model configurations, and the tensors a llama-style model of a configuration holds.

One home for the models the course quotes but this machine cannot download: the course's
specimen (deepseek-coder-6.7b-instruct), Llama-3-8B/70B, Llama-3.1-405B and GPT-2 small, each
from the config.json its authors published. Lessons, the capstone and the synthetic test models
derive their shapes from here (``llama_tensor_shapes``), never from literals of their own.

Shapes are numpy order, rows x row length (bytesup.gguf.file.gguf_to_numpy_shape is where GGUF's
innermost-first dimensions are reversed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bytesup.gguf.sizes import type_bytes
from bytesup.model.arch import ArchSpec, layer_windows


@dataclass(frozen=True)
class Architecture:
    name: str
    d_model: int
    d_ff: int
    n_layers: int
    vocab: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    gated_ffn: bool = True  # SwiGLU: gate, up and down matrices; False: up and down only
    biases: bool = False  # GPT-2 style: a bias vector after every matrix
    norm_vectors: int = 1  # numbers per element of a norm: 1 (RMSNorm gain), 2 (LayerNorm gain + bias)
    tied: bool = False  # the output head reuses the token embedding table
    qk_norm: bool = False  # per-head RMSNorm of q and k before rope: attn_q_norm, attn_k_norm (head_dim each; Gemma 3)
    post_norms: bool = False  # a norm on the attention and the FFN output before each residual add (Gemma 2/3)
    qkv_bias: bool = False  # a bias on q, k and v only (Qwen 2); `biases` puts one after every matrix
    n_positions: int = 0  # learned absolute positions (GPT-2); 0 for rotary models
    context_length: int = 0  # the published maximum context (config.json max_position_embeddings)
    source: str = ""


# Published configurations (the models' config.json files on their hubs).
LLAMA3_8B = Architecture(
    "Llama-3-8B",
    d_model=4096,
    d_ff=14336,
    n_layers=32,
    vocab=128256,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    context_length=8192,
    source="meta-llama/Meta-Llama-3-8B config.json",
)
LLAMA31_405B = Architecture(
    "Llama-3.1-405B",
    d_model=16384,
    d_ff=53248,
    n_layers=126,
    vocab=128256,
    n_heads=128,
    n_kv_heads=8,
    head_dim=128,
    context_length=131072,
    source="meta-llama/Llama-3.1-405B config.json",
)
GPT2_SMALL = Architecture(
    "GPT-2 small",
    d_model=768,
    d_ff=3072,
    n_layers=12,
    vocab=50257,
    n_heads=12,
    n_kv_heads=12,
    head_dim=64,
    gated_ffn=False,
    biases=True,
    norm_vectors=2,
    tied=True,
    n_positions=1024,
    context_length=1024,
    source="openai-community/gpt2 config.json",
)
LLAMA3_70B = Architecture(
    "Llama-3-70B",
    d_model=8192,
    d_ff=28672,
    n_layers=80,
    vocab=128256,
    n_heads=64,
    n_kv_heads=8,
    head_dim=128,
    context_length=8192,
    source="meta-llama/Meta-Llama-3-70B config.json",
)
# The course's specimen from its published configuration (deepseek-ai/deepseek-coder-6.7b-instruct,
# config.json: hidden_size 4096, intermediate_size 11008, 32 layers, 32 attention heads and as many
# key/value heads, vocab_size 32256, max_position_embeddings 16384, tie_word_embeddings false).
DEEPSEEK_CODER_6_7B = Architecture(
    "deepseek-coder-6.7b",
    d_model=4096,
    d_ff=11008,
    n_layers=32,
    vocab=32256,
    n_heads=32,
    n_kv_heads=32,
    head_dim=128,
    context_length=16384,
    source="deepseek-ai/deepseek-coder-6.7b-instruct config.json",
)


PUBLISHED = {a.name: a for a in (DEEPSEEK_CODER_6_7B, LLAMA3_8B, LLAMA3_70B, LLAMA31_405B, GPT2_SMALL)}


def llama_tensor_shapes(a: Architecture) -> list[tuple[str, tuple[int, ...]]]:
    """(GGUF tensor name, numpy shape) of every tensor a llama-style model of this configuration holds,
    from the architecture table (bytesup.model.arch.ArchSpec.tensor_shapes): the llama row, or the row
    whose extra tensors the flags name (q/k norms and post-norms: gemma3; q/k/v biases: qwen2)."""
    if a.biases or a.n_positions or not a.gated_ffn:
        raise ValueError(f"{a.name}: only llama-style layouts (no biases after every matrix, rotary positions, "
                         "a gated FFN)")  # fmt: skip
    rows = {(False, False, False): "llama", (True, True, False): "gemma3", (False, False, True): "qwen2"}
    arch = rows.get((a.qk_norm, a.post_norms, a.qkv_bias))
    if arch is None:
        raise ValueError(f"{a.name}: no row of the architecture table has q/k norms={a.qk_norm}, "
                         f"post-norms={a.post_norms}, q/k/v biases={a.qkv_bias}")  # fmt: skip
    spec = ArchSpec(
        arch=arch,
        n_layers=a.n_layers,
        d_model=a.d_model,
        d_ff=a.d_ff,
        n_heads=a.n_heads,
        n_kv_heads=a.n_kv_heads,
        head_dim=a.head_dim,
        n_rot=a.head_dim,
        vocab=a.vocab,
        context_length=a.context_length,
        rope_base=10000.0,
        rms_eps=1e-5,
        tied=a.tied,
    )  # shapes only
    return spec.tensor_shapes()


def kv_bytes_per_token(a: Architecture, cache_type: str = "F16") -> int:
    """Bytes of K and V one token of context adds to the cache: 2 x blocks x KV heads x head size
    x bytes per element (llama.cpp's default cache type is F16)."""
    return kv_bytes(a.n_layers, a.n_kv_heads, a.head_dim, a.head_dim, cache_type)


def kv_bytes(blocks: int, kv_heads: int, key_length: int, value_length: int, cache_type: str = "F16") -> int:
    """The same from the sizes a GGUF's metadata gives: blocks x KV heads x (key + value length)
    x bytes per element (a model may store values of another length than keys).

    That is what one token of context adds while every layer still keeps every position; a model
    with sliding-window layers stops adding on those past their window (``kv_cache_bytes``)."""
    return blocks * kv_heads * (key_length + value_length) * type_bytes(cache_type, 1)


# The KV cache layer by layer: (bytes one token of context adds to the layer, its window), the
# window None on a layer that keeps every position (a global layer) and n on a sliding one, which
# keeps only the last n.
KVLayers = tuple[tuple[int, int | None], ...]


def kv_layers(
    blocks: int,
    kv_heads: int,
    key_length: int,
    value_length: int,
    cache_type: str = "F16",
    windows: Sequence[int | None] = (),
) -> KVLayers:
    """The cache's layers from a model's sizes; `windows` per layer (empty: every layer global)."""
    per_layer = kv_bytes(1, kv_heads, key_length, value_length, cache_type)
    windows = tuple(windows) or (None,) * blocks
    if len(windows) != blocks:
        raise ValueError(f"{len(windows)} windows for {blocks} blocks")
    return tuple((per_layer, w) for w in windows)


def spec_kv_layers(spec: ArchSpec | Architecture, cache_type: str = "F16") -> KVLayers:
    """A model's cache layers: an ArchSpec's sliding layers keep their window (bytesup.model.arch),
    a published Architecture's layers all keep every position."""
    window = getattr(spec, "layer_window", lambda layer: None)
    windows = [window(i) for i in range(spec.n_layers)]
    return kv_layers(spec.n_layers, spec.n_kv_heads, spec.head_dim, spec.head_dim, cache_type, windows)


def file_kv_layers(metadata: Mapping, cache_type: str = "F16") -> KVLayers:
    """A GGUF's cache layers from its metadata alone: blocks x KV heads x (key + value length) per
    layer, and each layer's window where the architecture table reads sliding-window layers from the
    file (bytesup.model.arch; Gemma 3: only every sixth layer keeps the whole context). A file of an
    architecture the table lacks keeps every position on every layer: all its metadata can say."""
    arch = metadata.get("general.architecture")

    def key(name, default=None):
        value = metadata.get(f"{arch}.{name}", default)
        if value is None:
            raise ValueError(f"metadata key {arch}.{name} is missing")
        return int(value)

    n_head = key("attention.head_count")
    k_len = key("attention.key_length", key("embedding_length") // n_head)
    blocks = key("block_count")
    return kv_layers(blocks, key("attention.head_count_kv", n_head), k_len, key("attention.value_length", k_len),
                     cache_type, layer_windows(metadata, blocks))  # fmt: skip


def context_for_kv_share(layers: KVLayers, weight_bytes: int, share: float, limit: int) -> int | None:
    """The fewest positions in the cache at which its bytes are `share` of what a decode step reads
    (the weights' `weight_bytes` beside them), or None when that takes more than `limit` (the context
    length): a model whose sliding layers stop growing may never get there. share 0.5: the cache as
    large as the weights."""

    def reached(t: int) -> bool:
        kv = kv_cache_bytes(layers, t)
        return kv >= share * (weight_bytes + kv)

    if not reached(limit):
        return None
    lo, hi = 0, limit  # the cache only grows with the positions: bisect for the first that reaches it
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reached(mid) else (mid + 1, hi)
    return lo


def kv_cache_bytes(layers: KVLayers, context):
    """Bytes the KV cache holds after `context` tokens (a number, or an array of them): every
    layer's bytes per token times the positions it keeps, all of them or its window's. Only the
    global layers grow without end; a sliding layer stops growing at its window."""
    c = np.asarray(context, dtype=np.int64)
    total = sum(per * (c if w is None else np.minimum(c, w)) for per, w in layers)
    total = np.asarray(total, dtype=np.int64)
    return int(total) if total.ndim == 0 else total

"""The model, by hand: a forward pass in NumPy (llama, qwen2, gemma3), one step per function, with a KV cache.

    with Model.from_gguf("smollm2-135m.gguf") as model:
        cache = model.new_cache()
        logits = model.forward(prompt_ids, cache)      # prefill: (len(prompt_ids), vocab)
        logits = model.forward([next_id], cache)       # decode: one token, (1, vocab)

`transformer()` is the whole network, step by step in the lesson's order (as llama2.c's
transformer()): embed -> for each block: RMSNorm, Q K V, rope, grouped-query attention with a
causal mask, output projection, residual; RMSNorm, gated FFN, residual -> final norm -> unembed.
What differs between architectures comes from the one table in bytesup.model.arch, read through
`spec`: the gate's activation (SiLU, GELU-tanh), the rope layout, Q K V biases (qwen2), and
gemma3's embedding scale, per-head q/k norms, post-attention/post-FFN norms and sliding-window
layers with their own rope base.

Arithmetic is float32 throughout, like the model. Activations are (tokens, features): a batch of
N new tokens multiplies x @ W.T once per matrix (prefill); one token is a matvec (decode), where
the time goes into reading the weights (memory-bound: 4 bytes per multiply-add).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Self

import numpy as np

from bytesup.errors import BytesupError
from bytesup.gguf.file import GGUFFile
from bytesup.model.arch import ArchSpec, spec_from_metadata
from bytesup.model.layers import gelu, silu
from bytesup.model.layers import rms_norm as rms_norm_vector
from bytesup.model.weights import (
    DEFAULT_RESIDENT_BUDGET,
    BlockWeights,
    block_float32_elements,
    choose_mode,
    open_weights,
    weight_bytes_per_token,
)


class ForwardInputError(BytesupError, ValueError):
    """Token ids the model cannot take (empty, out of range, too many); one line."""


def gelu_tanh(z):
    """GELU with the tanh approximation (Gemma's gate): 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))."""
    return gelu(z, approximate="tanh")


# The FFN gate's non-linearity by the name the architecture table gives (spec.activation).
ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh}


def activation(name: str):
    """The function for an activation name of the table ('silu', 'gelu_tanh'); one line if unknown."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"activation {name!r} is not known (known: {', '.join(ACTIVATIONS)})") from None


# -- what a token costs, from the metadata alone --------------------------------------------


def macs_per_token(spec: ArchSpec, context_len: int) -> int:
    """Multiply-adds in the matmuls for one token that attends to `context_len` positions.

    Per block: Q K V (d_model x (q_dim + 2 kv_dim)), scores (n_heads x head_dim x context),
    weighted sum of V (the same), output (q_dim x d_model), gate, up, down (3 d_model d_ff);
    then the head (vocab x d_model). Norms, rope, softmax and SiLU are O(d) and left out.
    """
    d = spec.d_model
    projections = d * (spec.q_dim + 2 * spec.kv_dim) + spec.q_dim * d + 3 * d * spec.d_ff
    attention = 2 * spec.n_heads * spec.head_dim * context_len
    return spec.n_layers * (projections + attention) + spec.vocab * d


def flops_per_token(spec: ArchSpec, context_len: int) -> int:
    """2 FLOPs (a multiply and an add) per multiply-add of `macs_per_token`."""
    return 2 * macs_per_token(spec, context_len)


def weight_float32_bytes_per_token(spec: ArchSpec) -> int:
    """float32 weight bytes one decode step reads: every block, final norm, head, one embedding row.

    (File bytes as stored, per tensor: bytesup.model.weights.weight_bytes_per_token.)
    """
    d = spec.d_model
    return 4 * (d + spec.n_layers * block_float32_elements(spec) + d + spec.vocab * d)


# -- the KV cache ---------------------------------------------------------------------------


def cache_max_tokens(spec: ArchSpec, max_tokens: int | None) -> int:
    """A KV cache's size in tokens: the context length unless smaller; a one-line error outside 1..that."""
    n = spec.context_length if max_tokens is None else int(max_tokens)
    if not 0 < n <= spec.context_length:
        raise ForwardInputError(
            f"KV cache max_tokens {max_tokens} must be between 1 and {spec.arch}.context_length = {spec.context_length}"
        )
    return n


class KVCache:
    """Keys and values of every position seen so far, per block: (n_kv_heads, positions, head_dim).

    Grows by doubling up to max_tokens (default: the model's context length), so a short chat
    does not allocate 8192 positions of every block up front.
    """

    def __init__(self, spec: ArchSpec, max_tokens: int | None = None):
        self.spec = spec
        self.max_tokens = cache_max_tokens(spec, max_tokens)
        self.n = 0  # positions stored
        self._capacity = 0
        self.k: list[np.ndarray] = []
        self.v: list[np.ndarray] = []

    def _grow(self, needed: int) -> None:
        cap = min(self.max_tokens, max(needed, 2 * self._capacity, 64))
        s = self.spec
        for layer in range(s.n_layers):
            k = np.empty((s.n_kv_heads, cap, s.head_dim), np.float32)
            v = np.empty((s.n_kv_heads, cap, s.head_dim), np.float32)
            if self._capacity:
                k[:, : self.n] = self.k[layer][:, : self.n]
                v[:, : self.n] = self.v[layer][:, : self.n]
                self.k[layer], self.v[layer] = k, v
            else:
                self.k.append(k)
                self.v.append(v)
        self._capacity = cap

    def append(self, layer: int, k: np.ndarray, v: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
        """Store k, v (n_kv_heads, N, head_dim) at positions start..start+N-1 of `layer`;
        return all keys and values up to there."""
        end = start + k.shape[1]
        if end > self._capacity:
            self._grow(end)
        self.k[layer][:, start:end] = k
        self.v[layer][:, start:end] = v
        return self.k[layer][:, :end], self.v[layer][:, :end]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)


# -- the trace: what a forward pass did -----------------------------------------------------


@dataclass
class Trace:
    """Pass one to forward() to record what happened.

    residual[0] is the stream after the embedding, residual[i+1] after block i; each is
    (N, d_model) when all_positions else (d_model,) for the last token (cheap). attention[i]
    (heads x queries x keys) only when keep_attention. macs counts the multiply-adds the
    matmuls actually performed (a prefill's attention counts the masked-out entries too: they
    were multiplied); weight_bytes the float32 bytes of weights used, weight_file_bytes the
    same tensors' bytes in the file.
    """

    all_positions: bool = False
    keep_attention: bool = False
    residual: list = field(default_factory=list)
    final_norm: np.ndarray | None = None
    attention: list = field(default_factory=list)
    macs: int = 0
    weight_bytes: int = 0
    weight_file_bytes: int = 0

    def keep(self, x: np.ndarray) -> None:
        self.residual.append(x.copy() if self.all_positions else x[-1].copy())

    def matmul(self, x: np.ndarray, w: np.ndarray) -> None:
        self.macs += x.shape[0] * w.shape[0] * w.shape[1]


# -- the steps ------------------------------------------------------------------------------


def embed(weights, ids: np.ndarray) -> np.ndarray:
    """Token ids -> their rows of token_embd: (N, d_model). A lookup, no arithmetic."""
    return np.ascontiguousarray(weights.embed_rows(ids), dtype=np.float32)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """bytesup.model.layers.rms_norm on each row (token) of x: x / sqrt(mean(x^2) + eps) * weight."""
    if x.ndim == 1:
        return rms_norm_vector(x, weight, eps)
    scale = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + x.dtype.type(eps))
    return x / scale * weight


def matmul(x: np.ndarray, w: np.ndarray, trace: Trace | None = None) -> np.ndarray:
    """y = x @ W.T: every row of x times every row of W. This is where the time goes."""
    if trace is not None:
        trace.matmul(x, w)
    if x.shape[0] == 1:  # one token (decode): a matrix-vector product, BLAS's gemv, W read once
        return (w @ x[0])[None, :]
    return x @ w.T


def rope_angles(positions: np.ndarray, n_rot: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position * base^(-2i/n_rot) for pair i: (N, n_rot/2) each."""
    inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    angles = np.outer(positions.astype(np.float64), inv_freq)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str = "adjacent") -> np.ndarray:
    """Rotate pairs of each head's dimensions by its position's angles.

    layout "adjacent" (llama GGUFs): pairs (x0, x1), (x2, x3), ...; "neox" (qwen2, gemma3):
    pairs (x0, x_{n_rot/2}), (x1, x_{n_rot/2+1}), ... (Hugging Face's rotate_half).
    x is (N, heads, head_dim); pair i of token t turns by angle t_pos * base^(-2i/n_rot).
    Only the first n_rot dimensions rotate (all of them for llama). Returns a new array.
    """
    n_rot = 2 * cos.shape[-1]
    if layout == "adjacent":
        first, second = slice(0, n_rot, 2), slice(1, n_rot, 2)
    elif layout == "neox":
        first, second = slice(0, n_rot // 2), slice(n_rot // 2, n_rot)
    else:
        raise ValueError(f"rope layout {layout!r} is not known (known: adjacent, neox)")
    x0, x1 = x[..., first], x[..., second]  # first and second of each pair
    c, s = cos[:, None, :], sin[:, None, :]  # the same angles for every head
    out = x.copy()
    out[..., first] = x0 * c - x1 * s
    out[..., second] = x0 * s + x1 * c
    return out


def softmax(scores: np.ndarray) -> np.ndarray:
    """exp(s - max) / sum, along the last axis (keys); -inf (masked) gives exactly 0."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(q, k, v, start: int, spec: ArchSpec, trace: Trace | None = None, window: int | None = None):
    """Grouped-query causal attention for N new queries against all T keys so far.

    q: (N, n_heads, head_dim); k, v: (n_kv_heads, T, head_dim). Query head h reads K/V head
    h // group. window: a sliding layer's query sees only the last `window` positions, itself
    included. Returns (N, n_heads * head_dim).
    """
    n, t = q.shape[0], k.shape[1]
    kv, g, hd = spec.n_kv_heads, spec.group, spec.head_dim
    # group the query heads under the K/V head they share: (kv, g*N, hd), no Python loop over heads
    qg = q.reshape(n, kv, g, hd).transpose(1, 2, 0, 3).reshape(kv, g * n, hd)
    # scores: every query against every key, / sqrt(head_dim)
    scores = qg @ k.transpose(0, 2, 1)  # (kv, g*N, T)
    scores *= np.float32(spec.attn_scale)
    # causal mask: query at position start+i sees keys 0..start+i
    scores = scores.reshape(kv, g, n, t)
    if n > 1:
        future = np.arange(t)[None, :] > (start + np.arange(n))[:, None]  # (N, T)
        scores[:, :, future] = -np.inf
    # sliding window: ... and only keys start+i-window+1 .. start+i
    if window is not None and t > window:
        too_old = np.arange(t)[None, :] <= (start + np.arange(n))[:, None] - window  # (N, T)
        scores[:, :, too_old] = -np.inf
    # softmax over the keys: attention weights, each row sums to 1
    weights = softmax(scores)
    # weighted sum of the values
    out = weights.reshape(kv, g * n, t) @ v  # (kv, g*N, hd)
    if trace is not None:
        trace.macs += 2 * spec.n_heads * n * t * hd
        if trace.keep_attention:
            trace.attention.append(weights.reshape(spec.n_heads, n, t).copy())
    return out.reshape(kv, g, n, hd).transpose(2, 0, 1, 3).reshape(n, spec.q_dim)


def attention_block(x, w: BlockWeights, layer: int, start: int, cos, sin, spec, cache, trace=None):
    """The attention half of a block, residual included: x + W_o · attention(rope(Q), rope(K), V).

    Steps the table switches on: Q K V biases (qwen2), per-head norms of q and k and a norm of
    the output before the residual add (gemma3), a sliding window on some layers (gemma3).
    """
    n = x.shape[0]
    # attention rmsnorm
    xn = rms_norm(x, w.attn_norm, spec.rms_eps)
    # Q, K, V: one matmul with the fused (q_dim + 2 kv_dim, d_model) matrix
    qkv = matmul(xn, w.wqkv, trace)
    if w.bqkv is not None:  # qwen2: a bias on each of Q, K, V
        qkv = qkv + w.bqkv
    q = qkv[:, : spec.q_dim].reshape(n, spec.n_heads, spec.head_dim)
    k = qkv[:, spec.q_dim : spec.q_dim + spec.kv_dim].reshape(n, spec.n_kv_heads, spec.head_dim)
    v = qkv[:, spec.q_dim + spec.kv_dim :].reshape(n, spec.n_kv_heads, spec.head_dim)
    if w.q_norm is not None:  # gemma3: RMSNorm of each head's q and k (over head_dim)
        q, k = rms_norm(q, w.q_norm, spec.rms_eps), rms_norm(k, w.k_norm, spec.rms_eps)
    # rope: rotate Q and K by their positions (V is not rotated)
    q, k = rope(q, cos, sin, spec.rope_layout), rope(k, cos, sin, spec.rope_layout)
    # KV cache: append this batch's keys and values, read back all positions so far
    k_all, v_all = cache.append(layer, k.transpose(1, 0, 2), v.transpose(1, 0, 2), start)
    # grouped-query causal attention (within the window on a sliding layer)
    a = attention(q, k_all, v_all, start, spec, trace, window=spec.layer_window(layer))
    # output projection
    out = matmul(a, w.wo, trace)
    if w.post_attn_norm is not None:  # gemma3: normalize what attention adds
        out = rms_norm(out, w.post_attn_norm, spec.rms_eps)
    # the residual connection
    return x + out


def ffn(xn, w_gate, w_up, w_down, spec: ArchSpec, trace=None):
    """The gated FFN on normalized input: W_down(act(W_gate xn) * W_up xn), act from spec.activation.

    w_gate, w_up: (d_ff, d_model) (or one fused (2 d_ff, d_model) matrix passed as w_gate with
    w_up None); w_down: (d_model, d_ff). xn is (N, d_model); returns (N, d_model).
    """
    if w_up is None:  # gate and up: one matmul with the fused (2 d_ff, d_model) matrix
        gu = matmul(xn, w_gate, trace)
        g, u = gu[:, : spec.d_ff], gu[:, spec.d_ff :]
    else:
        g, u = matmul(xn, w_gate, trace), matmul(xn, w_up, trace)
    # the gate decides how much of each up value passes: SiLU (SwiGLU) or GELU-tanh (GeGLU)
    h = activation(spec.activation)(g) * u
    # down projection
    return matmul(h, w_down, trace)


def ffn_block(x, w: BlockWeights, spec: ArchSpec, trace=None):
    """The FFN half, residual included: x + W_down(act(W_gate xn) * W_up xn) (gemma3 normalizes
    that before the add)."""
    # ffn rmsnorm
    xn = rms_norm(x, w.ffn_norm, spec.rms_eps)
    # gate and up (fused), activation, down
    out = ffn(xn, w.w_gate_up, None, w.w_down, spec, trace)
    if w.post_ffn_norm is not None:  # gemma3: normalize what the FFN adds
        out = rms_norm(out, w.post_ffn_norm, spec.rms_eps)
    # the residual connection
    return x + out


def unembed(x: np.ndarray, weights, spec: ArchSpec, trace=None) -> np.ndarray:
    """Logits: x @ head.T, chunk by chunk of head rows (output.weight, or token_embd when tied)."""
    logits = np.empty((x.shape[0], spec.vocab), np.float32)
    for start, rows in weights.head_chunks():
        logits[:, start : start + rows.shape[0]] = matmul(x, rows, trace)
    return logits


def transformer(ids: np.ndarray, weights, spec: ArchSpec, cache: KVCache, trace: Trace | None = None):
    """The whole network for N new tokens at positions cache.n .. cache.n + N - 1 -> (N, vocab) logits."""
    start, n = cache.n, len(ids)
    # embedding: copy each token's row of token_embd into the residual stream x
    x = embed(weights, ids)
    if trace is not None:
        trace.weight_bytes += x.nbytes
        trace.weight_file_bytes += n * weights.row_file_bytes()
    if spec.embed_scale != 1.0:  # gemma3: the row times sqrt(d_model)
        x = x * np.float32(spec.embed_scale)
    if trace is not None:
        trace.keep(x)
    # rope angles for these positions, shared by every block with the same rope base
    angles = {}
    for base in {spec.layer_rope_base(i) for i in range(spec.n_layers)}:
        angles[base] = rope_angles(np.arange(start, start + n), spec.n_rot, base)
    # forward all the layers
    for layer in range(spec.n_layers):
        w = weights.block(layer)
        cos, sin = angles[spec.layer_rope_base(layer)]
        # attention half: norm, Q K V, rope, grouped-query attention, output projection, residual
        x = attention_block(x, w, layer, start, cos, sin, spec, cache, trace)
        # FFN half: norm, gate and up, act(gate) * up, down, residual
        x = ffn_block(x, w, spec, trace)
        if trace is not None:
            trace.keep(x)
            trace.weight_bytes += w.float32_bytes
            trace.weight_file_bytes += w.file_bytes
    cache.n = start + n
    # final rmsnorm
    x = rms_norm(x, weights.output_norm, spec.rms_eps)
    if trace is not None:
        trace.final_norm = x.copy() if trace.all_positions else x[-1].copy()
        trace.weight_bytes += weights.output_norm.nbytes + 4 * spec.vocab * spec.d_model
        trace.weight_file_bytes += weights.gguf.tensor(spec.tensor_name("output_norm")).n_bytes
        trace.weight_file_bytes += weights.head_file_bytes()
    # classifier into logits
    return unembed(x, weights, spec, trace)


# -- the model ------------------------------------------------------------------------------


class Model:
    """A GGUF model ready to run: spec (the shape), weights (resident or streaming), forward()."""

    def __init__(self, gguf: GGUFFile, spec: ArchSpec, mode: str):
        self.gguf, self.spec, self.mode = gguf, spec, mode
        self.weights = open_weights(gguf, spec, mode)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike, *, resident_budget_bytes: int = DEFAULT_RESIDENT_BUDGET,
                  mode: str | None = None) -> Model:  # fmt: skip
        """Open a GGUF; keep float32 weights resident when they fit the budget, else stream them.

        mode="resident" or "streaming" overrides the budget.
        """
        gguf = GGUFFile(path)
        try:
            spec = spec_from_metadata(gguf.metadata, gguf.tensor_names, path=path)
            return cls(gguf, spec, mode or choose_mode(spec, resident_budget_bytes))
        except BaseException:
            gguf.close()
            raise

    def close(self) -> None:
        self.weights = None
        self.gguf.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def new_cache(self, max_tokens: int | None = None) -> KVCache:
        return KVCache(self.spec, max_tokens)

    def weight_bytes_per_token(self):
        """File and float32 bytes of weights one decode step reads (see weights.weight_bytes_per_token)."""
        return weight_bytes_per_token(self.gguf, self.spec)

    def check_ids(self, ids, cache: KVCache | None) -> np.ndarray:
        """ids as an int64 array, or a one-line ForwardInputError before any heavy work."""
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise ForwardInputError(f"token ids must be a flat list, got shape {arr.shape}")
        if arr.size == 0:
            raise ForwardInputError("no token ids given: forward() needs at least one token")
        if not np.issubdtype(arr.dtype, np.integer):
            raise ForwardInputError(f"token ids must be integers, got {arr.dtype}")
        bad = (arr < 0) | (arr >= self.spec.vocab)
        if bad.any():
            i = int(np.argmax(bad))
            raise ForwardInputError(
                f"token id {int(arr[i])} at index {i} is outside the vocabulary 0..{self.spec.vocab - 1}"
                f" ({self.spec.arch}.vocab_size)"
            )
        past = cache.n if cache is not None else 0
        if past + arr.size > self.spec.context_length:
            raise ForwardInputError(
                f"{past} cached + {arr.size} new tokens exceed {self.spec.arch}.context_length ="
                f" {self.spec.context_length}; shorten the input or start a new cache"
            )
        if cache is not None and past + arr.size > cache.max_tokens:
            raise ForwardInputError(
                f"{past} cached + {arr.size} new tokens exceed the KV cache's max_tokens = {cache.max_tokens}"
            )
        return arr.astype(np.int64)

    def forward(self, ids, cache: KVCache | None = None, *, trace: Trace | None = None) -> np.ndarray:
        """Logits (len(ids), vocab) float32 for N new tokens; their K/V are appended to cache.

        Without a cache the tokens sit at positions 0..N-1 and nothing is kept.
        """
        if self.weights is None:
            raise ValueError(f"{self.gguf.path}: model is closed")
        ids = self.check_ids(ids, cache)
        if cache is None:
            cache = KVCache(self.spec, max_tokens=len(ids))
        elif cache.spec != self.spec:
            raise ForwardInputError("this KV cache belongs to a different model")
        return transformer(ids, self.weights, self.spec, cache, trace)

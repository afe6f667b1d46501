"""The model, by hand: a forward pass in NumPy (every row of bytesup.model.arch), one step per function, with a KV cache.

    with Model.from_gguf("smollm2-135m.gguf") as model:
        cache = model.new_cache()
        logits = model.forward(prompt_ids, cache)      # prefill: (len(prompt_ids), vocab)
        logits = model.forward([next_id], cache)       # decode: one token, (1, vocab)

`transformer()` is the whole network, step by step in the lesson's order (as llama2.c's
transformer()): embed -> for each block: RMSNorm, Q K V, rope, grouped-query attention with a
causal mask, output projection, residual; RMSNorm, gated FFN, residual -> final norm -> unembed.
What differs between architectures comes from the one table in bytesup.model.arch, read through
`spec`: the gate's activation (SiLU, GELU-tanh), the rope layout and its angles (per-pair factors,
linear scaling, partial rotation), Q K V biases (qwen2), per-head q/k norms (qwen3, gemma3),
Gemma's embedding scale, post-attention/post-FFN norms, sliding-window layers with their own rope
base, and Gemma 2's soft-capped attention scores and logits. Phi-3's stacked tensors are split at
load (bytesup.model.weights), so the pass never sees them.

Arithmetic is float32 throughout, like the model. Activations are (tokens, features): a batch of
N new tokens multiplies x @ W.T once per matrix (prefill); one token is a matvec (decode), where
the time goes into reading the weights (memory-bound: 4 bytes per multiply-add). So a decode
step does few and large products: Q K V in one, gate and up in one, the resident head in one
(weights.py stacks them at load). Everything between the products is written into buffers allocated once
per batch size, a RunState (llama2.c's names: x the residual stream, xb, qkv, hb), and rope turns
Q and K in place before the cache stores K and V (no other copy). The network does no
bookkeeping: a Trace (bytesup.model.trace) watches the weights it reads. RMSNorm and softmax are
bytesup.model.layers' (one copy, shared with the lessons and the torch twin).
"""

from __future__ import annotations

import os
from typing import Self

import numpy as np

from bytesup.errors import BytesupError
from bytesup.gguf.file import GGUFFile
from bytesup.model.arch import ArchSpec, spec_from_metadata
from bytesup.model.layers import gelu, rms_norm, silu, softcap, softmax
from bytesup.model.trace import Trace
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
            f"KV cache max_tokens {max_tokens} must be between 1 and {spec.context_key} = {spec.context_length}"
        )
    return n


def float32_array(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised NumPy float32 array: the KV cache's storage unless it is given another."""
    return np.empty(shape, np.float32)


class KVCache:
    """Keys and values of every position seen so far, per block: (n_kv_heads, positions, head_dim).

    Grows by doubling up to max_tokens (default: the model's context length), so a short chat
    does not allocate 8192 positions of every block up front. `empty(shape)` makes its arrays:
    NumPy float32 here; the torch twin passes one that makes float32 tensors on its device.
    """

    def __init__(self, spec: ArchSpec, max_tokens: int | None = None, empty=float32_array):
        self.spec = spec
        self.max_tokens = cache_max_tokens(spec, max_tokens)
        self.empty = empty
        self.n = 0  # positions stored
        self._capacity = 0
        self.k: list = []
        self.v: list = []

    def _grow(self, needed: int) -> None:
        cap = min(self.max_tokens, max(needed, 2 * self._capacity, 64))
        s = self.spec
        for layer in range(s.n_layers):
            k = self.empty((s.n_kv_heads, cap, s.head_dim))
            v = self.empty((s.n_kv_heads, cap, s.head_dim))
            if self._capacity:
                k[:, : self.n] = self.k[layer][:, : self.n]
                v[:, : self.n] = self.v[layer][:, : self.n]
                self.k[layer], self.v[layer] = k, v
            else:
                self.k.append(k)
                self.v.append(v)
        self._capacity = cap

    def append(self, layer: int, k, v, start: int):
        """Store k, v (n_kv_heads, N, head_dim) at positions start..start+N-1 of `layer`;
        return all keys and values up to there (views, no copies)."""
        end = start + k.shape[1]
        if end > self._capacity:
            self._grow(end)
        self.k[layer][:, start:end] = k
        self.v[layer][:, start:end] = v
        return self.k[layer][:, :end], self.v[layer][:, :end]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)


# -- the activations ------------------------------------------------------------------------


class RunState:
    """The activations of a pass of N tokens, allocated once and written in place (llama2.c's RunState).

    x    (N, d_model)             the residual stream
    xb   (N, d_model)             inside a half: x normalized, then what the half adds; at the end the
                                  final norm of x, the input of the head
    qkv  (N, q_dim + 2 kv_dim)    the stacked Q K V product of a block; q, k, v are views of it
    hb   (N, 2 d_ff)              the stacked gate and up product; hb (gate), hb2 (up) are views of it
    att  (n_heads, N, keys)       the last block's attention weights (set by attention_block)
    """

    def __init__(self, spec: ArchSpec, n: int):
        self.n = n
        self.x = np.empty((n, spec.d_model), np.float32)
        self.xb = np.empty((n, spec.d_model), np.float32)
        self.qkv = np.empty((n, spec.q_dim + 2 * spec.kv_dim), np.float32)
        self.hb = np.empty((n, 2 * spec.d_ff), np.float32)
        self.att: np.ndarray | None = None


# -- the steps ------------------------------------------------------------------------------


def embed(weights, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Token ids -> their rows of token_embd: (N, d_model). A lookup, no arithmetic."""
    rows = weights.embed_rows(ids)
    if out is None:
        return np.ascontiguousarray(rows, dtype=np.float32)
    out[...] = rows
    return out


def matmul(x: np.ndarray, w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """y = x @ W.T: every row of x times every row of W. This is where the time goes.

    out: where to write y, (N, rows of W); a new array when None.
    """
    if out is None:
        out = np.empty((x.shape[0], w.shape[0]), np.result_type(x, w))
    if x.shape[0] == 1:  # one token (decode): a matrix-vector product, BLAS's gemv, W read once
        np.dot(w, x[0], out=out[0])  # np.dot: the same gemv as np.matmul, with less overhead per call
    else:
        np.matmul(x, w.T, out=out)
    return out


def rope_frequencies(n_rot: int, base: float, freq_scale: float = 1.0, factors=None) -> np.ndarray:
    """Radians per position of each rotated pair i, float64: freq_scale * base^(-2i/n_rot) / factors[i]
    (llama.cpp's ggml_rope_ext: factors from the file's rope_freqs.weight, freq_scale 1 / linear factor)."""
    freq = freq_scale * base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    return freq if factors is None else freq / np.asarray(factors, np.float64)


def rope_angles(positions: np.ndarray, n_rot: int, base: float, *, freq_scale: float = 1.0, factors=None,
                mscale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """cos and sin of position x rope_frequencies(...) for each pair i, times mscale: (N, n_rot/2) each."""
    angles = np.outer(np.asarray(positions, np.float64), rope_frequencies(n_rot, base, freq_scale, factors))
    return (mscale * np.cos(angles)).astype(np.float32), (mscale * np.sin(angles)).astype(np.float32)


def layer_rope_angles(spec: ArchSpec, layer: int, positions: np.ndarray, factors=None):
    """rope_angles with `layer`'s base and scale, the file's attn_factor and its per-pair factors
    (weights.rope_factors: None when the file has none)."""
    base, freq_scale = spec.layer_rope(layer)
    return rope_angles(positions, spec.n_rot, base, freq_scale=freq_scale, factors=factors,
                       mscale=spec.rope_attn_factor)  # fmt: skip


def rope_tables(spec: ArchSpec, positions: np.ndarray, factors=None) -> dict:
    """(cos, sin) for the positions per distinct spec.layer_rope(i): one table serves every layer
    that shares its base and scale (two on gemma3, one elsewhere)."""
    tables: dict = {}
    for layer in range(spec.n_layers):
        if spec.layer_rope(layer) not in tables:
            tables[spec.layer_rope(layer)] = layer_rope_angles(spec, layer, positions, factors)
    return tables


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str = "adjacent", out=None) -> np.ndarray:
    """Rotate pairs of each head's dimensions by its position's angles.

    layout "adjacent" (llama GGUFs): pairs (x0, x1), (x2, x3), ...; "neox" (qwen2, gemma3):
    pairs (x0, x_{n_rot/2}), (x1, x_{n_rot/2+1}), ... (Hugging Face's rotate_half).
    x is (N, heads, head_dim); pair i of token t turns by angle t_pos * base^(-2i/n_rot).
    Only the first n_rot dimensions rotate (all of them for llama). Returns a new array, or
    writes into out (x itself rotates in place with out=x).
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
    turned0, turned1 = x0 * c - x1 * s, x0 * s + x1 * c
    if out is None:
        out = x.copy()
    out[..., first], out[..., second] = turned0, turned1
    return out


def attention(q, k, v, start: int, spec: ArchSpec, window: int | None = None):
    """Grouped-query causal attention for N new queries against all T keys so far.

    q: (N, n_heads, head_dim); k, v: (n_kv_heads, T, head_dim). Query head h reads K/V head
    h // group. window: a sliding layer's query sees only the last `window` positions, itself
    included. Returns (the heads' outputs side by side (N, n_heads * head_dim), the attention
    weights (n_heads, N, T)).
    """
    n, t = q.shape[0], k.shape[1]
    kv, g, hd = spec.n_kv_heads, spec.group, spec.head_dim
    # group the query heads under the K/V head they share: (kv, g*N, hd), no Python loop over heads
    qg = q.reshape(n, kv, g, hd).transpose(1, 2, 0, 3).reshape(kv, g * n, hd)
    # scores: every query against every key, / sqrt(head_dim)
    att = qg @ k.transpose(0, 2, 1)  # (kv, g*N, T)
    att *= np.float32(spec.attn_scale)
    if spec.attn_softcap:  # gemma2: cap * tanh(scores / cap)
        softcap(att, spec.attn_softcap, out=att)
    # causal mask: query at position start+i sees keys 0..start+i
    att = att.reshape(kv, g, n, t)
    if n > 1:
        future = np.arange(t)[None, :] > (start + np.arange(n))[:, None]  # (N, T)
        att[:, :, future] = -np.inf
    # sliding window: ... and only keys start+i-window+1 .. start+i
    if window is not None and t > window:
        too_old = np.arange(t)[None, :] <= (start + np.arange(n))[:, None] - window  # (N, T)
        att[:, :, too_old] = -np.inf
    # softmax over the keys: attention weights, each row sums to 1
    att = softmax(att, out=att)
    # weighted sum of the values
    out = att.reshape(kv, g * n, t) @ v  # (kv, g*N, hd)
    return out.reshape(kv, g, n, hd).transpose(2, 0, 1, 3).reshape(n, spec.q_dim), att.reshape(spec.n_heads, n, t)


def attention_block(x, w: BlockWeights, layer: int, start: int, cos, sin, spec, cache, s: RunState | None = None):
    """The attention half of a block, residual included: x + W_o · attention(rope(Q), rope(K), V).

    The result is written into s.x (x itself when x is s.x, as in transformer(); without s, into
    a new array). Steps the table switches on: Q K V biases (qwen2), per-head norms of q and k and
    a norm of the output before the residual add (gemma3), a sliding window on some layers (gemma3).
    """
    n = x.shape[0]
    if s is None:
        s = RunState(spec, n)
    # attention rmsnorm
    xb = rms_norm(x, w.attn_norm, spec.rms_eps, out=s.xb)
    # Q, K, V: one product with the (q_dim + 2 kv_dim, d_model) matrix weights.py stacks at load
    qkv = matmul(xb, w.wqkv, out=s.qkv)
    if w.bqkv is not None:  # qwen2: a bias on each of Q, K, V
        qkv += w.bqkv
    q = qkv[:, : spec.q_dim].reshape(n, spec.n_heads, spec.head_dim)
    k = qkv[:, spec.q_dim : spec.q_dim + spec.kv_dim].reshape(n, spec.n_kv_heads, spec.head_dim)
    v = qkv[:, spec.q_dim + spec.kv_dim :].reshape(n, spec.n_kv_heads, spec.head_dim)
    if w.q_norm is not None:  # gemma3: RMSNorm of each head's q and k (over head_dim)
        rms_norm(q, w.q_norm, spec.rms_eps, out=q)
        rms_norm(k, w.k_norm, spec.rms_eps, out=k)
    # rope: rotate Q and K by their positions, in place (V is not rotated); q and k sit side by side
    # in qkv, so their heads turn together
    qk = qkv[:, : spec.q_dim + spec.kv_dim].reshape(n, spec.n_heads + spec.n_kv_heads, spec.head_dim)
    rope(qk, cos, sin, spec.rope_layout, out=qk)
    # KV cache: store this batch's keys and values, read back all positions so far (views)
    k_all, v_all = cache.append(layer, k.transpose(1, 0, 2), v.transpose(1, 0, 2), start)
    # grouped-query causal attention (within the window on a sliding layer)
    xa, s.att = attention(q, k_all, v_all, start, spec, window=spec.layer_window(layer))
    # output projection
    xb = matmul(xa, w.wo, out=s.xb)
    if w.post_attn_norm is not None:  # gemma3: normalize what attention adds
        rms_norm(xb, w.post_attn_norm, spec.rms_eps, out=xb)
    # the residual connection
    return np.add(x, xb, out=s.x)


def ffn_block(x, w: BlockWeights, spec: ArchSpec, s: RunState | None = None):
    """The FFN half, residual included: x + W_down(act(W_gate xn) * W_up xn), act from spec.activation
    (gemma3 normalizes that before the add). Written into s.x, as attention_block."""
    if s is None:
        s = RunState(spec, x.shape[0])
    # ffn rmsnorm
    xb = rms_norm(x, w.ffn_norm, spec.rms_eps, out=s.xb)
    # gate and up: one product with the (2 d_ff, d_model) matrix weights.py stacks at load
    hb_hb2 = matmul(xb, w.w_gate_up, out=s.hb)
    hb, hb2 = hb_hb2[:, : spec.d_ff], hb_hb2[:, spec.d_ff :]  # gate, up
    # the gate decides how much of each up value passes: SiLU (SwiGLU) or GELU-tanh (GeGLU)
    hb = activation(spec.activation)(hb) * hb2
    # down projection
    xb = matmul(hb, w.w_down, out=s.xb)
    if w.post_ffn_norm is not None:  # gemma3: normalize what the FFN adds
        rms_norm(xb, w.post_ffn_norm, spec.rms_eps, out=xb)
    # the residual connection
    return np.add(x, xb, out=s.x)


def unembed(x: np.ndarray, weights, spec: ArchSpec) -> np.ndarray:
    """Logits: x @ head.T, chunk by chunk of head rows (output.weight, or token_embd when tied);
    gemma2 soft-caps them, cap * tanh(logits / cap)."""
    logits = np.empty((x.shape[0], spec.vocab), np.float32)
    for start, rows in weights.head_chunks():
        matmul(x, rows, out=logits[:, start : start + rows.shape[0]])
    if spec.final_softcap:
        softcap(logits, spec.final_softcap, out=logits)
    return logits


def transformer(ids: np.ndarray, weights, spec: ArchSpec, cache: KVCache, s: RunState | None = None):
    """The whole network for N new tokens at positions cache.n .. cache.n + N - 1 -> (N, vocab) logits.

    The activations live in s (a RunState for N tokens; a new one when None).
    """
    start, n = cache.n, len(ids)
    if s is None:
        s = RunState(spec, n)
    # embedding: copy each token's row of token_embd into the residual stream x
    x = embed(weights, ids, out=s.x)
    # gemma3: the rows times sqrt(d_model) (the table's embed_scale; 1 elsewhere)
    x *= np.float32(spec.embed_scale)
    # rope angles for these positions, one table per rope base and scale (gemma3's sliding layers
    # have their own), with the file's per-pair frequency factors (llama 3.1's rope_freqs) if any
    angles = rope_tables(spec, np.arange(start, start + n), weights.rope_factors)
    # forward all the layers
    for layer in range(spec.n_layers):
        w = weights.block(layer)
        cos, sin = angles[spec.layer_rope(layer)]
        # attention half: norm, Q K V, rope, grouped-query attention, output projection, residual
        x = attention_block(x, w, layer, start, cos, sin, spec, cache, s)
        # FFN half: norm, gate and up, act(gate) * up, down, residual
        x = ffn_block(x, w, spec, s)
    cache.n = start + n
    # final rmsnorm
    xb = rms_norm(x, weights.output_norm, spec.rms_eps, out=s.xb)
    # classifier into logits
    return unembed(xb, weights, spec)


# -- the model ------------------------------------------------------------------------------


class Model:
    """A GGUF model ready to run: spec (the shape), weights (resident or streaming), forward()."""

    def __init__(self, gguf: GGUFFile, spec: ArchSpec, mode: str, layout: str = "rows"):
        self.gguf, self.spec, self.mode, self.layout = gguf, spec, mode, layout
        self.weights = open_weights(gguf, spec, mode, layout)
        self._state: RunState | None = None

    @classmethod
    def from_gguf(cls, path: str | os.PathLike, *, resident_budget_bytes: int = DEFAULT_RESIDENT_BUDGET,
                  mode: str | None = None, layout: str = "rows") -> Model:  # fmt: skip
        """Open a GGUF; keep float32 weights resident when they fit the budget, else stream them.

        mode="resident" or "streaming" overrides the budget; layout is how resident matrices lie in
        memory (bytesup.model.weights.LAYOUTS: the same numbers, walked in another order).
        """
        gguf = GGUFFile(path)
        try:
            spec = spec_from_metadata(gguf.metadata, gguf.tensor_names, path=path)
            return cls(gguf, spec, mode or choose_mode(spec, resident_budget_bytes), layout)
        except BaseException:
            gguf.close()
            raise

    def close(self) -> None:
        self.weights = self._state = None
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
                f"{past} cached + {arr.size} new tokens exceed {self.spec.context_key} ="
                f" {self.spec.context_length}; shorten the input or start a new cache"
            )
        if cache is not None and past + arr.size > cache.max_tokens:
            raise ForwardInputError(
                f"{past} cached + {arr.size} new tokens exceed the KV cache's max_tokens = {cache.max_tokens}"
            )
        return arr.astype(np.int64)

    def run_state(self, n: int) -> RunState:
        """The activations for a pass of n tokens: the last pass's when it had n tokens too (decode)."""
        if self._state is None or self._state.n != n:
            self._state = RunState(self.spec, n)
        return self._state

    def forward(self, ids, cache: KVCache | None = None, *, trace: Trace | None = None) -> np.ndarray:
        """Logits (len(ids), vocab) float32 for N new tokens; their K/V are appended to cache.

        Without a cache the tokens sit at positions 0..N-1 and nothing is kept. A trace watches
        the pass from outside the network (bytesup.model.trace).
        """
        if self.weights is None:
            raise ValueError(f"{self.gguf.path}: model is closed")
        ids = self.check_ids(ids, cache)
        if cache is None:
            cache = KVCache(self.spec, max_tokens=len(ids))
        elif cache.spec != self.spec:
            raise ForwardInputError("this KV cache belongs to a different model")
        s = self.run_state(len(ids))
        weights = self.weights if trace is None else trace.watch(self.weights, s)
        return transformer(ids, weights, self.spec, cache, s)

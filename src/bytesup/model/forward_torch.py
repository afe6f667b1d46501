"""The same forward pass in torch, on any device: the GPU twin of bytesup.model.forward.

    with Model.from_gguf("smollm2-135m.gguf", mode="resident") as numpy_model:
        model = TorchModel.from_model(numpy_model, "cuda")    # weights copied to the device once
    cache = model.new_cache()
    logits = model.forward(prompt_ids, cache)        # prefill: (len(prompt_ids), vocab) torch tensor
    logits = model.forward([next_id], cache)         # decode: one token, (1, vocab)

`transformer()` here is forward.py's `transformer()` step for step, in the same order and under
the same names: embed -> for each block: RMSNorm, Q K V (one fused matrix), rope on adjacent
pairs, grouped-query attention with a causal mask, output projection, residual; RMSNorm, gate
and up (one fused matrix), act(gate) * up, down, residual -> final norm -> unembed; the steps an
architecture adds (biases, q/k norms, post norms, embedding scale, sliding windows, soft caps) as
forward.py reads them from the architecture table. The rope angles are forward.py's own tables
(forward.rope_tables, float64 rounded to float32), moved to the device.

The weights are the float32 arrays of forward.py's resident provider (the project's own
dequantizers, fused QKV and gate|up), moved to the device once: there
is no second dequantizer. On device 'cpu' the tensors share the NumPy arrays' memory. Arithmetic is
float32 throughout (TF32 is whatever torch.backends says; the GPU job leaves it at torch's
default, off for matmul). The KV cache is forward.py's KVCache with its arrays on the device;
RMSNorm, softmax and the activations are bytesup.model.layers' own functions, which take torch
tensors as they take NumPy arrays.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from bytesup.errors import BytesupError
from bytesup.model.arch import ArchSpec
from bytesup.model.forward import (
    ForwardInputError,
    KVCache,
    Model,
    activation,
    rope_tables,
    weight_float32_bytes_per_token,
)
from bytesup.model.layers import rms_norm, softcap, softmax
from bytesup.model.weights import DEFAULT_RESIDENT_BUDGET

try:  # the module imports without torch; TorchModel then says how to get it
    import torch
except ImportError:  # pragma: no cover - the tests skip without torch
    torch = None


class TorchUnavailable(BytesupError, ValueError):
    """torch is not installed, or the weights are not resident float32; one line."""


def _need_torch() -> None:
    if torch is None:
        raise TorchUnavailable("torch is not installed: pip install 'bytesup[gpu]' to run the forward pass in torch")


# -- the weights on the device --------------------------------------------------------------


@dataclass
class TorchBlock:
    """One block's float32 weights on the device (the shapes of weights.BlockWeights)."""

    attn_norm: torch.Tensor  # (d_model,)
    wqkv: torch.Tensor  # (q_dim + 2 kv_dim, d_model): Q rows, then K rows, then V rows
    wo: torch.Tensor  # (d_model, q_dim)
    ffn_norm: torch.Tensor  # (d_model,)
    w_gate_up: torch.Tensor  # (2 d_ff, d_model): gate rows, then up rows
    w_down: torch.Tensor  # (d_model, d_ff)
    # optional roles (None where the architecture has none), as weights.BlockWeights
    bqkv: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    post_attn_norm: torch.Tensor | None = None
    post_ffn_norm: torch.Tensor | None = None


class TorchWeights:
    """forward.py's resident weights, each array moved to `device` once."""

    def __init__(self, resident, spec: ArchSpec, device):
        def move(a: np.ndarray | None) -> torch.Tensor | None:
            return None if a is None else torch.as_tensor(a, device=device)  # on 'cpu': no copy

        self.token_embd = move(resident.token_embd)
        # a tied head is the embedding itself: one tensor on the device, not two
        self.head = self.token_embd if spec.tied else move(resident.head)
        self.output_norm = move(resident.output_norm)
        self.rope_factors = resident.rope_factors  # NumPy: the angle tables are made on the host
        self.blocks = [
            TorchBlock(move(b.attn_norm), move(b.wqkv), move(b.wo), move(b.ffn_norm), move(b.w_gate_up),
                       move(b.w_down), move(b.bqkv), move(b.q_norm), move(b.k_norm), move(b.post_attn_norm),
                       move(b.post_ffn_norm))
            for b in resident.blocks
        ]  # fmt: skip

    def block(self, i: int) -> TorchBlock:
        return self.blocks[i]

    @property
    def nbytes(self) -> int:
        """Bytes the weights occupy on the device (a tied head counted once)."""
        tensors = [self.token_embd, self.output_norm] + ([] if self.head is self.token_embd else [self.head])
        tensors += [t for b in self.blocks for t in vars(b).values() if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)


# -- the KV cache: forward.KVCache, its arrays made on the device -------------------------------


def device_cache(spec: ArchSpec, device, max_tokens: int | None = None) -> KVCache:
    """forward.py's KVCache, its keys and values float32 tensors on `device`."""

    def empty(shape):
        return torch.empty(shape, dtype=torch.float32, device=device)

    return KVCache(spec, max_tokens, empty=empty)


# -- the steps (forward.py's, in torch) -----------------------------------------------------


def embed(weights: TorchWeights, ids):
    """Token ids -> their rows of token_embd: (N, d_model). A lookup, no arithmetic."""
    return weights.token_embd[ids]


def matmul(x, w):
    """y = x @ W.T: every row of x times every row of W. This is where the time goes."""
    return x @ w.T


def rope_angles(spec: ArchSpec, start: int, n: int, factors, device) -> dict:
    """forward.rope_tables for positions start .. start + n - 1, each (cos, sin) moved to `device`."""
    tables = rope_tables(spec, np.arange(start, start + n), factors)
    return {key: (torch.as_tensor(c, device=device), torch.as_tensor(s, device=device))
            for key, (c, s) in tables.items()}  # fmt: skip


def rope(x, cos, sin, layout: str = "adjacent"):
    """Rotate pairs of each head's dimensions by its position's angles: adjacent pairs (x0, x1),
    (x2, x3), ... (llama GGUFs) or, layout "neox", (x0, x_{n_rot/2}), (x1, x_{n_rot/2+1}), ...

    x is (N, heads, head_dim); only the first n_rot dimensions rotate (all of them for llama).
    Returns a new tensor.
    """
    n_rot = 2 * cos.shape[-1]
    c, s = cos[:, None, :], sin[:, None, :]  # the same angles for every head
    if layout == "adjacent":
        pairs = x[..., :n_rot].reshape(*x.shape[:-1], n_rot // 2, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).reshape(*x.shape[:-1], n_rot)
    elif layout == "neox":
        x0, x1 = x[..., : n_rot // 2], x[..., n_rot // 2 : n_rot]
        rotated = torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    else:
        raise ValueError(f"rope layout {layout!r} is not known (known: adjacent, neox)")
    return torch.cat((rotated, x[..., n_rot:]), dim=-1) if n_rot < x.shape[-1] else rotated


def attention(q, k, v, start: int, spec: ArchSpec, window: int | None = None):
    """Grouped-query causal attention for N new queries against all T keys so far.

    q: (N, n_heads, head_dim); k, v: (n_kv_heads, T, head_dim). Query head h reads K/V head
    h // group. window: a sliding layer's query sees only the last `window` positions, itself
    included. Returns (N, n_heads * head_dim).
    """
    n, t = q.shape[0], k.shape[1]
    kv, g, hd = spec.n_kv_heads, spec.group, spec.head_dim
    # group the query heads under the K/V head they share: (kv, g*N, hd), no Python loop over heads
    qg = q.reshape(n, kv, g, hd).permute(1, 2, 0, 3).reshape(kv, g * n, hd)
    # scores: every query against every key, / sqrt(head_dim)
    scores = (qg @ k.transpose(1, 2)) * spec.attn_scale  # (kv, g*N, T)
    if spec.attn_softcap:  # gemma2: cap * tanh(scores / cap)
        scores = softcap(scores, spec.attn_softcap)
    # causal mask: query at position start+i sees keys 0..start+i
    scores = scores.reshape(kv, g, n, t)
    keys = torch.arange(t, device=q.device)
    queries = start + torch.arange(n, device=q.device)
    if n > 1:
        scores = scores.masked_fill(keys[None, :] > queries[:, None], -math.inf)
    # sliding window: ... and only keys start+i-window+1 .. start+i
    if window is not None and t > window:
        scores = scores.masked_fill(keys[None, :] <= queries[:, None] - window, -math.inf)
    # softmax over the keys: attention weights, each row sums to 1 (-inf gives exactly 0)
    weights = softmax(scores)
    # weighted sum of the values
    out = weights.reshape(kv, g * n, t) @ v  # (kv, g*N, hd)
    return out.reshape(kv, g, n, hd).permute(2, 0, 1, 3).reshape(n, spec.q_dim)


def attention_block(x, w: TorchBlock, layer: int, start: int, cos, sin, spec: ArchSpec, cache: KVCache):
    """The attention half of a block, residual included: x + W_o · attention(rope(Q), rope(K), V)."""
    n = x.shape[0]
    # attention rmsnorm
    xn = rms_norm(x, w.attn_norm, spec.rms_eps)
    # Q, K, V: one matmul with the fused (q_dim + 2 kv_dim, d_model) matrix
    qkv = matmul(xn, w.wqkv)
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
    k_all, v_all = cache.append(layer, k.transpose(0, 1), v.transpose(0, 1), start)
    # grouped-query causal attention (within the window on a sliding layer)
    a = attention(q, k_all, v_all, start, spec, window=spec.layer_window(layer))
    # output projection
    out = matmul(a, w.wo)
    if w.post_attn_norm is not None:  # gemma3: normalize what attention adds
        out = rms_norm(out, w.post_attn_norm, spec.rms_eps)
    # the residual connection
    return x + out


def ffn_block(x, w: TorchBlock, spec: ArchSpec):
    """The FFN half, residual included: x + W_down(act(W_gate xn) * W_up xn) (gemma3 normalizes
    that before the add)."""
    # ffn rmsnorm
    xn = rms_norm(x, w.ffn_norm, spec.rms_eps)
    # gate and up: one matmul with the fused (2 d_ff, d_model) matrix
    gu = matmul(xn, w.w_gate_up)
    g, u = gu[:, : spec.d_ff], gu[:, spec.d_ff :]
    # the gate decides how much of each up value passes: SiLU (SwiGLU) or GELU-tanh (GeGLU)
    h = activation(spec.activation)(g) * u
    # down projection
    out = matmul(h, w.w_down)
    if w.post_ffn_norm is not None:  # gemma3: normalize what the FFN adds
        out = rms_norm(out, w.post_ffn_norm, spec.rms_eps)
    # the residual connection
    return x + out


def unembed(x, weights: TorchWeights, spec: ArchSpec):
    """Logits: x @ head.T (output.weight, or token_embd when tied), one matmul on the device;
    gemma2 soft-caps them."""
    logits = matmul(x, weights.head)
    return softcap(logits, spec.final_softcap) if spec.final_softcap else logits


def transformer(ids, weights: TorchWeights, spec: ArchSpec, cache: KVCache):
    """The whole network for N new tokens at positions cache.n .. cache.n + N - 1 -> (N, vocab) logits."""
    start, n = cache.n, ids.shape[0]
    # embedding: copy each token's row of token_embd into the residual stream x
    x = embed(weights, ids)
    if spec.embed_scale != 1.0:  # gemma3: the row times sqrt(d_model), rounded to float32
        x = x * torch.tensor(spec.embed_scale, dtype=torch.float32)
    # rope angles for these positions, shared by every block with the same rope base and scale
    angles = rope_angles(spec, start, n, weights.rope_factors, x.device)
    # forward all the layers
    for layer in range(spec.n_layers):
        w = weights.block(layer)
        cos, sin = angles[spec.layer_rope(layer)]
        # attention half: norm, Q K V, rope, grouped-query attention, output projection, residual
        x = attention_block(x, w, layer, start, cos, sin, spec, cache)
        # FFN half: norm, gate and up, act(gate) * up, down, residual
        x = ffn_block(x, w, spec)
    cache.n = start + n
    # final rmsnorm
    x = rms_norm(x, weights.output_norm, spec.rms_eps)
    # classifier into logits
    return unembed(x, weights, spec)


# -- the model ------------------------------------------------------------------------------


class TorchModel:
    """A model on a torch device: spec (the shape), weights (float32, resident there), forward()."""

    def __init__(self, spec: ArchSpec, weights: TorchWeights, device):
        self.spec, self.weights, self.device = spec, weights, torch.device(device)

    @classmethod
    def from_model(cls, model: Model, device="cpu") -> TorchModel:
        """Move an open NumPy Model's resident float32 weights to `device` (once)."""
        _need_torch()
        if model.weights is None:
            raise ValueError(f"{model.gguf.path}: model is closed")
        if model.mode != "resident":
            raise TorchUnavailable(
                f"{model.gguf.path}: the torch forward pass needs resident float32 weights, this model streams"
                " them; open it with Model.from_gguf(path, mode='resident')"
            )
        with torch.no_grad():
            return cls(model.spec, TorchWeights(model.weights, model.spec, device), device)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike, device="cpu", *,
                  resident_budget_bytes: int = DEFAULT_RESIDENT_BUDGET) -> TorchModel:  # fmt: skip
        """Open a GGUF through the NumPy Model (resident), move its weights to `device`."""
        _need_torch()
        with Model.from_gguf(path, resident_budget_bytes=resident_budget_bytes) as model:
            return cls.from_model(model, device)

    def new_cache(self, max_tokens: int | None = None) -> KVCache:
        return device_cache(self.spec, self.device, max_tokens)

    def weight_float32_bytes_per_token(self) -> int:
        """float32 weight bytes one decode step reads (forward.weight_float32_bytes_per_token)."""
        return weight_float32_bytes_per_token(self.spec)

    def forward(self, ids, cache: KVCache | None = None):
        """Logits (len(ids), vocab) float32, a torch tensor on the device; K/V appended to cache.

        ids are checked on the host exactly as the NumPy Model checks them. Without a cache the
        tokens sit at positions 0..N-1 and nothing is kept.
        """
        if isinstance(ids, torch.Tensor):
            ids = ids.detach().cpu().numpy()
        # Model.check_ids reads only .spec and the cache's n and max_tokens: the same one-line errors
        arr = Model.check_ids(self, ids, cache)
        if cache is None:
            cache = self.new_cache(max_tokens=len(arr))
        elif cache.spec != self.spec:
            raise ForwardInputError("this KV cache belongs to a different model")
        with torch.no_grad():
            return transformer(torch.as_tensor(arr, device=self.device), self.weights, self.spec, cache)

    def forward_numpy(self, ids, cache: KVCache | None = None) -> np.ndarray:
        """forward() copied back to the host as a float32 NumPy array."""
        return self.forward(ids, cache).cpu().numpy()

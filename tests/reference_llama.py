"""An independent float64 llama for the tests: gguf-py's reader and dequantizer, numpy, the llama
equations written out (rope as complex numbers on adjacent pairs, attention one head and one
position at a time), and nothing from bytesup."""

from __future__ import annotations

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize as gguf_dequantize


def read_reference(path):
    """(metadata, {tensor name: float64 array in numpy shape}) read by gguf-py alone."""
    reader = GGUFReader(path)
    meta = {f.name: f.contents() for f in reader.fields.values()}
    tensors = {}
    for t in reader.tensors:
        values = gguf_dequantize(t.data, t.tensor_type)
        tensors[t.name] = np.asarray(values, np.float64).reshape(tuple(int(d) for d in reversed(t.shape)))
    return meta, tensors


def reference_pass(path, ids) -> dict:
    """ids at positions 0..N-1 -> {"logits": (N, vocab), "stream": the last position's residual after
    the embedding and after each block, "lens": each of those through the final norm and the head}."""
    meta, w = read_reference(path)
    d, n_head = meta["llama.embedding_length"], meta["llama.attention.head_count"]
    n_kv, eps = meta["llama.attention.head_count_kv"], meta["llama.attention.layer_norm_rms_epsilon"]
    base, hd, n = meta.get("llama.rope.freq_base", 10000.0), d // n_head, len(ids)

    def norm(x, g):
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * g

    def rotate(m, pos):  # (heads, hd) at one position: pairs (2i, 2i+1) turned by pos * base^(-2i/hd)
        z = (m[:, 0::2] + 1j * m[:, 1::2]) * np.exp(1j * pos * base ** (-np.arange(hd // 2) * 2.0 / hd))
        out = np.empty_like(m)
        out[:, 0::2], out[:, 1::2] = z.real, z.imag
        return out

    head = w.get("output.weight", w["token_embd.weight"])
    x = w["token_embd.weight"][ids]
    stream = [x[-1].copy()]
    for b in range(meta["llama.block_count"]):
        p = f"blk.{b}."
        h = norm(x, w[p + "attn_norm.weight"])
        q = np.stack([rotate(r, t) for t, r in enumerate((h @ w[p + "attn_q.weight"].T).reshape(n, n_head, hd))])
        k = np.stack([rotate(r, t) for t, r in enumerate((h @ w[p + "attn_k.weight"].T).reshape(n, n_kv, hd))])
        v = (h @ w[p + "attn_v.weight"].T).reshape(n, n_kv, hd)
        att = np.zeros((n, n_head, hd))
        for head_i in range(n_head):
            kvh = head_i // (n_head // n_kv)
            for t in range(n):
                s = np.array([q[t, head_i] @ k[u, kvh] for u in range(t + 1)]) / np.sqrt(hd)
                e = np.exp(s - s.max())
                att[t, head_i] = (e / e.sum()) @ v[: t + 1, kvh]
        x = x + att.reshape(n, d) @ w[p + "attn_output.weight"].T
        h = norm(x, w[p + "ffn_norm.weight"])
        g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        stream.append(x[-1].copy())
    return {"logits": norm(x, w["output_norm.weight"]) @ head.T, "stream": stream,
            "lens": [norm(r, w["output_norm.weight"]) @ head.T for r in stream]}

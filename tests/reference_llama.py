"""An independent float64 llama (and Gemma 3) for the tests: gguf-py's reader and dequantizer, numpy, the llama
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
    the embedding and after each block, "hidden": the same for every position, (N, d_model) each,
    "final_norm": the last of them through the final norm, "lens": each of "stream" through the
    final norm and the head}."""
    meta, w = read_reference(path)
    arch = meta["general.architecture"]  # llama, or qwen2: biases on Q K V, rope on halves (i, i + hd/2)
    a = arch + "."
    d, n_head = meta[a + "embedding_length"], meta[a + "attention.head_count"]
    n_kv, eps = meta[a + "attention.head_count_kv"], meta[a + "attention.layer_norm_rms_epsilon"]
    base, hd, n = meta.get(a + "rope.freq_base", 10000.0), d // n_head, len(ids)

    def norm(x, g):
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * g

    def rotate(m, pos):  # (heads, hd) at one position: pairs (2i, 2i+1) turned by pos * base^(-2i/hd)
        if arch == "qwen2":  # NeoX layout: pairs (i, i + hd/2)
            first, second = slice(0, hd // 2), slice(hd // 2, hd)
        else:
            first, second = slice(0, hd, 2), slice(1, hd, 2)
        z = (m[:, first] + 1j * m[:, second]) * np.exp(1j * pos * base ** (-np.arange(hd // 2) * 2.0 / hd))
        out = np.empty_like(m)
        out[:, first], out[:, second] = z.real, z.imag
        return out

    def proj(h, p, name):  # h @ W.T, plus the bias where the file has one
        return h @ w[p + name + ".weight"].T + w.get(p + name + ".bias", 0.0)

    head = w.get("output.weight", w["token_embd.weight"])
    x = w["token_embd.weight"][ids]
    hidden = [x.copy()]
    for b in range(meta[a + "block_count"]):
        p = f"blk.{b}."
        h = norm(x, w[p + "attn_norm.weight"])
        q = np.stack([rotate(r, t) for t, r in enumerate(proj(h, p, "attn_q").reshape(n, n_head, hd))])
        k = np.stack([rotate(r, t) for t, r in enumerate(proj(h, p, "attn_k").reshape(n, n_kv, hd))])
        v = proj(h, p, "attn_v").reshape(n, n_kv, hd)
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
        hidden.append(x.copy())
    return outputs(hidden, w["output_norm.weight"], head, norm)


def outputs(hidden, output_norm, head, norm) -> dict:
    """The dict both references return, from the residual stream after the embedding and each block."""
    stream = [h[-1] for h in hidden]
    final = norm(hidden[-1], output_norm)
    return {
        "logits": final @ head.T,
        "stream": stream,
        "hidden": hidden,
        "final_norm": final,
        "lens": [norm(r, output_norm) @ head.T for r in stream],
    }


def reference_gemma3(path, ids) -> dict:
    """The same for a Gemma 3 file, written from the model's description (notes/gemma3.md), not from
    bytesup: embedding x sqrt(d); per block RMSNorm, Q K V, RMSNorm of each head's q and k, rope on
    the halves (x_i, x_{i+hd/2}) as complex numbers, base 10,000 on sliding layers and the file's
    rope.freq_base on every 6th (global) layer, attention one head and one position at a time over
    the last `sliding_window` positions (all on global layers), scaled 1/sqrt(key_length),
    post-attention RMSNorm, residual; RMSNorm, GELU-tanh(gate) * up, down, post-FFN RMSNorm,
    residual; final norm; tied head."""
    meta, w = read_reference(path)
    a = "gemma3."
    d, n_head, n_kv = (
        meta[a + "embedding_length"],
        meta[a + "attention.head_count"],
        meta[a + "attention.head_count_kv"],
    )
    hd, eps, n = meta[a + "attention.key_length"], meta[a + "attention.layer_norm_rms_epsilon"], len(ids)
    window, global_base = meta[a + "attention.sliding_window"], meta[a + "rope.freq_base"]

    def norm(x, g):
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * g

    def rotate(m, pos, base):  # (heads, hd): pairs (i, i + hd/2) turned by pos * base^(-2i/hd)
        half = hd // 2
        z = (m[:, :half] + 1j * m[:, half:]) * np.exp(1j * pos * base ** (-np.arange(half) * 2.0 / hd))
        return np.concatenate([z.real, z.imag], axis=1)

    def gelu(z):
        return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))

    x = w["token_embd.weight"][ids] * np.sqrt(d)
    hidden = [x.copy()]
    for b in range(meta[a + "block_count"]):
        p, sliding = f"blk.{b}.", (b + 1) % 6 != 0
        base = 10000.0 if sliding else global_base
        h = norm(x, w[p + "attn_norm.weight"])
        q = norm((h @ w[p + "attn_q.weight"].T).reshape(n, n_head, hd), w[p + "attn_q_norm.weight"])
        k = norm((h @ w[p + "attn_k.weight"].T).reshape(n, n_kv, hd), w[p + "attn_k_norm.weight"])
        q = np.stack([rotate(r, t, base) for t, r in enumerate(q)])
        k = np.stack([rotate(r, t, base) for t, r in enumerate(k)])
        v = (h @ w[p + "attn_v.weight"].T).reshape(n, n_kv, hd)
        att = np.zeros((n, n_head, hd))
        for head_i in range(n_head):
            kvh = head_i // (n_head // n_kv)
            for t in range(n):
                first = max(0, t - window + 1) if sliding else 0
                s = np.array([q[t, head_i] @ k[u, kvh] for u in range(first, t + 1)]) / np.sqrt(hd)
                e = np.exp(s - s.max())
                att[t, head_i] = (e / e.sum()) @ v[first : t + 1, kvh]
        out = att.reshape(n, n_head * hd) @ w[p + "attn_output.weight"].T
        x = x + norm(out, w[p + "post_attention_norm.weight"])
        h = norm(x, w[p + "ffn_norm.weight"])
        g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + norm((gelu(g) * u) @ w[p + "ffn_down.weight"].T, w[p + "post_ffw_norm.weight"])
        hidden.append(x.copy())
    return outputs(hidden, w["output_norm.weight"], w["token_embd.weight"], norm)

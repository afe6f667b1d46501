"""An independent float64 recomputation of lesson 3's walk on a Gemma 3 (or Gemma 2: the same FFN) file.

Only gguf-py (GGUFReader, gguf.quants.dequantize) and numpy; nothing from bytesup. The recipe is
written out here from the model's description (/work/shared/notes/gemma3.md; transformers'
Gemma3TextModel; llama.cpp's llm_build_gemma3), not taken from the package's architecture table:

    x    = token_embd[token] * sqrt(d_model)           the embedding, scaled before block 0
    xn   = x / sqrt(mean(x^2) + eps) * ffn_norm        (the GGUF's norm weights already hold 1 + w)
    g    = W_gate xn,  u = W_up xn
    h    = GELU_tanh(g) * u                            GELU_tanh(z) = z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))
    down = W_down h
    out  = down / sqrt(mean(down^2) + eps) * post_ffw_norm
    y    = x + out

Everything in float64. Only the rows and tensors the walk needs are dequantized (one row of the
262,144-row embedding table), so this stays small.
"""

from __future__ import annotations

import math

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(reader: GGUFReader, key: str):
    return reader.fields[key].contents()


def _tensor(reader: GGUFReader, name: str) -> np.ndarray:
    t = next(t for t in reader.tensors if t.name == name)
    shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists dims innermost first
    return np.asarray(dequantize(t.data, t.tensor_type), np.float64).reshape(shape)


def _row(reader: GGUFReader, name: str, row: int) -> np.ndarray:
    """One row of a 2-D tensor: gguf-py keeps a quantized tensor's data as (rows, bytes per row)."""
    t = next(t for t in reader.tensors if t.name == name)
    return np.asarray(dequantize(t.data[row : row + 1], t.tensor_type), np.float64).reshape(-1)


def gelu_tanh(z: np.ndarray) -> np.ndarray:
    return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))


def _angle(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    c = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return c, math.degrees(math.acos(max(-1.0, min(1.0, c))))


def lesson3_reference(gguf_path, token: str = " cat", block: int = 0) -> dict:
    """Lesson 3's headline numbers for `token` through block `block`'s FFN of a Gemma 2 or 3 GGUF, in float64."""
    reader = GGUFReader(str(gguf_path))
    arch = _field(reader, "general.architecture")
    assert arch in ("gemma2", "gemma3"), "lesson3_reference follows Gemma 2 and 3 only (one FFN)"
    d = int(_field(reader, f"{arch}.embedding_length"))
    eps = float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon"))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    token_id = tokens.index(token.replace(" ", "\u2581"))  # SentencePiece writes a space as '▁'

    x = _row(reader, "token_embd.weight", token_id) * math.sqrt(d)
    W = {
        p: _tensor(reader, f"blk.{block}.{p}.weight")
        for p in ("ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm")
    }
    xn = x / np.sqrt(np.mean(x * x) + eps) * W["ffn_norm"]
    g = W["ffn_gate"] @ xn
    u = W["ffn_up"] @ xn
    a = gelu_tanh(g)
    h = a * u
    down = W["ffn_down"] @ h
    out = down / np.sqrt(np.mean(down * down) + eps) * W["post_ffw_norm"]
    y = x + out
    cos, angle = _angle(x, y)
    return {
        "token_id": token_id,
        "embedding_scale": math.sqrt(d),
        "x_first3": x[:3].tolist(),
        "x_rms": float(np.sqrt(np.mean(x * x))),
        "x_length": float(np.linalg.norm(x)),
        "xn_rms": float(np.sqrt(np.mean(xn * xn))),
        "gate_first": float(g[0]),
        "gate_negative_fraction": float(np.mean(g < 0)),
        "act_abs_below_0_1_fraction": float(np.mean(np.abs(a) < 0.1)),
        "act_abs_below_0_01_fraction": float(np.mean(np.abs(a) < 0.01)),
        "down_length": float(np.linalg.norm(down)),
        "out_length": float(np.linalg.norm(out)),
        "y_length": float(np.linalg.norm(y)),
        "cosine_x_y": cos,
        "angle_deg": angle,
        "h": h,  # the slots' coefficients a_i (lesson 3b), float64
    }

"""Tiny files of the architecture table's rows beyond llama and gemma3, shared by the tests.

ROWS: name -> bytesup.model.synthetic.write_tiny's arguments, each file exercising what its row
adds: qwen3's q/k norms and key_length; phi3's stacked tensors with Phi-4-mini's partial rotation
(12 of 16 dimensions) and Phi-3.5's long-context rope (short and long factors, attn_factor, an
original context of 64 of 256); gemma2's soft caps (small enough to bite on a tiny model), heads
of 64 and a window of 4 on every other layer; a Llama 3.1 with rope_freqs.weight as
convert_hf_to_gguf.py computes it from Llama 3's rope scaling (short original context, so the
four pairs get a factor of 1, a blended one and 8).
"""

from __future__ import annotations

import math

from bytesup.model.synthetic import write_tiny

LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
PHI3_SHORT = [1.0, 1.2, 1.5, 2.0, 3.0, 6.0]  # 6 pairs: rope on 12 of a head's 16 dimensions
PHI3_LONG = [1.0, 1.5, 2.0, 4.0, 6.0, 12.0]
PHI3_ORIG, PHI3_CTX = 64, 256
PHI3_ATTN_FACTOR = math.sqrt(1 + math.log(PHI3_CTX / PHI3_ORIG) / math.log(PHI3_ORIG))  # transformers' longrope


def llama3_factors(head_dim: int, base: float, factor, low_freq_factor, high_freq_factor,
                   original_max_position_embeddings) -> list[float]:  # fmt: skip
    """rope_freqs.weight of a Llama 3.1 file: pair i's frequency is divided by this. Meta's rule:
    wavelengths shorter than original / high_freq_factor keep their frequency, longer than
    original / low_freq_factor are slowed `factor` times, and the ones between are blended."""
    out = []
    for i in range(head_dim // 2):
        wavelength = 2 * math.pi * base ** (2 * i / head_dim)
        if wavelength < original_max_position_embeddings / high_freq_factor:
            out.append(1.0)
        elif wavelength > original_max_position_embeddings / low_freq_factor:
            out.append(factor)
        else:
            smooth = (original_max_position_embeddings / wavelength - low_freq_factor) / (
                high_freq_factor - low_freq_factor
            )
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


ROWS = {
    "qwen3": {"arch": "qwen3", "head_dim": 16},
    "phi3": {"arch": "phi3"},
    "phi3-long-context": {
        "arch": "phi3", "n_embd": 64, "n_rot": 12, "n_ctx": PHI3_CTX,
        "rope_tensors": {"rope_factors_long.weight": PHI3_LONG, "rope_factors_short.weight": PHI3_SHORT},
        "extra_metadata": {"phi3.rope.scaling.attn_factor": PHI3_ATTN_FACTOR,
                           "phi3.rope.scaling.original_context_length": PHI3_ORIG},
    },
    "gemma2": {
        "arch": "gemma2", "head_dim": 64, "n_head_kv": 1, "n_layers": 4,
        "extra_metadata": {"gemma2.attn_logit_softcapping": 1.5, "gemma2.final_logit_softcapping": 4.0,
                           "gemma2.attention.sliding_window": 4},
    },
    "llama3-rope-freqs": {
        "arch": "llama", "n_ctx": 256, "rope_tensors": {"rope_freqs.weight": llama3_factors(8, 10000.0, **LLAMA3)},
    },
}  # fmt: skip


def write_row(name: str, folder):
    """ROWS[name] written to folder/<name>.gguf."""
    return write_tiny(folder / f"{name}.gguf", **ROWS[name])

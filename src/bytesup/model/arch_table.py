"""The rows of the architecture table (bytesup.model.arch reads them; import them from there).

One row per `general.architecture`: the facts of its block as llama.cpp's builder for it
(src/models/<arch>.cpp) and transformers' model have them, each checked in tests against
transformers loading a tiny synthetic GGUF of that architecture (tests/test_model_architectures.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Tensor names of a block, "{i}" is the block index; every architecture has these nine roles.
LLAMA_TENSORS: dict[str, str] = {
    "attn_norm": "blk.{i}.attn_norm.weight",
    "wq": "blk.{i}.attn_q.weight",
    "wk": "blk.{i}.attn_k.weight",
    "wv": "blk.{i}.attn_v.weight",
    "wo": "blk.{i}.attn_output.weight",
    "ffn_norm": "blk.{i}.ffn_norm.weight",
    "w_gate": "blk.{i}.ffn_gate.weight",
    "w_up": "blk.{i}.ffn_up.weight",
    "w_down": "blk.{i}.ffn_down.weight",
}
# Optional roles, present only where an architecture's row lists them (llama.cpp's names).
BIAS_TENSORS = {"bq": "blk.{i}.attn_q.bias", "bk": "blk.{i}.attn_k.bias", "bv": "blk.{i}.attn_v.bias"}
QK_NORM_TENSORS = {"q_norm": "blk.{i}.attn_q_norm.weight", "k_norm": "blk.{i}.attn_k_norm.weight"}
POST_NORM_TENSORS = {
    "post_attn_norm": "blk.{i}.post_attention_norm.weight",  # on attention's output, before its residual add
    "post_ffn_norm": "blk.{i}.post_ffw_norm.weight",  # on the FFN's output, before its residual add
}
# Stacked tensors: one tensor holding several roles' rows, top to bottom, as the forward pass keeps
# them (weights.BlockWeights' wqkv, w_gate_up, bqkv). Phi-3 files store Q K V as one attn_qkv and
# gate|up as one ffn_up of 2 d_ff rows (llama.cpp's LLM_FFN_SWIGLU on a fused up: SiLU on the first half).
STACKS: dict[str, tuple[str, ...]] = {"wqkv": ("wq", "wk", "wv"), "w_gate_up": ("w_gate", "w_up"),
                                      "bqkv": ("bq", "bk", "bv")}  # fmt: skip
FUSED_QKV_TENSOR = "blk.{i}.attn_qkv.weight"
FUSED_GATE_UP_TENSOR = "blk.{i}.ffn_up.weight"
BLOCK_ROLES = tuple(LLAMA_TENSORS)
OPTIONAL_ROLES = tuple(BIAS_TENSORS) + tuple(QK_NORM_TENSORS) + tuple(POST_NORM_TENSORS)
ACTIVATIONS = ("silu", "gelu_tanh")  # names bytesup.model.forward.ACTIVATIONS maps to functions
ROPE_LAYOUTS = ("adjacent", "neox")
ROPE_SCALINGS = ("none", "linear")  # rope.scaling.type values followed; llama.cpp reads a missing one as linear


@dataclass(frozen=True)
class ArchFacts:
    """One row of the table: what an architecture's forward pass is made of."""

    rope_layout: str  # "adjacent": rotate (x0, x1), (x2, x3), ...; "neox": (x0, x_{d/2}), (x1, x_{d/2+1}), ...
    activation: str = "silu"  # FFN gate non-linearity: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, tanh approximation)
    norm: str = "rms"  # "rms": x / sqrt(mean(x^2) + eps) * weight
    eps_key: str = "{arch}.attention.layer_norm_rms_epsilon"  # metadata key of the norm's eps ("{arch}" is replaced)
    rope_base_key: str = "{arch}.rope.freq_base"
    rope_base_default: float = 10000.0
    head_dim_keys: tuple[str, ...] = ("{arch}.attention.key_length", "{arch}.rope.dimension_count")
    embed_scale: str = "none"  # "sqrt_d_model": the embedding row is multiplied by sqrt(d_model) (Gemma)
    # sliding-window attention: the window's metadata key; None: every layer attends to all positions
    sliding_window_key: str | None = None
    sliding_window_default: int | None = None  # window without the key (None: no sliding layers then)
    sliding_window_pattern_key: str | None = None  # per-layer bools (True = sliding) or n (every nth global)
    global_every: int = 0  # without that key: layers n-1, 2n-1, ... are global, the others slide (0: all slide)
    rope_base_local: float | None = None  # rope base on sliding layers (None: the global one)
    rope_base_local_key: str | None = None  # ... or from this key when the file gives it
    rope_scale_local: float | None = None  # rope freq scale on sliding layers (None: the global one)
    tied_default: bool = False  # tied head when no tensor list says otherwise (no output.weight ever)
    # tensor names; "{i}" is the block index. Roles beyond the nine llama ones switch steps on.
    tensors: Mapping[str, str] = field(default_factory=lambda: dict(LLAMA_TENSORS))
    qkv_layouts: tuple[str, ...] = ("separate",)  # "separate" attn_q/k/v, "fused" attn_qkv; the first without names
    gate_up_fused: bool = False  # ffn_up holds gate rows then up rows (2 d_ff), no ffn_gate (phi3)
    rope_factors: str | None = None  # per-pair rope frequency factors, applied in every rope when present
    rope_factors_long: str | None = None  # factors llama.cpp uses only past the original context (phi3)
    attn_softcap: float | None = None  # attention logits -> cap * tanh(s / cap); None: the row has no cap
    final_softcap: float | None = None  # the same on the output logits; both read from {arch}.*_softcapping
    query_scale_wide_at: tuple[int, ...] = ()  # block counts at which queries scale by 1/sqrt(d_model / n_heads)
    token_embd: str = "token_embd.weight"
    output_norm: str = "output_norm.weight"
    output: str = "output.weight"  # absent -> tied: the head is token_embd

    @property
    def biases(self) -> tuple[str, ...]:
        """Roles that add a bias vector after their matrix ('wq' for 'bq', ...)."""
        return tuple("w" + r[1:] for r in BIAS_TENSORS if r in self.tensors)


# What Gemma 2 and 3 share: embedding x sqrt(d_model), GELU (tanh) gate, NeoX rope, sliding-window
# layers read from the file, a tied head, norms after attention and after the FFN.
GEMMA = {"activation": "gelu_tanh", "rope_layout": "neox", "embed_scale": "sqrt_d_model",
         "sliding_window_key": "{arch}.attention.sliding_window",
         "sliding_window_pattern_key": "{arch}.attention.sliding_window_pattern",
         "rope_base_local_key": "{arch}.rope.freq_base_swa", "tied_default": True}  # fmt: skip

ARCHITECTURES: dict[str, ArchFacts] = {
    # SmolLM2, Llama 2/3, deepseek-coder, TinyLlama, Mistral (files say llama). Llama 3.1/3.2 files
    # carry rope_freqs.weight (llama3 rope scaling as per-pair factors); Mistral 7B v0.1 gives
    # llama.attention.sliding_window (4096): every layer attends to that window when the key is
    # there (transformers' Mistral does; llama.cpp ignores the key).
    "llama": ArchFacts(
        rope_layout="adjacent", sliding_window_key="{arch}.attention.sliding_window", rope_factors="rope_freqs.weight"
    ),
    # Qwen2 / Qwen2.5: llama's block plus a bias on Q, K and V; convert_hf_to_gguf.py does not
    # permute Q and K, so rope pairs dimension i with i + d/2 (llama.cpp's LLAMA_ROPE_TYPE_NEOX)
    "qwen2": ArchFacts(rope_layout="neox", tensors={**LLAMA_TENSORS, **BIAS_TENSORS}),
    # Qwen3 (llama.cpp's llm_build_qwen3): no biases; RMSNorm of each head's q and k before rope;
    # NeoX rope; head size from key_length (128 for every dense Qwen3, not d_model / n_heads)
    "qwen3": ArchFacts(rope_layout="neox", tensors={**LLAMA_TENSORS, **QK_NORM_TENSORS}),
    # Phi-3 / 3.5 / 4 (llama.cpp's llm_build_phi3): llama's block with Q K V stored as one
    # attn_qkv (or as three) and gate|up as one ffn_up of 2 d_ff rows, split at load; NeoX rope
    # on the first rope.dimension_count dimensions (Phi-4-mini: 96 of 128); head size
    # d_model / n_heads. Long-context files (Phi-3.5, Phi-4-mini) carry rope_factors_short and
    # _long and rope.scaling.attn_factor: within rope.scaling.original_context_length llama.cpp
    # uses the short factors, and the forward pass stops there. phi3.attention.sliding_window is
    # not applied: llama.cpp disables it for Phi (its pull request 13676).
    "phi3": ArchFacts(
        rope_layout="neox",
        head_dim_keys=("{arch}.attention.key_length",),
        qkv_layouts=("fused", "separate"),
        gate_up_fused=True,
        rope_factors="rope_factors_short.weight",
        rope_factors_long="rope_factors_long.weight",
    ),
    # Gemma 2 (llama.cpp's llm_build_gemma2, transformers' Gemma2Model): GEMMA's block; even layers
    # attend to a window (4096 unless the file says), odd ones to everything, one rope base; the
    # attention scores soft-capped (50) and the logits too (30), cap * tanh(x / cap); queries
    # scaled 1/sqrt(key_length), and on the 27B (46 blocks) 1/sqrt(d_model / n_heads) as llama.cpp
    # does. Norm weights in the GGUF already hold 1 + w.
    "gemma2": ArchFacts(
        **GEMMA,
        sliding_window_default=4096,
        global_every=2,
        attn_softcap=50.0,
        final_softcap=30.0,
        query_scale_wide_at=(46,),
        tensors={**LLAMA_TENSORS, **POST_NORM_TENSORS},
    ),
    # Gemma 3 (llama.cpp's llm_build_gemma3, transformers' Gemma3TextModel; /work notes gemma3.md):
    # GEMMA's block plus a per-head RMSNorm of q and k; head size from key_length; 5 of every 6
    # layers attend to a sliding window with rope base 10,000 (unscaled), every 6th to everything
    # with the file's rope.freq_base (and its linear scaling, 4B and up); no window key, no sliding
    # layers (as llama.cpp); no caps unless the file gives final_logit_softcapping; queries scaled
    # as gemma2's (the 27B has 62 blocks). Norm weights in the GGUF already hold 1 + w.
    "gemma3": ArchFacts(
        **GEMMA,
        global_every=6,
        rope_base_local=10000.0,
        rope_scale_local=1.0,
        final_softcap=0.0,
        query_scale_wide_at=(62,),
        tensors={**LLAMA_TENSORS, **QK_NORM_TENSORS, **POST_NORM_TENSORS},
    ),
}

"""Architectures are data: one table keyed by `general.architecture`.

Like llama.cpp's llm_arch tables and gguf-py's MODEL_TENSORS, each supported architecture is a
row of facts the forward pass reads (activation, norm, where eps and the rope base live, how
big a head is, how rope pairs dimensions, tensor names); everything else is refused by name.

    spec = spec_from_metadata(f.metadata, f.tensor_names)   # -> ArchSpec, or one-line error
    supported(f.metadata)                                   # None, or the reason it won't run
    expected_tensors(f.metadata)                            # [(name, numpy shape)] the row predicts
    recipe_summary("gemma3")                                # one line for people: what its block does

Rows: llama (RMSNorm, SwiGLU, rope on adjacent pairs), qwen2 (llama + Q/K/V biases, NeoX rope),
gemma3 (embedding x sqrt(d), q/k norms, post norms, GELU-tanh gate, sliding-window layers with a
local rope base, head size from key_length, tied head). Lessons read `spec.activation`,
`spec.embed_scale`, `spec.has(role)`, `spec.layer_window(i)`, `spec.layer_rope_base(i)`.

Rope layout, "adjacent pairs": convert_hf_to_gguf.py permutes the rows of attn_q/attn_k of a
llama checkpoint so that ggml's rope type NORM, which rotates dimensions (x0, x1), (x2, x3), ...
of each head, gives what Hugging Face's rotate_half gives on (x0, x_{d/2}), (x1, x_{d/2+1}), ...
of the unpermuted weights. So on GGUF weights the pairs are adjacent. (Checked: the forward
pass matches transformers loading the same GGUF within 1e-3 on every logit; see
tests/test_model_reference_engines.py.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bytesup.errors import BytesupError, cut, quote


class UnsupportedArchitectureError(BytesupError, ValueError):
    """An architecture the forward pass has no table row for (one line: which, file, supported)."""


class ArchMetadataError(BytesupError, ValueError):
    """A key or tensor the forward pass needs is missing or unusable (one line, naming it)."""


# Tensor names of a block, "{i}" is the block index; every architecture has these nine.
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
BLOCK_ROLES = tuple(LLAMA_TENSORS)
OPTIONAL_ROLES = tuple(BIAS_TENSORS) + tuple(QK_NORM_TENSORS) + tuple(POST_NORM_TENSORS)
ACTIVATIONS = ("silu", "gelu_tanh")  # names bytesup.model.forward.ACTIVATIONS maps to functions
ROPE_LAYOUTS = ("adjacent", "neox")


@dataclass(frozen=True)
class ArchFacts:
    """One row of the table: what an architecture's forward pass is made of."""

    activation: str  # FFN gate non-linearity: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, tanh approximation)
    norm: str  # "rms": x / sqrt(mean(x^2) + eps) * weight
    eps_key: str  # metadata key of the norm's eps ("{arch}" is replaced)
    rope_layout: str  # "adjacent": rotate (x0, x1), (x2, x3), ...; "neox": (x0, x_{d/2}), (x1, x_{d/2+1}), ...
    rope_base_key: str = "{arch}.rope.freq_base"
    rope_base_default: float = 10000.0
    head_dim_keys: tuple[str, ...] = ("{arch}.attention.key_length", "{arch}.rope.dimension_count")
    embed_scale: str = "none"  # "sqrt_d_model": the embedding row is multiplied by sqrt(d_model) (Gemma)
    # sliding-window attention: the window's metadata key; None: every layer attends to all positions
    sliding_window_key: str | None = None
    sliding_window_pattern_key: str | None = None  # per-layer bools (True = sliding) or n (every nth global)
    global_every: int = 0  # without that key: layers n-1, 2n-1, ... are global, the others slide
    rope_base_local: float | None = None  # rope base on sliding layers (global layers use rope_base_key)
    rope_base_local_key: str | None = None  # ... or from this key when the file gives it
    tied_default: bool = False  # tied head when no tensor list says otherwise (no output.weight ever)
    # tensor names; "{i}" is the block index. Roles beyond the nine llama ones switch steps on.
    tensors: Mapping[str, str] = field(default_factory=lambda: dict(LLAMA_TENSORS))
    token_embd: str = "token_embd.weight"
    output_norm: str = "output_norm.weight"
    output: str = "output.weight"  # absent -> tied: the head is token_embd

    @property
    def biases(self) -> tuple[str, ...]:
        """Roles that add a bias vector after their matrix ('wq' for 'bq', ...)."""
        return tuple("w" + r[1:] for r in BIAS_TENSORS if r in self.tensors)


ARCHITECTURES: dict[str, ArchFacts] = {
    # SmolLM2, Llama 2/3, deepseek-coder, TinyLlama, Mistral-style GGUFs labelled llama
    "llama": ArchFacts(
        activation="silu",
        norm="rms",
        eps_key="{arch}.attention.layer_norm_rms_epsilon",
        rope_layout="adjacent",
    ),
    # Qwen2 / Qwen2.5: llama's block plus a bias on Q, K and V; convert_hf_to_gguf.py does not
    # permute Q and K, so rope pairs dimension i with i + d/2 (llama.cpp's LLAMA_ROPE_TYPE_NEOX)
    "qwen2": ArchFacts(
        activation="silu",
        norm="rms",
        eps_key="{arch}.attention.layer_norm_rms_epsilon",
        rope_layout="neox",
        tensors={**LLAMA_TENSORS, **BIAS_TENSORS},
    ),
    # Gemma 3 (llama.cpp's llm_build_gemma3, transformers' Gemma3TextModel; /work notes gemma3.md):
    # embedding x sqrt(d_model); per-head RMSNorm of q and k; norms after attention and after the
    # FFN, before each residual add; GELU (tanh) gate; head size from key_length; 5 of every 6
    # layers attend to a sliding window with rope base 10,000, every 6th to everything with the
    # file's rope.freq_base; no output.weight (tied). Norm weights in the GGUF already hold 1 + w.
    "gemma3": ArchFacts(
        activation="gelu_tanh",
        norm="rms",
        eps_key="{arch}.attention.layer_norm_rms_epsilon",
        rope_layout="neox",
        embed_scale="sqrt_d_model",
        sliding_window_key="{arch}.attention.sliding_window",
        sliding_window_pattern_key="{arch}.attention.sliding_window_pattern",
        global_every=6,
        rope_base_local=10000.0,
        rope_base_local_key="{arch}.rope.freq_base_swa",
        tied_default=True,
        tensors={**LLAMA_TENSORS, **QK_NORM_TENSORS, **POST_NORM_TENSORS},
    ),
}


@dataclass(frozen=True)
class ArchSpec:
    """The shape of one model, from its metadata: everything forward() needs but the weights."""

    arch: str
    n_layers: int
    d_model: int  # embedding_length: width of the residual stream
    d_ff: int  # feed_forward_length
    n_heads: int
    n_kv_heads: int  # each K/V head serves n_heads // n_kv_heads query heads
    head_dim: int
    n_rot: int  # dimensions of each head that rope rotates (== head_dim for llama)
    vocab: int
    context_length: int
    rope_base: float
    rms_eps: float
    tied: bool  # no output.weight: unembed with token_embd
    activation: str = "silu"
    norm: str = "rms"
    rope_layout: str = "adjacent"
    path: str | None = None
    embed_scale: float = 1.0  # the embedding row is multiplied by this before block 0 (Gemma: sqrt(d_model))
    sliding_window: int = 0  # keys a sliding layer's query sees, itself included; 0: no sliding layers
    sliding_layers: tuple[bool, ...] = ()  # per layer: True = sliding window, False = global; () = all global
    rope_base_local: float = 0.0  # rope base on sliding layers (0: rope_base everywhere)

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads per K/V head."""
        return self.n_heads // self.n_kv_heads

    @property
    def attn_scale(self) -> float:
        """Scores are multiplied by 1/sqrt(head size) (key_length where the file gives it)."""
        return 1.0 / math.sqrt(self.head_dim)

    @property
    def facts(self) -> ArchFacts:
        return ARCHITECTURES[self.arch]

    @property
    def roles(self) -> tuple[str, ...]:
        """The block's tensor roles in this architecture: the nine llama ones, then its extras."""
        return tuple(self.facts.tensors)

    def has(self, role: str) -> bool:
        """Whether blocks of this architecture hold `role` ('q_norm', 'bq', 'post_ffn_norm', ...)."""
        return role in self.facts.tensors

    def is_sliding(self, layer: int) -> bool:
        """True when `layer` attends to a sliding window of the last `sliding_window` positions."""
        return bool(self.sliding_layers) and self.sliding_layers[layer]

    def layer_window(self, layer: int) -> int | None:
        """Positions a query of `layer` may see (itself included), None for all of them."""
        return self.sliding_window if self.is_sliding(layer) else None

    def layer_rope_base(self, layer: int) -> float:
        """Rope base of `layer`: the local base on sliding layers, the file's rope_base on the others."""
        return self.rope_base_local if self.is_sliding(layer) and self.rope_base_local else self.rope_base

    def tensor_name(self, role: str, i: int | None = None) -> str:
        """File name of a tensor: a block role ('wq', ...) with its block, or 'token_embd' etc."""
        facts = self.facts
        if role in facts.tensors:
            return facts.tensors[role].format(i=i)
        if role == "output" and self.tied:
            return facts.token_embd
        if role in OPTIONAL_ROLES:
            raise KeyError(f"{self.arch} blocks have no {role!r} tensor (roles: {', '.join(self.roles)})")
        return getattr(facts, role)

    def role_shape(self, role: str) -> tuple[int, ...]:
        """numpy shape (rows x row length) of a block role's tensor, or of token_embd/output/output_norm."""
        d, q, kv, ff = self.d_model, self.q_dim, self.kv_dim, self.d_ff
        shapes = {
            "attn_norm": (d,), "wq": (q, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, q), "ffn_norm": (d,),
            "w_gate": (ff, d), "w_up": (ff, d), "w_down": (d, ff), "bq": (q,), "bk": (kv,), "bv": (kv,),
            "q_norm": (self.head_dim,), "k_norm": (self.head_dim,), "post_attn_norm": (d,), "post_ffn_norm": (d,),
            "token_embd": (self.vocab, d), "output": (self.vocab, d), "output_norm": (d,),
        }  # fmt: skip
        return shapes[role]

    def tensor_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """(GGUF tensor name, numpy shape) of every tensor this model holds: token_embd, each block's
        roles in table order, output_norm, and output.weight unless the head is tied."""
        out = [(self.facts.token_embd, self.role_shape("token_embd"))]
        out += [(self.tensor_name(r, i), self.role_shape(r)) for i in range(self.n_layers) for r in self.roles]
        out.append((self.facts.output_norm, self.role_shape("output_norm")))
        if not self.tied:
            out.append((self.facts.output, self.role_shape("output")))
        return out


def _where(path) -> str:
    return f"{path}: " if path else ""


def _number(key: str, value, path, kind=int):
    """A hyperparameter as the forward pass takes it: a positive whole number (kind int) or a positive,
    finite number (kind float: an eps or a rope base; NaN, infinity, 0 or a negative value is refused)."""
    if isinstance(value, (list, dict, str, bool)) or value is None:
        raise ArchMetadataError(f"{_where(path)}metadata key {quote(key)} is {quote(value)}, not a number")
    if kind is int and not float(value).is_integer():
        raise ArchMetadataError(f"{_where(path)}metadata key {quote(key)} is {value!r}, not a whole number")
    out = kind(value)
    if not (math.isfinite(out) and out > 0):
        raise ArchMetadataError(f"{_where(path)}metadata key {quote(key)} is {out}; it must be a positive"
                                f"{' finite' if kind is float else ''} number: the file is damaged or wrong")  # fmt: skip
    return out


def _key(metadata: Mapping[str, Any], key: str, path, kind=int, default=None):
    if key not in metadata:
        if default is not None:
            return default
        raise ArchMetadataError(f"{_where(path)}metadata key {quote(key)} is missing; the forward pass needs it")
    return _number(key, metadata[key], path, kind)


# The numbers of a row that the forward pass and the lessons read ("{arch}" is replaced), by kind.
HYPERPARAMETER_KEYS = {
    int: ("{arch}.embedding_length", "{arch}.feed_forward_length", "{arch}.block_count", "{arch}.context_length",
          "{arch}.attention.head_count", "{arch}.attention.head_count_kv", "{arch}.attention.key_length",
          "{arch}.attention.value_length", "{arch}.rope.dimension_count", "{arch}.vocab_size"),
}  # fmt: skip


def check_hyperparameters(metadata: Mapping[str, Any], *, path=None) -> None:
    """Refuse, in one line naming the key, a number of the model's architecture row that no model has
    (a NaN, infinite, zero or negative eps, rope base or size); keys that are absent are not asked for.
    The extract stage calls it once, so that every lesson reads checked numbers; an architecture the
    table lacks has no row to check."""
    arch = metadata.get("general.architecture")
    facts = ARCHITECTURES.get(arch) if isinstance(arch, str) else None
    if facts is None:
        return
    floats = [facts.eps_key, facts.rope_base_key] + ([facts.rope_base_local_key] if facts.rope_base_local_key else [])
    ints = list(HYPERPARAMETER_KEYS[int]) + ([facts.sliding_window_key] if facts.sliding_window_key else [])
    for kind, keys in ((int, ints), (float, floats)):
        for key in (k.format(arch=arch) for k in keys):
            if key in metadata:
                _number(key, metadata[key], path, kind)


def spec_from_metadata(
    metadata: Mapping[str, Any], tensor_names: Iterable[str] = (), *, path=None, needed_by: str | None = None
) -> ArchSpec:
    """Read the model's shape from its metadata; refuse, in one line, what the table lacks.

    tensor_names decides `tied` (no output.weight) and is checked for every block tensor.
    needed_by ("lessons 4 and 5") is appended to the refusal of an unknown architecture.
    """
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise ArchMetadataError(f"{_where(path)}metadata key 'general.architecture' is missing; cannot pick a model")
    if arch not in ARCHITECTURES:
        need = f"; {needed_by} need it" if needed_by else ""
        raise UnsupportedArchitectureError(
            f"{_where(path)}{cut(arch)}: architecture not supported by the forward pass"
            f" (supported: {', '.join(sorted(ARCHITECTURES))}){need}"
        )
    facts = ARCHITECTURES[arch]

    def k(name: str) -> str:
        return name.format(arch=arch)

    d_model = _key(metadata, k("{arch}.embedding_length"), path)
    n_heads = _key(metadata, k("{arch}.attention.head_count"), path)
    n_kv_heads = _key(metadata, k("{arch}.attention.head_count_kv"), path, default=n_heads)
    if n_heads % n_kv_heads:
        raise ArchMetadataError(
            f"{_where(path)}{k('{arch}.attention.head_count')} = {n_heads} is not a multiple of"
            f" {k('{arch}.attention.head_count_kv')} = {n_kv_heads}"
        )
    head_dim = None
    for key in facts.head_dim_keys:  # key_length first, then rope.dimension_count
        if k(key) in metadata:
            head_dim = _key(metadata, k(key), path)
            break
    if head_dim is None:
        if d_model % n_heads:
            raise ArchMetadataError(
                f"{_where(path)}{k('{arch}.embedding_length')} = {d_model} does not divide by"
                f" {k('{arch}.attention.head_count')} = {n_heads}, and no head size key is given"
            )
        head_dim = d_model // n_heads
    value_key = k("{arch}.attention.value_length")
    if value_key in metadata and _key(metadata, value_key, path) != head_dim:
        raise ArchMetadataError(f"{_where(path)}{value_key} = {metadata[value_key]} differs from the head size"
                                f" {head_dim}; the forward pass needs keys and values of one size")  # fmt: skip
    n_rot = _key(metadata, k("{arch}.rope.dimension_count"), path, default=head_dim)
    if n_rot > head_dim or n_rot % 2:
        raise ArchMetadataError(f"{_where(path)}{k('{arch}.rope.dimension_count')} = {n_rot} must be even and"
                                f" at most the head size {head_dim}")  # fmt: skip
    scaling = metadata.get(k("{arch}.rope.scaling.type"), "none")
    if scaling not in ("none", None, ""):
        raise UnsupportedArchitectureError(
            f"{_where(path)}{arch}: rope scaling {quote(scaling)} ({k('{arch}.rope.scaling.type')}) is not supported"
            " by the forward pass"
        )

    vocab_key = k("{arch}.vocab_size")
    if vocab_key in metadata:
        vocab = _key(metadata, vocab_key, path)
    elif isinstance(metadata.get("tokenizer.ggml.tokens"), list):
        vocab = len(metadata["tokenizer.ggml.tokens"])
    else:
        raise ArchMetadataError(f"{_where(path)}metadata key {vocab_key!r} is missing (and no tokenizer.ggml.tokens)")

    names = set(tensor_names)
    n_layers = _key(metadata, k("{arch}.block_count"), path)
    window, sliding = _sliding_layers(metadata, facts, arch, n_layers, path)
    rope_base = _key(metadata, k(facts.rope_base_key), path, kind=float, default=facts.rope_base_default)
    rope_base_local = 0.0
    if facts.rope_base_local is not None:
        local_key = k(facts.rope_base_local_key or "")
        rope_base_local = _key(metadata, local_key, path, kind=float, default=facts.rope_base_local)
    if names:
        wanted = [facts.token_embd, facts.output_norm]
        wanted += [t.format(i=i) for i in range(n_layers) for t in facts.tensors.values()]
        for name in wanted:
            if name not in names:
                raise ArchMetadataError(f"{_where(path)}tensor {quote(name)} is missing; the forward pass needs it")
    return ArchSpec(
        arch=arch,
        n_layers=n_layers,
        d_model=d_model,
        d_ff=_key(metadata, k("{arch}.feed_forward_length"), path),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        n_rot=n_rot,
        vocab=vocab,
        context_length=_key(metadata, k("{arch}.context_length"), path),
        rope_base=rope_base,
        rms_eps=_key(metadata, k(facts.eps_key), path, kind=float),
        tied=facts.output not in names if names else facts.tied_default,
        activation=facts.activation,
        norm=facts.norm,
        rope_layout=facts.rope_layout,
        path=str(path) if path else None,
        embed_scale=math.sqrt(d_model) if facts.embed_scale == "sqrt_d_model" else 1.0,
        sliding_window=window,
        sliding_layers=sliding,
        rope_base_local=rope_base_local,
    )


def _sliding_layers(metadata, facts: ArchFacts, arch: str, n_layers: int, path) -> tuple[int, tuple[bool, ...]]:
    """(window, per-layer True = sliding) from the file: the window's key, then the pattern key
    (a bool per layer, or n: every nth layer global), else the table's `global_every`."""
    if facts.sliding_window_key is None:
        return 0, ()
    window = _key(metadata, facts.sliding_window_key.format(arch=arch), path)
    pattern_key = (facts.sliding_window_pattern_key or "").format(arch=arch)
    pattern = metadata.get(pattern_key, facts.global_every)
    if isinstance(pattern, list):
        if len(pattern) != n_layers or not all(isinstance(p, (bool, int)) for p in pattern):
            raise ArchMetadataError(f"{_where(path)}metadata key {quote(pattern_key)} must hold one bool per block"
                                    f" ({n_layers}), not {quote(pattern)}")  # fmt: skip
        return window, tuple(bool(p) for p in pattern)
    every = _key({pattern_key: pattern}, pattern_key, path)
    return window, tuple((i + 1) % every != 0 for i in range(n_layers))


def layer_windows(metadata: Mapping[str, Any], n_layers: int, path=None) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: a global layer, which sees every position), read from the
    file the way the architecture's table row says (spec_from_metadata does the same for a model);
    every layer global for an architecture without sliding layers or not in the table."""
    arch = metadata.get("general.architecture")
    facts = ARCHITECTURES.get(arch) if isinstance(arch, str) else None
    if facts is None:
        return (None,) * n_layers
    window, sliding = _sliding_layers(metadata, facts, arch, n_layers, path)
    return tuple(window if s else None for s in sliding) if sliding else (None,) * n_layers


def recipe_summary(arch: str) -> str:
    """One line, for people, of what an architecture's block does, from its table row."""
    if arch not in ARCHITECTURES:
        raise UnsupportedArchitectureError(f"{arch}: architecture not in the table (known: {', '.join(ARCHITECTURES)})")
    f = ARCHITECTURES[arch]
    gate = {"silu": "SwiGLU FFN (SiLU gate)", "gelu_tanh": "GeGLU FFN (GELU-tanh gate)"}[f.activation]
    parts = ["embedding x sqrt(d_model)"] if f.embed_scale == "sqrt_d_model" else []
    parts.append("RMSNorm before attention and FFN")
    if "post_attn_norm" in f.tensors:
        parts.append("RMSNorm on each half's output before its residual add")
    if f.biases:
        parts.append(f"biases on {', '.join(r[1:].upper() for r in f.biases)}")
    if "q_norm" in f.tensors:
        parts.append("per-head RMSNorm of Q and K")
    rope = {"adjacent": "adjacent pairs", "neox": "NeoX halves"}[f.rope_layout]
    parts.append(f"rope on {rope}")
    parts.append("grouped-query attention scaled 1/sqrt(head size)")
    if f.sliding_window_key:
        parts.append(f"sliding-window layers (rope base {f.rope_base_local:,.0f}) with every"
                     f" {f.global_every}th layer global (file's rope base) unless the file says otherwise")  # fmt: skip
    parts.append(gate)
    parts.append("tied output head" if f.tied_default else "output head (tied when output.weight is absent)")
    return f"{arch}: " + "; ".join(parts)


def expected_tensors(metadata: Mapping[str, Any], tensor_names: Iterable[str] = (), *, path=None
                     ) -> list[tuple[str, tuple[int, ...]]]:  # fmt: skip
    """(name, numpy shape) of every tensor the table expects a file of this metadata to hold.

    Without tensor_names the head is tied only where the architecture always ties it.
    """
    return spec_from_metadata(metadata, tensor_names, path=path).tensor_shapes()


def supported(metadata: Mapping[str, Any], tensor_names: Iterable[str] = (), *, path=None) -> str | None:
    """None when the forward pass can run this model, else the one-line reason (no exception)."""
    try:
        spec_from_metadata(metadata, tensor_names, path=path)
    except (UnsupportedArchitectureError, ArchMetadataError) as err:
        return str(err)
    return None

"""Architectures are data: one table keyed by `general.architecture`.

Like llama.cpp's llm_arch tables and gguf-py's MODEL_TENSORS, each supported architecture is a
row of facts the forward pass reads (activation, norm, where eps and the rope base live, how
big a head is, how rope pairs dimensions, tensor names); everything else is refused by name.

    spec = spec_from_metadata(f.metadata, f.tensor_names)   # -> ArchSpec, or one-line error
    supported(f.metadata)                                   # None, or the reason it won't run

Rope layout, "adjacent pairs": convert_hf_to_gguf.py permutes the rows of attn_q/attn_k of a
llama checkpoint so that ggml's rope type NORM, which rotates dimensions (x0, x1), (x2, x3), ...
of each head, gives what Hugging Face's rotate_half gives on (x0, x_{d/2}), (x1, x_{d/2+1}), ...
of the unpermuted weights. So on GGUF weights the pairs are adjacent. (Checked: the forward
pass matches transformers loading the same GGUF within 1e-3 on every logit; see
tests/test_model_reference_engines.py.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


class UnsupportedArchitectureError(ValueError):
    """An architecture the forward pass has no table row for (one line: which, file, supported)."""


class ArchMetadataError(ValueError):
    """A key or tensor the forward pass needs is missing or unusable (one line, naming it)."""


@dataclass(frozen=True)
class ArchFacts:
    """One row of the table: what an architecture's forward pass is made of."""

    activation: str  # FFN gate non-linearity
    norm: str  # "rms": x / sqrt(mean(x^2) + eps) * weight
    eps_key: str  # metadata key of the norm's eps ("{arch}" is replaced)
    rope_layout: str  # "adjacent": rotate (x0, x1), (x2, x3), ... of each head
    rope_base_key: str = "{arch}.rope.freq_base"
    rope_base_default: float = 10000.0
    head_dim_keys: tuple[str, ...] = ("{arch}.attention.key_length", "{arch}.rope.dimension_count")
    biases: tuple[str, ...] = ()  # roles that carry a bias vector
    extras: tuple[str, ...] = ()  # per-architecture steps beyond the plain llama block
    # tensor names; "{i}" is the block index
    tensors: Mapping[str, str] = field(
        default_factory=lambda: {
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
    )
    token_embd: str = "token_embd.weight"
    output_norm: str = "output_norm.weight"
    output: str = "output.weight"  # absent -> tied: the head is token_embd


ARCHITECTURES: dict[str, ArchFacts] = {
    # SmolLM2, Llama 2/3, deepseek-coder, TinyLlama, Mistral-style GGUFs labelled llama
    "llama": ArchFacts(
        activation="silu",
        norm="rms",
        eps_key="{arch}.attention.layer_norm_rms_epsilon",
        rope_layout="adjacent",
    ),
}

BLOCK_ROLES = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")


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
    def facts(self) -> ArchFacts:
        return ARCHITECTURES[self.arch]

    def tensor_name(self, role: str, i: int | None = None) -> str:
        """File name of a tensor: a block role ('wq', ...) with its block, or 'token_embd' etc."""
        facts = self.facts
        if role in facts.tensors:
            return facts.tensors[role].format(i=i)
        if role == "output" and self.tied:
            return facts.token_embd
        return getattr(facts, role)


def _where(path) -> str:
    return f"{path}: " if path else ""


def _key(metadata: Mapping[str, Any], key: str, path, kind=int, default=None):
    if key not in metadata:
        if default is not None:
            return default
        raise ArchMetadataError(f"{_where(path)}metadata key {key!r} is missing; the forward pass needs it")
    value = metadata[key]
    try:
        if isinstance(value, (list, dict, str)) or value is None:
            raise TypeError
        out = kind(value)
    except (TypeError, ValueError):
        raise ArchMetadataError(f"{_where(path)}metadata key {key!r} is {value!r}, not a number") from None
    if kind is int and out <= 0 and default is None:
        raise ArchMetadataError(f"{_where(path)}metadata key {key!r} is {out}; it must be positive")
    return out


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
            f"{_where(path)}{arch}: architecture not supported by the forward pass"
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
    n_rot = _key(metadata, k("{arch}.rope.dimension_count"), path, default=head_dim)
    if n_rot > head_dim or n_rot % 2:
        raise ArchMetadataError(f"{_where(path)}{k('{arch}.rope.dimension_count')} = {n_rot} must be even and"
                                f" at most the head size {head_dim}")  # fmt: skip
    scaling = metadata.get(k("{arch}.rope.scaling.type"), "none")
    if scaling not in ("none", None, ""):
        raise UnsupportedArchitectureError(
            f"{_where(path)}{arch}: rope scaling {scaling!r} ({k('{arch}.rope.scaling.type')}) is not supported"
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
    if names:
        wanted = [facts.token_embd, facts.output_norm]
        wanted += [t.format(i=i) for i in range(n_layers) for t in facts.tensors.values()]
        for name in wanted:
            if name not in names:
                raise ArchMetadataError(f"{_where(path)}tensor {name!r} is missing; the forward pass needs it")
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
        rope_base=_key(metadata, k(facts.rope_base_key), path, kind=float, default=facts.rope_base_default),
        rms_eps=_key(metadata, k(facts.eps_key), path, kind=float),
        tied=bool(names) and facts.output not in names,
        activation=facts.activation,
        norm=facts.norm,
        rope_layout=facts.rope_layout,
        path=str(path) if path else None,
    )


def supported(metadata: Mapping[str, Any], tensor_names: Iterable[str] = (), *, path=None) -> str | None:
    """None when the forward pass can run this model, else the one-line reason (no exception)."""
    try:
        spec_from_metadata(metadata, tensor_names, path=path)
    except (UnsupportedArchitectureError, ArchMetadataError) as err:
        return str(err)
    return None

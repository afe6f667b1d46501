"""Architectures are data: one table keyed by `general.architecture`.

Like llama.cpp's llm_arch tables and gguf-py's MODEL_TENSORS, each supported architecture is a
row of facts the forward pass reads (activation, norm, where eps and the rope base live, how
big a head is, how rope pairs dimensions, tensor names); everything else is refused by name, and
so is a file holding a tensor its row does not use (llama.cpp refuses those files too).

    spec = spec_from_metadata(f.metadata, f.tensor_names)   # -> ArchSpec, or one-line error
    supported(f.metadata)                                   # None, or the reason it won't run
    expected_tensors(f.metadata)                            # [(name, numpy shape)] the row predicts
    recipe_summary("gemma3")                                # one line for people: what its block does

Rows: llama (RMSNorm, SwiGLU, rope on adjacent pairs; rope_freqs.weight and a sliding window when
the file has them), qwen2 (llama + Q/K/V biases, NeoX rope), qwen3 (llama + per-head q/k norms,
NeoX rope), phi3 (Q K V in one tensor and gate|up in one, split at load; NeoX rope, often partial;
short rope factors), gemma2 (embedding x sqrt(d), post norms, GELU-tanh gate, every other layer
sliding, soft-capped attention and final logits), gemma3 (gemma2's block without the caps, plus
q/k norms, 5 sliding layers per global one with a local rope base). Lessons read
`spec.activation`, `spec.embed_scale`, `spec.has(role)`, `spec.layer_window(i)`,
`spec.layer_rope(i)`, `spec.attn_scale`, `spec.attn_softcap`, `spec.final_softcap`. The rows
themselves are in bytesup.model.arch_table (ARCHITECTURES, imported from here).

Rope layout, "adjacent pairs": convert_hf_to_gguf.py permutes the rows of attn_q/attn_k of a
llama checkpoint so that ggml's rope type NORM, which rotates dimensions (x0, x1), (x2, x3), ...
of each head, gives what Hugging Face's rotate_half gives on (x0, x_{d/2}), (x1, x_{d/2+1}), ...
of the unpermuted weights. So on GGUF weights the pairs are adjacent. (Checked: the forward
pass matches transformers loading the same GGUF within 1e-3 on every logit; see
tests/test_model_reference_engines.py.)

Rope angles, as llama.cpp's ggml_rope_ext computes them: pair i of a position p turns by
freq_scale * p * base^(-2i/n_rot) / factor_i, and cos and sin are multiplied by attn_factor.
freq_scale is 1 / rope.scaling.factor for "linear" scaling (deepseek-coder, Gemma 3's global
layers), factor_i comes from a tensor of per-pair factors (Llama 3.1's rope_freqs.weight, Phi-3's
rope_factors_short.weight), attn_factor from rope.scaling.attn_factor (Phi-3.5). "yarn" and other
scalings are refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bytesup.errors import BytesupError, cut, quote

# The table's rows and names live in arch_table; they are imported from here (bytesup.model.arch).
from bytesup.model.arch_table import ACTIVATIONS as ACTIVATIONS
from bytesup.model.arch_table import (
    ARCHITECTURES,
    FUSED_GATE_UP_TENSOR,
    FUSED_QKV_TENSOR,
    OPTIONAL_ROLES,
    ROPE_SCALINGS,
    STACKS,
    ArchFacts,
)
from bytesup.model.arch_table import BIAS_TENSORS as BIAS_TENSORS
from bytesup.model.arch_table import BLOCK_ROLES as BLOCK_ROLES
from bytesup.model.arch_table import LLAMA_TENSORS as LLAMA_TENSORS
from bytesup.model.arch_table import POST_NORM_TENSORS as POST_NORM_TENSORS
from bytesup.model.arch_table import QK_NORM_TENSORS as QK_NORM_TENSORS
from bytesup.model.arch_table import ROPE_LAYOUTS as ROPE_LAYOUTS


class UnsupportedArchitectureError(BytesupError, ValueError):
    """An architecture the forward pass has no table row for (one line: which, file, supported)."""


class ArchMetadataError(BytesupError, ValueError):
    """A key or tensor the forward pass needs is missing or unusable (one line, naming it)."""


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
    context_length: int  # positions the forward pass follows (the value of context_key)
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
    rope_freq_scale: float = 1.0  # positions x this in every rope (linear scaling: 1 / rope.scaling.factor)
    rope_scale_local: float = 0.0  # ... on sliding layers (0: rope_freq_scale everywhere)
    rope_attn_factor: float = 1.0  # cos and sin x this (rope.scaling.attn_factor)
    rope_factors: str = ""  # tensor of per-pair frequency factors applied in every rope ("": none)
    rope_tensors: tuple[str, ...] = ()  # every rope tensor of the file (the factors, and phi3's long ones)
    fused_qkv: bool = False  # Q K V in one attn_qkv tensor per block (phi3)
    fused_gate_up: bool = False  # gate and up in one ffn_up tensor of 2 d_ff rows (phi3)
    attn_softcap: float = 0.0  # attention scores -> cap * tanh(s / cap) before the mask (0: none)
    final_softcap: float = 0.0  # logits -> cap * tanh(logits / cap) (0: none)
    query_pre_attn_scalar: int = 0  # scores x 1/sqrt(this) (0: the head size)
    context_key: str = ""  # the metadata key context_length came from ("": {arch}.context_length)

    def __post_init__(self):
        if not self.context_key:
            object.__setattr__(self, "context_key", f"{self.arch}.context_length")

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
        """Scores are multiplied by 1/sqrt(head size) (key_length where the file gives it), or by
        1/sqrt(query_pre_attn_scalar) where the row says so (Gemma 2 and 3 27B)."""
        return 1.0 / math.sqrt(self.query_pre_attn_scalar or self.head_dim)

    @property
    def facts(self) -> ArchFacts:
        return ARCHITECTURES[self.arch]

    @property
    def block_tensors(self) -> dict[str, str]:
        """Role -> tensor name pattern of a block as this file stores it: the row's roles, with Q K V
        as one 'wqkv' and gate|up as one 'w_gate_up' where the file stacks them (phi3)."""
        out: dict[str, str] = {}
        for role, name in self.facts.tensors.items():
            if self.fused_qkv and role in STACKS["wqkv"]:
                out.setdefault("wqkv", FUSED_QKV_TENSOR)
            elif self.fused_gate_up and role in STACKS["w_gate_up"]:
                out.setdefault("w_gate_up", FUSED_GATE_UP_TENSOR)
            else:
                out[role] = name
        return out

    @property
    def roles(self) -> tuple[str, ...]:
        """The block's tensor roles in this file: the nine llama ones (or their stacks), then its extras."""
        return tuple(self.block_tensors)

    def has(self, role: str) -> bool:
        """Whether blocks hold `role` ('q_norm', 'bq', 'post_ffn_norm', 'wq', ...), as a tensor of its
        own or as rows of a stacked one."""
        return role in self.facts.tensors or role in self.block_tensors

    def is_sliding(self, layer: int) -> bool:
        """True when `layer` attends to a sliding window of the last `sliding_window` positions."""
        return bool(self.sliding_layers) and self.sliding_layers[layer]

    def layer_window(self, layer: int) -> int | None:
        """Positions a query of `layer` may see (itself included), None for all of them."""
        return self.sliding_window if self.is_sliding(layer) else None

    def layer_rope_base(self, layer: int) -> float:
        """Rope base of `layer`: the local base on sliding layers, the file's rope_base on the others."""
        return self.rope_base_local if self.is_sliding(layer) and self.rope_base_local else self.rope_base

    def layer_rope(self, layer: int) -> tuple[float, float]:
        """(rope base, freq scale) of `layer` (llama.cpp's get_rope_freq_base / _scale)."""
        local = self.is_sliding(layer) and self.rope_scale_local
        return self.layer_rope_base(layer), self.rope_scale_local if local else self.rope_freq_scale

    def stacked_rows(self, role: str) -> tuple[str, slice]:
        """Where a role's rows live in the block's float32 arrays (weights.BlockWeights): the array's
        name and the rows; 'wk' is rows q_dim .. q_dim + kv_dim of 'wqkv', 'attn_norm' all of itself."""
        for stack, parts in STACKS.items():
            if role == stack:
                return stack, slice(None)
            if role in parts:
                sizes = [self.role_shape(p)[0] for p in parts]
                start = sum(sizes[: parts.index(role)])
                return stack, slice(start, start + sizes[parts.index(role)])
        return role, slice(None)

    def file_roles(self, *roles: str) -> tuple[str, ...]:
        """The roles of this file's tensors that hold `roles`: ('wq', 'wk', 'wv') is ('wqkv',) on phi3."""
        held = self.block_tensors
        out = [r if r in held else next(s for s in STACKS if r in STACKS[s] and s in held) for r in roles]
        return tuple(dict.fromkeys(out))

    def tensor_name(self, role: str, i: int | None = None) -> str:
        """File name of a tensor: a block role ('wq', ...) with its block, or 'token_embd' etc."""
        facts, held = self.facts, self.block_tensors
        if role in held:
            return held[role].format(i=i)
        if role == "output" and self.tied:
            return facts.token_embd
        if self.has(role):
            stack = self.file_roles(role)[0]
            raise KeyError(f"{self.arch} files hold {role!r} as rows of {held[stack].format(i=i)!r} ({stack!r})")
        if role in OPTIONAL_ROLES or role in STACKS:
            raise KeyError(f"{self.arch} blocks have no {role!r} tensor (roles: {', '.join(self.roles)})")
        return getattr(facts, role)

    def role_shape(self, role: str) -> tuple[int, ...]:
        """numpy shape (rows x row length) of a block role's tensor, or of token_embd/output/output_norm."""
        d, q, kv, ff = self.d_model, self.q_dim, self.kv_dim, self.d_ff
        shapes = {
            "attn_norm": (d,), "wq": (q, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, q), "ffn_norm": (d,),
            "w_gate": (ff, d), "w_up": (ff, d), "w_down": (d, ff), "bq": (q,), "bk": (kv,), "bv": (kv,),
            "q_norm": (self.head_dim,), "k_norm": (self.head_dim,), "post_attn_norm": (d,), "post_ffn_norm": (d,),
            "wqkv": (q + 2 * kv, d), "w_gate_up": (2 * ff, d), "bqkv": (q + 2 * kv,),
            "token_embd": (self.vocab, d), "output": (self.vocab, d), "output_norm": (d,),
        }  # fmt: skip
        return shapes[role]

    def tensor_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """(GGUF tensor name, numpy shape) of every tensor this model holds: token_embd, the rope
        tensors, each block's roles in table order, output_norm, and output.weight unless the head is tied."""
        out = [(self.facts.token_embd, self.role_shape("token_embd"))]
        out += [(name, (self.n_rot // 2,)) for name in self.rope_tensors]
        out += [(self.tensor_name(r, i), self.role_shape(r)) for i in range(self.n_layers) for r in self.roles]
        out.append((self.facts.output_norm, self.role_shape("output_norm")))
        if not self.tied:
            out.append((self.facts.output, self.role_shape("output")))
        return out


def _where(path) -> str:
    return f"{path}: " if path else ""


def _number(key: str, value, path, kind=int, positive: bool = True):
    """A hyperparameter as the forward pass takes it: a whole number (kind int) or a finite number
    (kind float: an eps, a rope base), at least 0, and more than 0 when `positive`; NaN, infinity,
    a string or a list is refused in one line naming the key."""
    if isinstance(value, (list, dict, str, bool)) or value is None:
        raise ArchMetadataError(f"{_where(path)}metadata key {quote(key)} is {quote(value)}, not a number")
    if kind is int and not (math.isfinite(float(value)) and float(value).is_integer()):
        raise ArchMetadataError(f"{_where(path)}metadata key {quote(key)} is {value!r}, not a whole number")
    out = kind(value)
    if not math.isfinite(out) or out < 0 or (out == 0 and positive):
        need = "positive" if positive else "positive or 0"
        raise ArchMetadataError(f"{_where(path)}metadata key {quote(key)} is {out}; it must be {need}"
                                f"{' (a finite number)' if kind is float else ''}: the file is damaged or wrong")  # fmt: skip
    return out


def _key(metadata: Mapping[str, Any], key: str, path, kind=int, default=None, positive: bool = True):
    """metadata[key] as `kind`, or `default` when absent (missing without a default: one line). 0 is
    refused unless `positive` is False (a scaling factor, a soft cap or a pattern where 0 means none)."""
    if key not in metadata:
        if default is not None:
            return default
        raise ArchMetadataError(f"{_where(path)}metadata key {quote(key)} is missing; the forward pass needs it")
    return _number(key, metadata[key], path, kind, positive=positive)


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


def recipe_problem(metadata: Mapping[str, Any], tensor_names: Iterable[str]) -> str | None:
    """None when the forward pass can follow this file (its architecture's row, its numbers, every
    tensor it holds and needs), else the one line why not. An architecture the table lacks is the
    lessons' own refusal (LessonSpec.follows); this is for a file of a known architecture that the
    recipe cannot run: a tensor it would ignore, one it lacks, a number it cannot take."""
    if metadata.get("general.architecture") not in ARCHITECTURES:
        return None
    try:
        spec_from_metadata(metadata, tensor_names)
    except ArchMetadataError as err:
        return str(err)
    return None


def spec_from_metadata(
    metadata: Mapping[str, Any],
    tensor_names: Iterable[str] = (),
    *,
    path=None,
    needed_by: str | None = None,
    check_tensors: bool = True,
) -> ArchSpec:
    """Read the model's shape from its metadata; refuse, in one line, what the table lacks.

    tensor_names decides what the metadata cannot say (`tied`: no output.weight; stacked Q K V; the
    rope tensors) and, with check_tensors, is checked: every tensor the row needs is there, and
    every tensor there is one the row uses (else the pass would ignore it: refused, naming it).
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
    if n_kv_heads == 0 or n_heads % n_kv_heads:
        raise ArchMetadataError(
            f"{_where(path)}{k('{arch}.attention.head_count')} = {n_heads} is not a multiple of"
            f" {k('{arch}.attention.head_count_kv')} = {n_kv_heads}"
        )
    head_dim = None
    for key in facts.head_dim_keys:  # key_length first, then (llama) rope.dimension_count
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
    if n_rot > head_dim or n_rot % 2 or n_rot == 0:
        raise ArchMetadataError(f"{_where(path)}{k('{arch}.rope.dimension_count')} = {n_rot} must be even and"
                                f" at most the head size {head_dim}")  # fmt: skip

    vocab_key = k("{arch}.vocab_size")
    if vocab_key in metadata:
        vocab = _key(metadata, vocab_key, path)
    elif isinstance(metadata.get("tokenizer.ggml.tokens"), list):
        vocab = len(metadata["tokenizer.ggml.tokens"])
    else:
        raise ArchMetadataError(f"{_where(path)}metadata key {vocab_key!r} is missing (and no tokenizer.ggml.tokens)")

    order = list(tensor_names)
    names = set(order)
    n_layers = _key(metadata, k("{arch}.block_count"), path)
    window, sliding = _sliding_layers(metadata, facts, arch, n_layers, path)
    rope_base = _key(metadata, k(facts.rope_base_key), path, kind=float, default=facts.rope_base_default)
    rope_base_local = 0.0
    if sliding and facts.rope_base_local_key:
        default = facts.rope_base_local or rope_base
        rope_base_local = _key(metadata, k(facts.rope_base_local_key), path, kind=float, default=default)
    rope_tensors = tuple(t for t in (facts.rope_factors, facts.rope_factors_long) if t and t in names)
    context_key = k("{arch}.context_length")
    context = _key(metadata, context_key, path)
    if facts.rope_factors_long in names:  # llama.cpp switches to the long factors past the original context
        orig_key = k("{arch}.rope.scaling.original_context_length")
        if orig_key in metadata and _key(metadata, orig_key, path) < context:
            context, context_key = _key(metadata, orig_key, path), orig_key
    fused_qkv = facts.qkv_layouts[0] == "fused"
    if names and "fused" in facts.qkv_layouts:
        fused_qkv = FUSED_QKV_TENSOR.format(i=0) in names
    query_scalar = d_model // n_heads if n_layers in facts.query_scale_wide_at else 0
    spec = ArchSpec(
        arch=arch,
        n_layers=n_layers,
        d_model=d_model,
        d_ff=_key(metadata, k("{arch}.feed_forward_length"), path),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        n_rot=n_rot,
        vocab=vocab,
        context_length=context,
        rope_base=rope_base,
        rms_eps=_key(metadata, k(facts.eps_key), path, kind=float, default=None),
        tied=facts.output not in names if names else facts.tied_default,
        activation=facts.activation,
        norm=facts.norm,
        rope_layout=facts.rope_layout,
        path=str(path) if path else None,
        embed_scale=math.sqrt(d_model) if facts.embed_scale == "sqrt_d_model" else 1.0,
        sliding_window=window,
        sliding_layers=sliding,
        rope_base_local=rope_base_local,
        rope_freq_scale=_rope_freq_scale(metadata, arch, path),
        rope_scale_local=(facts.rope_scale_local or 0.0) if sliding else 0.0,
        rope_attn_factor=_key(
            metadata, k("{arch}.rope.scaling.attn_factor"), path, kind=float, default=1.0, positive=True
        ),
        rope_factors=facts.rope_factors if facts.rope_factors in rope_tensors else "",
        rope_tensors=rope_tensors,
        fused_qkv=fused_qkv,
        fused_gate_up=facts.gate_up_fused,
        attn_softcap=_softcap(metadata, k("{arch}.attn_logit_softcapping"), facts.attn_softcap, path),
        final_softcap=_softcap(metadata, k("{arch}.final_logit_softcapping"), facts.final_softcap, path),
        query_pre_attn_scalar=query_scalar,
        context_key=context_key,
    )
    if names and check_tensors:
        _check_tensors(spec, order, path)
    return spec


def _check_tensors(spec: ArchSpec, names: list[str], path) -> None:
    """Every tensor the row needs is in the file, and every tensor in the file is one it uses."""
    wanted = [name for name, _ in spec.tensor_shapes()]
    known = set(wanted)
    for name in names:
        if name not in known:
            raise ArchMetadataError(
                f"{_where(path)}tensor {quote(name)} is not part of the {spec.arch} recipe (bytesup.model.arch):"
                " the forward pass would ignore it, so it refuses the file"
            )
    present = set(names)
    for name in wanted:
        if name not in present:
            raise ArchMetadataError(f"{_where(path)}tensor {name!r} is missing; the forward pass needs it")


def _rope_freq_scale(metadata: Mapping[str, Any], arch: str, path) -> float:
    """Positions are multiplied by this in every rope: 1 / rope.scaling.factor (or the older
    rope.scale_linear) for linear scaling, as llama.cpp reads them; other scalings are refused."""
    type_key = f"{arch}.rope.scaling.type"
    scaling = metadata.get(type_key, "linear")  # llama.cpp's default when the key is absent
    if scaling not in ROPE_SCALINGS:
        raise UnsupportedArchitectureError(
            f"{_where(path)}{arch}: rope scaling {quote(str(scaling))} ({type_key}) is not followed by the"
            f" forward pass (it follows {', '.join(ROPE_SCALINGS)})"
        )
    factor_key = next((key for key in (f"{arch}.rope.scaling.factor", f"{arch}.rope.scale_linear")
                       if key in metadata), None)  # fmt: skip
    factor = _key(metadata, factor_key, path, kind=float, default=0.0, positive=False) if factor_key else 0.0
    return 1.0 if scaling == "none" or factor in (0.0, 1.0) else 1.0 / factor


def _softcap(metadata: Mapping[str, Any], key: str, default: float | None, path) -> float:
    """A soft-capping value where the row has one (the file's key, else the row's default), else 0."""
    if default is None:
        return 0.0
    return _key(metadata, key, path, kind=float, default=default, positive=False)


def _sliding_layers(metadata, facts: ArchFacts, arch: str, n_layers: int, path) -> tuple[int, tuple[bool, ...]]:
    """(window, per-layer True = sliding) from the file: the window's key (or the row's default;
    neither: no sliding layers), then the pattern key (a bool per layer, or n: every nth layer
    global, 0: none), else the table's `global_every`."""
    if facts.sliding_window_key is None:
        return 0, ()
    window_key = facts.sliding_window_key.format(arch=arch)
    if window_key not in metadata and facts.sliding_window_default is None:
        return 0, ()
    window = _key(metadata, window_key, path, default=facts.sliding_window_default)
    pattern_key = (facts.sliding_window_pattern_key or "").format(arch=arch)
    pattern = metadata.get(pattern_key, facts.global_every)
    if isinstance(pattern, list):
        if len(pattern) != n_layers or not all(isinstance(p, (bool, int)) for p in pattern):
            raise ArchMetadataError(f"{_where(path)}metadata key {pattern_key!r} must hold one bool per block"
                                    f" ({n_layers}), not {pattern[:8]!r}")  # fmt: skip
        return window, tuple(bool(p) for p in pattern)
    every = _key({pattern_key: pattern}, pattern_key, path, default=0, positive=False)
    return window, tuple(every == 0 or (i + 1) % every != 0 for i in range(n_layers))


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
    if f.qkv_layouts[0] == "fused":
        parts.append("Q K V stored as one matrix (attn_qkv) and split at load")
    if f.biases:
        parts.append(f"biases on {', '.join(r[1:].upper() for r in f.biases)}")
    if "q_norm" in f.tensors:
        parts.append("per-head RMSNorm of Q and K")
    rope = {"adjacent": "adjacent pairs", "neox": "NeoX halves"}[f.rope_layout]
    parts.append(f"rope on {rope} (the first rope.dimension_count dimensions of a head)")
    if f.rope_factors:
        within = " (up to rope.scaling.original_context_length, where the pass stops)" if f.rope_factors_long else ""
        parts.append(f"rope frequencies divided by {f.rope_factors} when the file has it{within}")
    scale = "scaled 1/sqrt(head size)"
    if f.query_scale_wide_at:
        scale += f" (1/sqrt(d_model / heads) at {' or '.join(map(str, f.query_scale_wide_at))} blocks)"
    parts.append(f"grouped-query attention {scale}")
    if f.attn_softcap:
        parts.append(f"attention scores soft-capped, cap x tanh(s / cap) (cap {f.attn_softcap:g} unless the file says)")
    if f.sliding_window_key:
        if f.global_every == 0:
            parts.append("every layer attends to a sliding window when the file gives one")
        else:
            base = f" (rope base {f.rope_base_local:,.0f})" if f.rope_base_local else ""
            every = "other" if f.global_every == 2 else f"{f.global_every}th"
            parts.append(f"sliding-window layers{base} with every {every} layer global (file's rope"
                         " base) unless the file says otherwise")  # fmt: skip
    parts.append(gate + (", gate and up stored as one matrix (ffn_up)" if f.gate_up_fused else ""))
    parts.append("tied output head" if f.tied_default else "output head (tied when output.weight is absent)")
    if f.final_softcap:
        parts.append(f"logits soft-capped (cap {f.final_softcap:g} unless the file says)")
    return f"{arch}: " + "; ".join(parts)


def expected_tensors(metadata: Mapping[str, Any], tensor_names: Iterable[str] = (), *, path=None
                     ) -> list[tuple[str, tuple[int, ...]]]:  # fmt: skip
    """(name, numpy shape) of every tensor the table expects a file of this metadata to hold.

    Without tensor_names the head is tied only where the architecture always ties it, and no
    optional rope tensor is expected; with them, those follow the file and nothing is checked.
    """
    return spec_from_metadata(metadata, tensor_names, path=path, check_tensors=False).tensor_shapes()


def supported(metadata: Mapping[str, Any], tensor_names: Iterable[str] = (), *, path=None) -> str | None:
    """None when the forward pass can run this model, else the one-line reason (no exception)."""
    try:
        spec_from_metadata(metadata, tensor_names, path=path)
    except (UnsupportedArchitectureError, ArchMetadataError) as err:
        return str(err)
    return None

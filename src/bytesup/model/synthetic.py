"""Tiny llama-style GGUF files for tests, written with gguf.GGUFWriter.

    path = write_tiny_llama(tmp_path / "tiny.gguf")   # 2 blocks, width 32, FFN 64
    path = write_tiny_gemma3(tmp_path / "g.gguf")     # 6 blocks (block 5 global), window 4, head 16
    path = write_tiny(tmp_path / "p.gguf", "phi3")    # any row of the architecture table, its own tensors
    path = write_shaped(path, DEEPSEEK_CODER_6_7B)    # the course specimen's exact shapes, 7.16 GB
    parts = write_split(path, tmp_path / "m.gguf", 3)  # the same model as m-00001-of-00003.gguf ...

Files are written tensor by tensor (each made, encoded and written before the next), so memory
holds one tensor, never the file: a multi-GB file of a published shape costs its largest tensor.

Same tensor names and metadata keys as a real llama GGUF, a GPT-2 style vocabulary
(leading space = 'Ġ') with 'Ġcat' and its neighbours, and a mix of tensor types:

    F32   norms                   Q8_0  token_embd, attn_v
    F16   output.weight           Q4_0  attn_k, ffn_up
    Q4_1  attn_q, attn_output, ffn_gate, ffn_down
    block 1 swaps in BF16 (attn_norm), Q5_0 (attn_k) and Q5_1 (attn_v) so every hand
    dequantizer has a tensor to read.

Weights are deterministic from `seed`. The cat-like tokens share a direction in the
embedding (cos ~0.8 among 'Ġcat', 'Ġcats', 'Ġkitten'; ~0.5 to 'Ġdog') so similarity
lessons have something to find.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.constants import GGMLQuantizationType
from gguf.quants import quantize

from bytesup.gguf.sizes import type_bytes
from bytesup.model.arch import spec_from_metadata
from bytesup.model.configs import Architecture, llama_tensor_shapes

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
WORDS = ["Ġthe", "Ġcat", "Ġcats", "Ġkitten", "Ġdog", "Ġdogs", "Ġpuppy", "Ġsat", "Ġon", "Ġmat", "Ġa", "Ġran"]
BASE_CHARS = ["Ġ", ".", ","] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL = 1, 3

# Tensor name pattern -> ggml type name; the first matching pattern wins.
DEFAULT_TYPES: dict[str, str] = {
    "token_embd.weight": "Q8_0",
    "output.weight": "F16",
    "output_norm.weight": "F32",
    "blk.1.attn_norm.weight": "BF16",
    "blk.1.attn_k.weight": "Q5_0",
    "blk.1.attn_v.weight": "Q5_1",
    "blk.*.attn_norm.weight": "F32",
    "blk.*.ffn_norm.weight": "F32",
    "blk.*.attn_q.weight": "Q4_1",
    "blk.*.attn_k.weight": "Q4_0",
    "blk.*.attn_v.weight": "Q8_0",
    "blk.*.attn_output.weight": "Q4_1",
    "blk.*.ffn_gate.weight": "Q4_1",
    "blk.*.ffn_up.weight": "Q4_0",
    "blk.*.ffn_down.weight": "Q4_1",
}


def default_tokens() -> list[str]:
    """Specials, single characters, then every prefix of every word (so merges can build them)."""
    tokens = list(SPECIAL_TOKENS) + list(BASE_CHARS)
    for word in WORDS:
        for k in range(2, len(word) + 1):
            if word[:k] not in tokens:
                tokens.append(word[:k])
    return tokens


def prefix_merges(tokens: list[str]) -> list[str]:
    """BPE merges 'left right' that build each token from its prefix plus one character."""
    vocab = set(tokens)
    merges = []
    for tok in tokens:
        if tok in SPECIAL_TOKENS or len(tok) < 2:
            continue
        left, right = tok[:-1], tok[-1]
        if left in vocab and right in vocab and " " not in left + right:
            merges.append(f"{left} {right}")
    return merges


def _type_for(name: str, types: dict[str, str]) -> str:
    for pattern, type_name in types.items():
        if fnmatch.fnmatchcase(name, pattern):
            return type_name
    raise ValueError(f"no type given for tensor {name!r}")


def _encode(data: np.ndarray, type_name: str) -> tuple[np.ndarray, GGMLQuantizationType | None]:
    qtype = GGMLQuantizationType[type_name]
    if qtype == GGMLQuantizationType.F32:
        return data.astype(np.float32), None
    if qtype == GGMLQuantizationType.F16:
        return data.astype(np.float16), None
    return quantize(data.astype(np.float32), qtype), qtype  # uint8 bytes, row shape in bytes


def _embeddings(rng: np.random.Generator, tokens: list[str], n_embd: int) -> np.ndarray:
    emb = rng.standard_normal((len(tokens), n_embd)).astype(np.float32) * 0.5
    cat = rng.standard_normal(n_embd).astype(np.float32)
    for word, share in (("Ġcat", 2.0), ("Ġcats", 2.0), ("Ġkitten", 2.0), ("Ġdog", 1.0), ("Ġpuppy", 1.0)):
        if word in tokens:
            emb[tokens.index(word)] += share * cat
    return emb


def write_tiny_llama(
    path: str | os.PathLike,
    *,
    n_vocab: int | None = None,
    n_embd: int = 32,
    n_ff: int = 64,
    n_layers: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ctx: int = 128,
    seed: int = 0,
    tied: bool = False,
    extra_metadata: dict[str, Any] | None = None,
    tokens: list[str] | None = None,
    types: dict[str, str] | None = None,
    arch: str = "llama",
    qkv_bias: bool = False,
    name: str = "tiny-llama",
    random_q8_0: bool = False,
) -> Path:
    """Write a tiny llama GGUF to `path` and return the path.

    n_vocab: defaults to the number of tokens; a larger value pads with '<extra_N>'.
    tied: leave out output.weight (the output projection reuses token_embd, as in SmolLM2).
    tokens: your own vocabulary (any strings, hostile ones included).
    types: tensor-name patterns -> ggml type names, consulted before DEFAULT_TYPES.
    arch: general.architecture, and the prefix of the model's keys ("mamba" gives mamba.block_count
        ...): the same llama-shaped tensors under another architecture's name, to test that lessons
        which follow the architecture table refuse one it has no row for.
    qkv_bias: add F32 biases attn_q.bias, attn_k.bias, attn_v.bias to every block (with arch="qwen2":
        a tiny Qwen2, whose table row adds them after the Q, K, V matmuls).
    extra_metadata: key -> value (type inferred: str, bool, int -> INT32 / INT64 when large,
        float -> FLOAT32, list -> ARRAY), or key -> (value, "UINT64") to name the GGUF type.
        Empty strings are written too (GGUFWriter.add_string would skip them); empty arrays
        cannot be (GGUFWriter refuses them).
    name: general.name.
    random_q8_0: write Q8_0 matrices as random blocks made directly (_random_q8_0) rather than
        quantized random floats: the same sizes, twenty times faster, for multi-GB files.
    """
    path = Path(path)
    if n_embd % 32 or n_ff % 32:
        raise ValueError("n_embd and n_ff must be multiples of 32 (the quantization block size)")
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
    rng = np.random.default_rng(seed)
    tokens = list(default_tokens() if tokens is None else tokens)
    n_vocab = len(tokens) if n_vocab is None else n_vocab
    if n_vocab < len(tokens):
        raise ValueError(f"n_vocab {n_vocab} is smaller than the {len(tokens)} tokens given")
    tokens += [f"<extra_{i}>" for i in range(n_vocab - len(tokens))]
    token_types = [TOKEN_TYPE_CONTROL if t in SPECIAL_TOKENS else TOKEN_TYPE_NORMAL for t in tokens]
    all_types = dict(types or {})
    all_types.update((k, v) for k, v in DEFAULT_TYPES.items() if k not in all_types)

    tmp = path.with_name(path.name + ".tmp")
    writer = GGUFWriter(tmp, arch)
    writer.add_name(name)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_block_count(n_layers)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    merges = prefix_merges(tokens)
    if merges:
        writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    for key, value in (extra_metadata or {}).items():
        _add_value(writer, key, value)

    layout = Architecture(
        "tiny",
        d_model=n_embd,
        d_ff=n_ff,
        n_layers=n_layers,
        vocab=n_vocab,
        n_heads=n_head,
        n_kv_heads=n_head_kv,
        head_dim=n_embd // n_head,
        tied=tied,
        qkv_bias=qkv_bias,
    )
    shapes = llama_tensor_shapes(layout)  # numpy order: rows x row length; qkv_bias: the qwen2 row's biases
    if qkv_bias:
        all_types = {"blk.*.bias": "F32", **all_types}
    type_names = {name: _type_for(name, all_types) for name, _ in shapes}
    # Tensor by tensor: the header lists every tensor's shape and type first, then each tensor is
    # made, encoded and written before the next, so memory holds one tensor, not the model.
    for name, shape in shapes:
        type_name = type_names[name]
        if type_name in ("F32", "F16"):
            writer.add_tensor_info(
                name,
                shape,
                np.dtype(np.float32 if type_name == "F32" else np.float16),
                type_bytes(type_name, int(np.prod(shape))),
            )
        else:
            byte_shape = (*shape[:-1], type_bytes(type_name, shape[-1]))
            writer.add_tensor_info(
                name,
                byte_shape,
                np.dtype(np.uint8),
                int(np.prod(byte_shape)),
                raw_dtype=GGMLQuantizationType[type_name],
            )
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for name, shape in shapes:
            type_name = type_names[name]
            if name == "token_embd.weight":
                data = _embeddings(rng, tokens, n_embd)
            elif len(shape) == 1:
                data = 1.0 + 0.1 * rng.standard_normal(shape).astype(np.float32)
            elif random_q8_0 and type_name == "Q8_0":
                writer.write_tensor_data(_random_q8_0(rng, shape))
                continue
            else:
                data = rng.standard_normal(shape).astype(np.float32) / np.sqrt(shape[1])
            writer.write_tensor_data(_encode(data, type_name)[0])
            del data
    finally:
        writer.close()
    os.replace(tmp, path)
    return path


# A tiny Gemma 3: SentencePiece-style vocabulary ('▁' for a space, a score per piece, byte fallback).
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0..3, as in Gemma's vocabulary
GEMMA_WORDS = ["▁the", "▁cat", "▁cats", "▁kitten", "▁dog", "▁sat", "▁on", "▁mat", "▁a", "▁ran", "ing"]
TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_BYTE = 2, 6


def gemma_tokens() -> tuple[list[str], list[float], list[int]]:
    """(pieces, scores, token types): specials, the 256 byte pieces, '▁' and letters, then every
    prefix of every word (longer pieces score higher, so SentencePiece merges build whole words)."""
    pieces = list(GEMMA_SPECIALS) + [f"<0x{b:02X}>" for b in range(256)]
    types = [TOKEN_TYPE_CONTROL, TOKEN_TYPE_CONTROL, TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN] + [TOKEN_TYPE_BYTE] * 256
    for piece in ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [".", ","]:
        pieces.append(piece)
        types.append(TOKEN_TYPE_NORMAL)
    for word in GEMMA_WORDS:
        for k in range(2, len(word) + 1):
            if word[:k] not in pieces:
                pieces.append(word[:k])
                types.append(TOKEN_TYPE_NORMAL)
    scores = [0.0 if t == TOKEN_TYPE_NORMAL else -1000.0 for t in types]
    scores = [float(len(p)) - i / 1000 if t == TOKEN_TYPE_NORMAL else s for i, (p, t, s) in
              enumerate(zip(pieces, types, scores))]  # fmt: skip
    return pieces, scores, types


def write_tiny_gemma3(
    path: str | os.PathLike,
    *,
    n_embd: int = 32,
    n_ff: int = 64,
    n_layers: int = 6,
    n_head: int = 4,
    n_head_kv: int = 1,
    head_dim: int = 16,
    sliding_window: int = 4,
    n_ctx: int = 128,
    rope_base: float = 1e6,
    seed: int = 0,
    extra_metadata: dict[str, Any] | None = None,
    types: dict[str, str] | None = None,
) -> Path:
    """Write a tiny Gemma 3 GGUF (general.architecture gemma3) and return the path.

    Its tensors are the ones bytesup.model.arch's gemma3 row expects (q/k norms, post norms, no
    output.weight); head_dim is gemma3.attention.key_length (here 16, so q is 64 wide for a 32-wide
    model, not 32 / 4); layers 5, 11, ... are global, the others attend to the last
    `sliding_window` positions. Norm weights are stored as 1 + w, as in the real files. The
    tokenizer is SentencePiece-style ('llama', add_bos_token, no space prefix) with byte fallback.
    """
    return write_tiny(path, "gemma3", n_embd=n_embd, n_ff=n_ff, n_layers=n_layers, n_head=n_head,
                      n_head_kv=n_head_kv, head_dim=head_dim, n_ctx=n_ctx, rope_base=rope_base, seed=seed,
                      extra_metadata={"gemma3.attention.sliding_window": sliding_window, **(extra_metadata or {})},
                      types=types)  # fmt: skip


TINY_TYPES: dict[str, str] = {
    "token_embd.weight": "Q8_0",
    "output.weight": "F16",
    "blk.*.attn_q.weight": "Q5_0",
    "blk.*.attn_k.weight": "Q5_0",
    "blk.*.attn_v.weight": "Q8_0",
    "blk.*.attn_qkv.weight": "Q5_1",
    "blk.*.attn_output.weight": "Q4_1",
    "blk.*.ffn_gate.weight": "Q5_0",
    "blk.*.ffn_up.weight": "Q5_0",
    "blk.*.ffn_down.weight": "Q8_0",
    "*": "F32",  # norms, q/k norms, post norms, rope factors
}


def write_tiny(
    path: str | os.PathLike,
    arch: str,
    *,
    n_embd: int = 32,
    n_ff: int = 64,
    n_layers: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int | None = None,
    n_rot: int | None = None,
    n_ctx: int = 128,
    rope_base: float = 10000.0,
    seed: int = 0,
    tied: bool | None = None,
    fused_qkv: bool | None = None,
    rope_tensors: dict[str, np.ndarray] | None = None,
    extra_metadata: dict[str, Any] | None = None,
    types: dict[str, str] | None = None,
    name: str | None = None,
) -> Path:
    """Write a tiny GGUF of any row of the architecture table and return the path: exactly the
    tensors bytesup.model.arch's row predicts (spec.tensor_shapes), made from `seed`.

    head_dim: written as {arch}.attention.key_length / value_length (None: d_model / n_head, no key);
    n_rot: written as {arch}.rope.dimension_count (None: no key, every dimension rotates);
    tied: leave out output.weight (None: as the row ties by default); fused_qkv: Q K V as one
    attn_qkv (None: the row's default; phi3 fuses); rope_tensors: name -> n_rot/2 factors, e.g.
    {"rope_freqs.weight": [1, 1, 8, 8]} (Llama 3.1's rope scaling). The vocabulary is Gemma's
    SentencePiece one for gemma rows, else the GPT-2 style one of write_tiny_llama. Norm weights
    are 1 + 0.1 noise (as Gemma files store 1 + w); extra_metadata may override any key; name:
    general.name. Q K V are drawn one after the other whether stacked or not, so a fused and a
    separate file of one seed (and one type for attn_q, _k, _v and _qkv) hold the same weights.
    """
    path = Path(path)
    hd = head_dim or n_embd // n_head
    if n_embd % 32 or n_ff % 32 or (n_head * hd) % 32:
        raise ValueError("n_embd, n_ff and n_head * head_dim must be multiples of 32 (the quantization block size)")
    if n_head % n_head_kv:
        raise ValueError("n_head must divide by n_head_kv")
    rng = np.random.default_rng(seed)
    gemma = arch.startswith("gemma")
    if gemma:
        tokens, scores, token_types = gemma_tokens()
    else:
        tokens, scores = default_tokens(), None
        token_types = [TOKEN_TYPE_CONTROL if t in SPECIAL_TOKENS else TOKEN_TYPE_NORMAL for t in tokens]
    all_types = dict(types or {})
    all_types.update((k, v) for k, v in TINY_TYPES.items() if k not in all_types)
    u32, f32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
    model_keys: dict[str, tuple[Any, GGUFValueType]] = {
        "context_length": (n_ctx, u32), "embedding_length": (n_embd, u32), "block_count": (n_layers, u32),
        "feed_forward_length": (n_ff, u32), "attention.head_count": (n_head, u32),
        "attention.head_count_kv": (n_head_kv, u32), "attention.layer_norm_rms_epsilon": (1e-6, f32),
        "rope.freq_base": (float(rope_base), f32),
    }  # fmt: skip
    if head_dim is not None:
        model_keys.update({"attention.key_length": (head_dim, u32), "attention.value_length": (head_dim, u32)})
    if n_rot is not None:
        model_keys["rope.dimension_count"] = (n_rot, u32)
    model_keys = {f"{arch}.{k}": v for k, v in model_keys.items()}
    extra = dict(extra_metadata or {})
    model_keys = {k: v for k, v in model_keys.items() if k not in extra}
    meta = {"general.architecture": arch, **{k: v for k, (v, _) in model_keys.items()}, **extra,
            "tokenizer.ggml.tokens": tokens}  # fmt: skip
    spec = spec_from_metadata(meta)
    rope_tensors = {name: np.asarray(v, np.float32) for name, v in (rope_tensors or {}).items()}
    spec = dataclasses.replace(
        spec,
        tied=spec.tied if tied is None else tied,
        fused_qkv=spec.fused_qkv if fused_qkv is None else fused_qkv,
        rope_tensors=tuple(rope_tensors),
    )

    tmp = path.with_name(path.name + ".tmp")
    writer = GGUFWriter(tmp, arch)
    writer.add_name(name or f"tiny-{arch}")
    for key, (value, vtype) in model_keys.items():
        writer.add_key_value(key, value, vtype)
    for key, value in extra.items():
        _add_value(writer, key, value)
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    if gemma:
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_scores(scores)
        for add, value in ((writer.add_bos_token_id, 2), (writer.add_eos_token_id, 1), (writer.add_unk_token_id, 3),
                           (writer.add_pad_token_id, 0), (writer.add_add_bos_token, True),
                           (writer.add_add_eos_token, False), (writer.add_add_space_prefix, False)):  # fmt: skip
            add(value)
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_merges(prefix_merges(tokens))
        for add, value in ((writer.add_bos_token_id, 1), (writer.add_eos_token_id, 2), (writer.add_unk_token_id, 0),
                           (writer.add_pad_token_id, 0)):  # fmt: skip
            add(value)
    for tensor, shape in spec.tensor_shapes():  # numpy order: rows x row length
        if tensor in rope_tensors:
            data = rope_tensors[tensor].reshape(shape)
        elif tensor == spec.tensor_name("token_embd"):
            data = rng.standard_normal(shape).astype(np.float32) * 0.5 if gemma else _embeddings(rng, tokens, n_embd)
        elif len(shape) == 1:
            data = 1.0 + 0.1 * rng.standard_normal(shape).astype(np.float32)  # 1 + w, as Gemma stores them
        else:
            data = rng.standard_normal(shape).astype(np.float32) / np.sqrt(shape[1])
        encoded, raw_dtype = _encode(data, _type_for(tensor, all_types))
        writer.add_tensor(tensor, encoded, raw_dtype=raw_dtype)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    os.replace(tmp, path)
    return path


def _random_q8_0(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 bytes of a random matrix made directly: each block of 32 weights is one float16 scale d
    and 32 int8 quants q (weight = d * q), with q uniform in -127..127 and d chosen so the weights'
    spread is 1/sqrt(row length), as the float path gives. About twenty times faster than drawing
    floats and quantizing them, which is what a multi-GB test file needs."""
    rows, row_len = shape
    blocks = row_len // 32
    d = np.float16(np.sqrt(3.0 / row_len) / 127)  # uniform on [-a, a] has spread a / sqrt(3)
    out = np.empty((rows, blocks, 34), dtype=np.uint8)
    out[:, :, :2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
    out[:, :, 2:] = rng.integers(-127, 128, size=(rows, blocks, 32), dtype=np.int8).view(np.uint8)
    return out.reshape(rows, blocks * 34)


def write_shaped(
    path: str | os.PathLike, arch: Architecture, *, type_name: str = "Q8_0", seed: int = 0, name: str | None = None
) -> Path:
    """A llama GGUF with exactly `arch`'s shapes (configs.DEEPSEEK_CODER_6_7B gives the course's
    specimen: 7.16 GB as Q8_0), every matrix as `type_name` and every norm F32, as the published
    Q8_0 files store them. Written tensor by tensor: memory holds one tensor (the embedding table
    at most), never the file. The weights are random, so only sizes and shapes mean anything."""
    if arch.head_dim * arch.n_heads != arch.d_model:
        raise ValueError(f"{arch.name}: write_shaped needs head_dim x n_heads == d_model")
    return write_tiny_llama(
        path,
        n_vocab=arch.vocab,
        n_embd=arch.d_model,
        n_ff=arch.d_ff,
        n_layers=arch.n_layers,
        n_head=arch.n_heads,
        n_head_kv=arch.n_kv_heads,
        n_ctx=arch.context_length or 4096,
        seed=seed,
        tied=arch.tied,
        types={"*norm.weight": "F32", "*": type_name},
        random_q8_0=True,
        name=name or arch.name,
    )


def write_split(source: str | os.PathLike, dest: str | os.PathLike, parts: int, *, first_empty: bool = False
                ) -> list[Path]:  # fmt: skip
    """Split the GGUF `source` into `parts` files as llama.cpp's gguf-split does, with gguf-py's writer:
    `dest` 'm.gguf' gives m-00001-of-00003.gguf ... (returned in order), the metadata in the first part
    only, split.no / split.count / split.tensors.count in each, the tensors in file order, about the
    same number in each part. first_empty: no tensor in the first part (gguf-split
    --no-tensor-first-split), the tensors spread over the others."""
    reader = GGUFReader(source)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tensors = list(reader.tensors)
    holding = parts - 1 if first_empty else parts
    writer = GGUFWriter(dest, reader.fields["general.architecture"].contents(),
                        split_max_tensors=-(-len(tensors) // holding), small_first_shard=first_empty)  # fmt: skip
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue  # the writer adds the architecture; GGUF.* are the header's counts
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub_type)
    for t in tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    paths = writer.format_shard_names(dest)
    if len(paths) != parts:
        raise ValueError(f"{source}: {len(tensors)} tensors do not split into {parts} parts")
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in tensors:
            writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    finally:
        writer.close()
    return paths


def _add_value(writer: GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        value, type_name = value
        vtype = GGUFValueType[type_name]
    elif isinstance(value, bool):
        vtype = GGUFValueType.BOOL
    elif isinstance(value, int):
        vtype = GGUFValueType.INT32 if -(2**31) <= value < 2**31 else GGUFValueType.INT64
    elif isinstance(value, float):
        vtype = GGUFValueType.FLOAT32
    elif isinstance(value, str):
        vtype = GGUFValueType.STRING
    elif isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"metadata {key!r}: GGUFWriter cannot write an empty array")
        vtype = GGUFValueType.ARRAY
        value = list(value)
    else:
        raise TypeError(f"cannot write metadata {key!r} of type {type(value).__name__}")
    writer.add_key_value(key, value, vtype)


# -- raw bytes, for malformed files -----------------------------------------------------

_SCALAR_FORMATS = {
    "UINT8": (0, "<B"), "INT8": (1, "<b"), "UINT16": (2, "<H"), "INT16": (3, "<h"),
    "UINT32": (4, "<I"), "INT32": (5, "<i"), "FLOAT32": (6, "<f"), "BOOL": (7, "<B"),
    "UINT64": (10, "<Q"), "INT64": (11, "<q"), "FLOAT64": (12, "<d"),
}  # fmt: skip
_TYPE_IDS = {**{k: v[0] for k, v in _SCALAR_FORMATS.items()}, "STRING": 8, "ARRAY": 9}


def gguf_string(text: str | bytes) -> bytes:
    """A GGUF string: uint64 byte length, then the bytes."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def gguf_value(type_name: str, value: Any) -> bytes:
    """The encoding of one value (without its type id). ARRAY values are (element type, items)."""
    if type_name == "STRING":
        return gguf_string(value)
    if type_name == "ARRAY":
        etype, items = value
        return struct.pack("<IQ", _TYPE_IDS[etype], len(items)) + b"".join(gguf_value(etype, v) for v in items)
    return struct.pack(_SCALAR_FORMATS[type_name][1], value)


def raw_gguf(
    metadata: list[tuple[str, str, Any]] = (),
    tensors: list[tuple[str, tuple[int, ...], int, int]] = (),
    data: bytes = b"",
    *,
    version: int = 3,
    n_tensors: int | None = None,
    n_kv: int | None = None,
    alignment: int = 32,
) -> bytes:
    """GGUF bytes written field by field, with no checks, so tests can build broken files.

    metadata: (key, type name, value); tensors: (name, GGUF dims innermost first, ggml type
    id, offset into the data section). The data section starts at the next multiple of
    `alignment` after the tensor infos, and `data` goes there. n_tensors / n_kv override
    the counts in the header.
    """
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                       len(metadata) if n_kv is None else n_kv)  # fmt: skip
    for key, type_name, value in metadata:
        out += gguf_string(key) + struct.pack("<I", _TYPE_IDS[type_name]) + gguf_value(type_name, value)
    for name, dims, ggml_type, offset in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
    if tensors or data:
        out += bytes(-len(out) % alignment)
    return bytes(out + data)

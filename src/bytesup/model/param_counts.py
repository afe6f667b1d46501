"""Where a transformer's parameters live: counted from a configuration, or from a GGUF's tensor table.

A decoder-only transformer is a stack of identical blocks between an embedding table and an
output head. Every count below follows from a handful of numbers in the model's configuration:

    per block   attention  q: d x (heads * head_dim)      k, v: d x (kv_heads * head_dim) each
                           o: (heads * head_dim) x d
                FFN        gate (SwiGLU only), up: d x d_ff each;   down: d_ff x d
                norms      two per block, each a gain vector of d (LayerNorm adds a bias of d);
                           Gemma 3 adds two post-norms of d and per-head q/k norms of head_dim
    once        token embedding table  vocab x d          output head: vocab x d, unless tied
                final norm             learned positions (GPT-2): n_positions x d

Biases, where a model has them (GPT-2), add one number per output of every matrix; Qwen 2 has
them on q, k and v only.

A GGUF's own tensor table is counted tensor by tensor (``table_counts``): every tensor the file
holds, including any this accounting has no part for ("other"), so its total is always the sum of
every tensor's elements.

The published configurations the course's texts quote live in bytesup.model.configs; the counts
are checked against the totals the texts print (Llama-3-8B: 8,030,261,248) in the tests.

Bytes streamed per generated token (batch 1): every matrix is read once, except a lookup table
(token embedding, learned positions), of which one row is read. A tied model uses its embedding
table again as the output head, and that pass reads all of it.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from bytesup.gguf.sizes import parse_shape, shape_text, type_bytes
from bytesup.model.configs import Architecture

BF16_BYTES = type_bytes("BF16", 1)  # what the texts price a weight at (gguf-py's block table)


BLOCK_PARTS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "norms")
ATTENTION = ("attn_q", "attn_k", "attn_v", "attn_output")
FFN = ("ffn_gate", "ffn_up", "ffn_down")


def block_counts(a: Architecture) -> dict[str, int]:
    """Parameters of one block, by part (a matrix's bias is counted with its matrix)."""
    q, kv = a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim
    b = 1 if a.biases else 0
    bqkv = 1 if a.biases or a.qkv_bias else 0
    norms = 2 * a.norm_vectors * a.d_model
    norms += 2 * a.head_dim if a.qk_norm else 0  # attn_q_norm, attn_k_norm: one gain per head dimension
    norms += 2 * a.d_model if a.post_norms else 0  # post_attention_norm, post_ffw_norm
    return {
        "attn_q": a.d_model * q + bqkv * q,
        "attn_k": a.d_model * kv + bqkv * kv,
        "attn_v": a.d_model * kv + bqkv * kv,
        "attn_output": q * a.d_model + b * a.d_model,
        "ffn_gate": (a.d_model * a.d_ff + b * a.d_ff) if a.gated_ffn else 0,
        "ffn_up": a.d_model * a.d_ff + b * a.d_ff,
        "ffn_down": a.d_ff * a.d_model + b * a.d_model,
        "norms": norms,
    }


def count(a: Architecture) -> dict:
    """Every count the lessons quote, for one architecture (plain ints and fractions)."""
    blk = block_counts(a)
    attention = sum(blk[p] for p in ATTENTION)
    ffn = sum(blk[p] for p in FFN)
    block = sum(blk.values())
    embd = a.vocab * a.d_model
    head = 0 if a.tied else a.vocab * a.d_model
    positions = a.n_positions * a.d_model
    final_norm = a.norm_vectors * a.d_model
    total = a.n_layers * block + embd + head + positions + final_norm
    ffn_all = a.n_layers * ffn
    # Read per generated token: everything but the lookup tables; a tied table is read as the head.
    streamed = total - positions - (0 if a.tied else embd)
    weights_per_slot = (3 if a.gated_ffn else 2) * a.d_model  # gate row + up row + down column
    out = {f"block_{p}": n for p, n in blk.items()}
    out.update(
        block_attention=attention,
        block_ffn=ffn,
        block_total=block,
        block_ffn_share=ffn / block,
        block_attention_share=attention / block,
        layers=a.n_layers,
        blocks_total=a.n_layers * block,
        token_embd=embd,
        lm_head=head,
        positions=positions,
        output_norm=final_norm,
        total=total,
        ffn_total=ffn_all,
        ffn_share=ffn_all / total,
        attention_total=a.n_layers * attention,
        embeddings_and_head=embd + head,
        embeddings_and_head_share=(embd + head) / total,
        token_embd_share=embd / total,
        slots_per_layer=a.d_ff,
        slots=a.n_layers * a.d_ff,
        weights_per_slot=weights_per_slot,
        bytes_per_slot_bf16=weights_per_slot * BF16_BYTES,
        kib_per_slot_bf16=weights_per_slot * BF16_BYTES / 1024,
        streamed_params=streamed,
        streamed_gb_bf16=streamed * BF16_BYTES / 1e9,
        ffn_gb_bf16=ffn_all * BF16_BYTES / 1e9,
        ffn_share_of_streamed=ffn_all / streamed,
        ffn_widening=a.d_ff / a.d_model,
    )
    return out


def counts_table(archs: Iterable[Architecture]) -> list[dict]:
    """One row per count, one column per model: the accounting side by side."""
    archs = list(archs)
    counted = [count(a) for a in archs]
    return [{"quantity": key, **{a.name: c[key] for a, c in zip(archs, counted)}} for key in counted[0]]


# --- the same accounting from a GGUF file ------------------------------------------------------

NORMS = ("attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm")
STACKED = ("attn_qkv",)  # Q, K and V in one tensor (Phi-3): a part of its own in a file's table
_PART = re.compile(r"^blk\.(\d+)\.(" + "|".join(ATTENTION + STACKED + FFN + NORMS) + r")\.(weight|bias)$")


def read_tensor_table(path: str | Path) -> list[dict]:
    """tensors.csv of the extract stage: name, type, shape, offset, bytes, elements (ints converted)."""
    with Path(path).open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for key in ("offset", "bytes", "elements"):
            r[key] = int(r[key])
    return rows


def role(name: str) -> str:
    """Which part of the model a GGUF tensor belongs to: attn_q ... ffn_down, norms, token_embd, ..."""
    m = _PART.match(name)
    if m:
        part = m.group(2)
        return "norms" if part in NORMS else part
    if name.startswith("token_embd."):
        return "token_embd"
    if name.startswith("output_norm."):
        return "output_norm"
    if name.startswith("output."):
        return "lm_head"
    if name.startswith("position_embd."):
        return "positions"
    return "other"  # e.g. rope_freqs: listed, counted in the total, never guessed into a part


def tensor_rows(tensors: Iterable) -> list[dict]:
    """A GGUF's tensor infos (bytesup.gguf.file.TensorInfo) as the rows counted here: the columns of
    the extract stage's tensors.csv (name, type, shape, bytes, elements), in file order."""
    return [{"name": t.name, "type": t.type_name, "shape": shape_text(t.shape), "bytes": t.n_bytes,
             "elements": t.n_elements} for t in tensors]  # fmt: skip


def table_counts(rows: Iterable[Mapping]) -> dict:
    """Parameters and bytes per part, summed over a GGUF's tensor table, every tensor counted (the
    ones no part fits under "other"); the number of blocks; the total; and tensors, parameters and
    bytes per ggml type ("by_type", in order of first appearance; rows without a type are left out)."""
    params: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    types: dict[str, dict[str, int]] = {}
    blocks: set[int] = set()
    for r in rows:
        part = role(r["name"])
        m = _PART.match(r["name"])
        if m:
            blocks.add(int(m.group(1)))
        params[part] = params.get(part, 0) + int(r["elements"])
        nbytes[part] = nbytes.get(part, 0) + int(r["bytes"])
        if r.get("type"):
            g = types.setdefault(r["type"], {"tensors": 0, "parameters": 0, "bytes": 0})
            g["tensors"] += 1
            g["parameters"] += int(r["elements"])
            g["bytes"] += int(r["bytes"])
    return {"params": params, "bytes": nbytes, "n_blocks": len(blocks), "total": sum(params.values()),
            "by_type": types}  # fmt: skip


def architecture_from_gguf(
    d: Mapping, tensor_names: Iterable[str], vocab: int, name: str = "this model"
) -> Architecture:
    """An Architecture from the dims a lesson read from metadata, tied when output.weight is absent."""
    names = set(tensor_names)
    return Architecture(
        name,
        d_model=int(d["embedding_length"]),
        d_ff=int(d["feed_forward_length"]),
        n_layers=int(d["block_count"]),
        vocab=int(vocab),
        n_heads=int(d["head_count"]),
        n_kv_heads=int(d["head_count_kv"]),
        head_dim=int(d["head_dim"]),
        gated_ffn=any(n.endswith("ffn_gate.weight") for n in names),
        # a bias after every matrix (GPT-2), or on q, k and v only (Qwen 2)
        biases=any(n.startswith("blk.") and n.endswith((".attn_output.bias", ".ffn_up.bias")) for n in names),
        qkv_bias=any(n.startswith("blk.") and n.endswith(".attn_q.bias") for n in names),
        qk_norm=any(n.endswith(".attn_q_norm.weight") for n in names),
        post_norms=any(n.endswith(".post_ffw_norm.weight") for n in names),
        tied="output.weight" not in names,
        source="GGUF metadata",
    )


# --- what one generated token reads -------------------------------------------------------------

LOOKUP_TABLES = ("token_embd", "positions")  # param_counts.role() names of tables read one row at a time


def per_token_reads(rows: Iterable[Mapping]) -> list[dict]:
    """One line per read a generated token makes: every tensor once, one row of a lookup table.

    A model without output.weight (tied embeddings) multiplies by token_embd as its head; that
    pass reads the whole table and gets its own line, 'token_embd.weight (tied output head)'.
    """
    rows = list(rows)
    names = {r["name"] for r in rows}
    tied = "token_embd.weight" in names and "output.weight" not in names
    reads = []
    for r in rows:
        shape, part = parse_shape(r["shape"]), role(r["name"])
        nbytes, elements = int(r["bytes"]), int(r["elements"])
        line = {
            "name": r["name"],
            "part": part,
            "type": r["type"],
            "shape": shape_text(shape),
            "elements_in_file": elements,
            "bytes_in_file": nbytes,
        }
        if part in LOOKUP_TABLES and len(shape) == 2:
            if nbytes % shape[0]:
                raise ValueError(f"tensors.csv: {r['name']} has {nbytes} bytes, not a whole number of rows")
            reads.append(
                {
                    **line,
                    "read": "one row (the token's lookup)",
                    "elements_read": shape[1],
                    "bytes_read": nbytes // shape[0],
                    "matrix": False,
                }
            )
            if part == "token_embd" and tied:
                reads.append(
                    {
                        **line,
                        "name": f"{r['name']} (tied output head)",
                        "part": "lm_head",
                        "read": "whole table (tied output head)",
                        "elements_read": elements,
                        "bytes_read": nbytes,
                        "matrix": True,
                        "second_pass": True,
                    }
                )
        else:
            reads.append(
                {
                    **line,
                    "read": "whole tensor",
                    "elements_read": elements,
                    "bytes_read": nbytes,
                    "matrix": len(shape) == 2,
                }
            )
    return reads

"""Lesson 3b's step 4: where the parameters are, in this model and in two published configurations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.lessons import LessonInputError
from bytesup.lessons.ffn_walk import dims
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.model.tokens import tokenizer_of

# --- 4. where the parameters are -----------------------------------------------------------------


def _check_block_zero(arch: configs.Architecture, tensor_rows: Sequence[Mapping]) -> None:
    """Refuse, in one line, a file whose block 0 holds other tensor sizes than its metadata gives."""
    held: dict[str, int] = {}
    for r in tensor_rows:
        if r["name"].startswith("blk.0."):
            held[pc.role(r["name"])] = held.get(pc.role(r["name"]), 0) + int(r["elements"])
    wrong = [f"{part} holds {held.get(part, 0):,} weights, the metadata's sizes give {n:,}"
             for part, n in pc.block_counts(arch).items() if held.get(part, 0) != n]  # fmt: skip
    if wrong:
        raise LessonInputError(f"tensors.csv: block 0 does not match the metadata: {'; '.join(wrong[:3])}; the"
                               " file's metadata or its tensors are wrong")  # fmt: skip


def model_accounting(
    metadata: Mapping, tensor_rows: Sequence[Mapping], name: str = "this model"
) -> tuple[configs.Architecture, dict]:
    """This model's counts from its metadata, checked against the tensor table, plus its file bytes."""
    d = dims(metadata)
    vocab = metadata.get(f"{d['architecture']}.vocab_size") or len(tokenizer_of(metadata)[0])
    arch = pc.architecture_from_gguf(d, (r["name"] for r in tensor_rows), vocab, name)
    _check_block_zero(arch, tensor_rows)
    c = pc.count(arch)
    table = pc.table_counts(tensor_rows)
    p, b = table["params"], table["bytes"]
    total_table = sum(p.values())
    expect = {part: c[f"block_{part}"] * arch.n_layers for part in pc.BLOCK_PARTS if c[f"block_{part}"]}
    expect.update(token_embd=c["token_embd"], output_norm=c["output_norm"])
    if c["lm_head"]:
        expect["lm_head"] = c["lm_head"]
    mismatches = {k: (v, p.get(k, 0)) for k, v in expect.items() if p.get(k, 0) != v}
    ffn_bytes = sum(b.get(part, 0) for part in pc.FFN)
    all_bytes = sum(b.values())
    # per token the whole file is read except the lookup table, which a tied model reads as its head
    streamed_bytes = all_bytes - (0 if arch.tied else b.get("token_embd", 0))
    out = dict(c)
    out.update(
        total_from_table=total_table,
        table_blocks=table["n_blocks"],
        counts_match_table=not mismatches and total_table == c["total"],
        count_mismatches={k: list(v) for k, v in mismatches.items()},
        ffn_bytes_in_file=ffn_bytes,
        file_tensor_bytes=all_bytes,
        streamed_bytes_in_file=streamed_bytes,
        ffn_share_of_streamed_file_bytes=ffn_bytes / streamed_bytes,
        bytes_per_slot_in_file=ffn_bytes / c["slots"],
        tied=arch.tied,
    )
    return arch, out


def parameter_table(archs: Sequence[configs.Architecture], counted: Sequence[Mapping]) -> list[dict]:
    keys = list(pc.count(archs[0]).keys())
    return [{"quantity": k, **{a.name: c[k] for a, c in zip(archs, counted)}} for k in keys]


# --- the whole lesson ---------------------------------------------------------------------------


def published_metrics() -> dict:
    """Llama-3-8B and GPT-2 small from their published configurations, prefixed."""
    out = {}
    for prefix, a in (("llama3_8b", configs.LLAMA3_8B), ("gpt2_small", configs.GPT2_SMALL)):
        c = pc.count(a)
        out.update({f"{prefix}_{k}": v for k, v in c.items()})
        out.update(
            {
                f"{prefix}_d_model": a.d_model,
                f"{prefix}_d_ff": a.d_ff,
                f"{prefix}_vocab": a.vocab,
                f"{prefix}_kv_heads": a.n_kv_heads,
                f"{prefix}_head_dim": a.head_dim,
                f"{prefix}_block_ffn_gate_share": c["block_ffn_gate"] / c["block_total"],
            }
        )
    return out

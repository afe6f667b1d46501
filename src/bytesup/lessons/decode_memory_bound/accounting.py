"""The capstone's step 1: what a tensor costs, and the bytes one generated token reads, by tensor group."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bytesup.errors import BytesupError
from bytesup.gguf.sizes import parse_shape, type_bytes
from bytesup.lessons import LessonInputError
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.model.configs import DEEPSEEK_CODER_6_7B, kv_bytes_per_token, llama_tensor_shapes


@dataclass(frozen=True)
class Layout:
    """A model laid out as a file: its configuration and the storage type of its tensors."""

    key: str  # prefix of this model's keys in metrics.json
    label: str  # for tables and figures
    arch: configs.Architecture
    matrices: str  # ggml type of every 2-D tensor
    vectors: str  # ggml type of the norm vectors


SPECIMEN = Layout("deepseek_q8_0", "deepseek-coder-6.7b Q8_0", DEEPSEEK_CODER_6_7B, "Q8_0", "F32")
# The published checkpoint stores every tensor, norms included, as bfloat16.
LLAMA3_8B_BF16 = Layout("llama3_8b_bf16", "Llama-3-8B bf16", configs.LLAMA3_8B, "BF16", "BF16")
PUBLISHED_LAYOUTS = (SPECIMEN, LLAMA3_8B_BF16)

GB = 1e9  # decimal, as the course and STREAM count


# --- 1. what a tensor costs, and what a token reads ----------------------------------------------


def config_tensor_table(layout: Layout) -> list[dict]:
    """The tensor table (GGUF names, numpy-order shapes) a llama-style model would have in a file.

    Rows have the columns of the extract stage's tensors.csv that the accounting reads: name,
    type, shape (tuple), bytes, elements.
    """
    try:
        shapes = llama_tensor_shapes(layout.arch)
    except ValueError as err:
        raise LessonInputError(str(err)) from None
    rows = []
    for name, shape in shapes:
        kind = layout.matrices if len(shape) == 2 else layout.vectors
        n = math.prod(shape)
        rows.append({"name": name, "type": kind, "shape": shape, "bytes": type_bytes(kind, n), "elements": n})
    return rows


# How the parts are grouped in tables and the figure.
GROUPS = {
    "FFN (gate, up, down)": pc.FFN,
    "attention (q, k, v, o)": pc.ATTENTION,
    "output head": ("lm_head",),
    "embedding lookup (one row)": pc.LOOKUP_TABLES,
    "norms and other": ("norms", "output_norm", "other"),
}


def summarize_reads(reads: Sequence[Mapping]) -> dict:
    """Totals of one model's reads: bytes per token, shares by group, FLOPs and intensity of decode.

    FLOPs count the matvecs only: each weight of a matrix read does one multiply and one add.
    """
    total = sum(r["bytes_read"] for r in reads)
    file_bytes = sum(r["bytes_in_file"] for r in reads if not r.get("second_pass"))  # each tensor once
    group_bytes = {g: sum(r["bytes_read"] for r in reads if r["part"] in parts) for g, parts in GROUPS.items()}
    matrix_weights = sum(r["elements_read"] for r in reads if r["matrix"])
    flops = 2 * matrix_weights
    ffn_weights = sum(r["elements_read"] for r in reads if r["part"] in pc.FFN)
    return {
        "bytes_per_token": total,
        "bytes_per_token_gb": total / GB,
        "file_tensor_bytes": file_bytes,
        "file_tensor_gb": file_bytes / GB,
        "read_share_of_file": total / file_bytes if file_bytes else None,
        "weights_read": sum(r["elements_read"] for r in reads),
        "ffn_weights": ffn_weights,
        "ffn_bytes_per_token": group_bytes["FFN (gate, up, down)"],
        "ffn_bytes_per_token_gb": group_bytes["FFN (gate, up, down)"] / GB,
        "ffn_share_of_bytes": group_bytes["FFN (gate, up, down)"] / total if total else None,
        "attention_share_of_bytes": group_bytes["attention (q, k, v, o)"] / total if total else None,
        "head_share_of_bytes": group_bytes["output head"] / total if total else None,
        "decode_flops_per_token": flops,
        "decode_intensity": flops / total if total else None,  # FLOPs per byte at batch 1
        "bytes_by_group": group_bytes,
    }


def kv_cache_bytes_per_context_token(a: configs.Architecture, cache_type: str = "F16") -> int:
    """Bytes of K and V one token of context adds to the cache (configs.kv_bytes_per_token).

    Decode reads the whole cache for every new token, so at context length T add T times this to
    the weights' bytes. Not part of `bytes_per_token`, which counts weights only.
    """
    return kv_bytes_per_token(a, cache_type)


def model_architecture(d: Mapping, tensor_rows: Sequence[Mapping], name: str = "this model") -> configs.Architecture:
    """This run's model as a configuration: its sizes from the metadata (ffn_walk.dims), its vocabulary
    from the embedding table's rows, tied when the file has no output.weight."""
    embd = next((r for r in tensor_rows if r["name"] == "token_embd.weight"), None)
    if embd is None:
        raise LessonInputError("tensors.csv: no token_embd.weight row; re-run the extract stage")
    vocab = parse_shape(embd["shape"])[0]
    return pc.architecture_from_gguf(d, (r["name"] for r in tensor_rows), vocab, name)


def model_kv_layers(metadata: Mapping) -> configs.KVLayers:
    """This run's model's KV cache layer by layer (configs.file_kv_layers: a sliding-window layer keeps
    only its window), with the lesson's one-line error."""
    try:
        return configs.file_kv_layers(metadata)
    except (BytesupError, ValueError) as err:
        raise LessonInputError(f"metadata.json: {err}") from None


@dataclass
class Accounting:
    key: str
    label: str
    source: str
    reads: list[dict]
    summary: dict


def account(key: str, label: str, source: str, tensor_rows: Iterable[Mapping]) -> Accounting:
    reads = pc.per_token_reads(tensor_rows)
    if not reads:
        raise LessonInputError(f"{source}: no tensors listed; re-run the extract stage")
    return Accounting(key, label, source, reads, summarize_reads(reads))


def account_layout(layout: Layout) -> Accounting:
    source = f"{layout.arch.source}, matrices {layout.matrices}, norms {layout.vectors}"
    return account(layout.key, layout.label, source, config_tensor_table(layout))


def group_table(accounts: Sequence[Accounting]) -> list[dict]:
    """bytes_per_token.csv: one row per model and group of tensors."""
    rows = []
    for acc in accounts:
        total = acc.summary["bytes_per_token"]
        for group, parts in GROUPS.items():
            mine = [r for r in acc.reads if r["part"] in parts]
            rows.append(
                {
                    "model": acc.label,
                    "group": group,
                    "tensors": len(mine),
                    "weights_read": sum(r["elements_read"] for r in mine),
                    "bytes_read": sum(r["bytes_read"] for r in mine),
                    "share_of_bytes": sum(r["bytes_read"] for r in mine) / total if total else None,
                }
            )
        rows.append(
            {
                "model": acc.label,
                "group": "total",
                "tensors": len(acc.reads),
                "weights_read": acc.summary["weights_read"],
                "bytes_read": total,
                "share_of_bytes": 1.0,
            }
        )
    return rows


READS_COLUMNS = ("name", "part", "type", "shape", "read", "elements_read", "bytes_read", "bytes_in_file")

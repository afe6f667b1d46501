"""Lesson 1, "What a model is on disk": one GGUF file, accounted for to its last byte.

What is computed, in the lesson's order:
  1. the header, read by hand from the first 24 bytes (magic, version, two counts);
  2. the metadata table: every key, its type, its value in short, and how many bytes its record
     takes; the first record is also read by hand;
  3. the tensor table: every tensor's name, type, shape, offset and size; the first tensor-info
     record is read by hand;
  4. the byte accounting: header + metadata + tensor infos + padding + tensor data = file size;
  5. parameters and bytes by quantization type, every tensor counted (bytesup.model.param_counts), and
     the layout the architecture table predicts from the metadata alone (bytesup.model.arch):
     every tensor name and shape, with any tensor missing, extra or of another shape listed in
     layout_check.csv (an architecture the table lacks is said so there, and the file's own
     tensors are counted);
  6. one block of every ggml type the file holds decoded by hand (bytesup.gguf.quants: F32,
     Q8_0, Q4_1, Q5_0, a K-quant super-block field by field, ...), from raw bytes to float32
     weights, and compared bit for bit with gguf-py (llama.cpp's own Python reader) and with
     bytesup.gguf.dequant.

The file is read through bytesup.gguf.file.GGUFFile, which memory-maps it: only the header,
the tables and one block per type are ever touched, so this runs in well under a second on the
default model and in a few seconds on a 7 GB one.

The lesson's parts, by concern: file_tables (steps 1 to 5), one_block (6); this module holds the
SPEC, the course's arithmetic about its own file, ``run`` and the figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from bytesup.gguf.file import GGUFFile
from bytesup.gguf.sizes import type_bytes
from bytesup.lessons import claims as claims_mod
from bytesup.lessons import figure, legend_below
from bytesup.lessons.gguf_on_disk.file_tables import (
    ACCOUNT_PARTS,
    accounting_rows,
    block_structure,
    by_type,
    first_metadata_record,
    first_tensor_info,
    layout_check,
    metadata_table,
    predicted_layout,
    read_header,
    read_prefix,
    tensor_info_bytes,
    tensor_table,
)
from bytesup.lessons.gguf_on_disk.one_block import block_report, block_rows, chosen_blocks, field_rows
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model import param_counts as pc
from bytesup.model.arch import ARCHITECTURES
from bytesup.model.configs import DEEPSEEK_CODER_6_7B, llama_tensor_shapes
from bytesup.model.tokens import TokenError, lookup

SPEC = LessonSpec(
    id="01_gguf_on_disk",
    title="What a model is on disk",
    kind=SERIES,
    position=1,
    source=(
        "Lesson 1 of the LLM Basics series (its text is not among the course files here; the numbers "
        "come from what the lesson 3 text and the FFN-stores text say about the file)"
    ),
    reads=("model_gguf",),
    tables=(
        "metadata_table.csv",
        "tensor_table.csv",
        "byte_accounting.csv",
        "bytes_by_type.csv",
        "layout_check.csv",
        "block_types.csv",
        "block_fields.csv",
        "blocks.csv",
    ),
    key_tables=("byte_accounting.csv",),
    figures={
        "bytes_by_type.png": "Share of the file's parameters and of its tensor bytes per ggml type",
    },
    headlines=(
        Headline("file_size", "file size in bytes"),  # every byte is accounted for: the exact count
        Headline("tensor_count", "tensors"),
        Headline("metadata_count", "metadata keys"),
        Headline("bytes_metadata", "metadata bytes"),
        Headline("bytes_tensor_infos", "tensor-info bytes"),
        Headline("bytes_padding", "padding bytes"),
        Headline("bytes_tensor_data", "tensor data bytes"),
        Headline("bytes_unaccounted", "bytes unaccounted"),
        Headline("parameters", "parameters (every tensor)"),
        Headline("bits_per_weight_overall", "average bits per weight", fmt=".2f"),
        Headline("layout_predicted_from", "layout predicted from"),
        Headline("layout_parameters_predicted", "parameters the predicted layout holds"),
        Headline("layout_mismatches", "tensors missing, extra or of another shape than predicted"),
        Headline("block_type_count", "ggml types in the file"),
        Headline("block_types_bit_exact_gguf_py", "of them with one block decoded by hand, bit-exact with gguf-py"),
    ),
)

# The course's specimen, deepseek-coder-6.7b-instruct, is bytesup.model.configs.DEEPSEEK_CODER_6_7B
# (its published config.json). Used only to redo the course's arithmetic about its file.
COURSE_SPECIMEN_MATRIX_TYPE = "Q8_0"  # "mostly Q8_0": every matrix Q8_0, the norm vectors F32
COURSE_SPECIMEN_VECTOR_TYPE = "F32"


# --- the course's arithmetic about its own file --------------------------------------------------


def layout_bytes(layout, matrix_type: str, vector_type: str = "F32") -> int:
    """Tensor data bytes if every matrix is ``matrix_type`` and every vector ``vector_type``."""
    return sum(type_bytes(matrix_type if len(shape) == 2 else vector_type, math.prod(shape)) for _, shape in layout)


def course_arithmetic() -> dict:
    """The specimen's parameter count and tensor bytes, from its published configuration alone."""
    layout = llama_tensor_shapes(DEEPSEEK_CODER_6_7B)
    data = layout_bytes(layout, COURSE_SPECIMEN_MATRIX_TYPE, COURSE_SPECIMEN_VECTOR_TYPE)
    per_block = sum(1 for name, _ in layout if name.startswith("blk.0."))
    return {
        "course_specimen_parameters": sum(math.prod(s) for _, s in layout),
        "course_specimen_tensor_count": len(layout),
        "course_specimen_tensors_per_block": per_block,
        "course_specimen_block_tensors": per_block * DEEPSEEK_CODER_6_7B.n_layers,
        "course_specimen_tensor_data_bytes": data,
        "course_specimen_tensor_data_gb": data / 1e9,
        "course_specimen_block_count": DEEPSEEK_CODER_6_7B.n_layers,
        "course_specimen_bits_per_weight": 8 * data / sum(math.prod(s) for _, s in layout),
    }


def against_the_specimen(m: dict, f: GGUFFile) -> dict:
    """What differs from the course's specimen, as numbers the narrative cites where they apply:
    a block's tensors beyond the nine a llama block holds (None when there are none), and the
    model's size against the specimen's."""
    llama = {name.format(i=0) for name in ARCHITECTURES["llama"].tensors.values()}
    extra = sorted(n.removeprefix("blk.0.").removesuffix(".weight") for n in f.tensor_names if n.startswith("blk.0."))
    extra = [n for n in extra if f"blk.0.{n}.weight" not in llama]
    same = m.get("tensors_per_block") == m["course_specimen_tensors_per_block"]
    return {
        "block_extra_tensors": ", ".join(extra) or None,
        "block_extra_tensor_count": len(extra) or None,
        "tensors_per_block_as_the_specimen": m.get("tensors_per_block") if same and not extra else None,
        "specimen_over_model_parameters": m["course_specimen_parameters"] / m["parameters"]
        if m["parameters"]
        else None,
        "specimen_over_model_file_bytes": m["course_specimen_tensor_data_bytes"] / m["bytes_tensor_data"],
    }


# --- the whole lesson ----------------------------------------------------------------------------


def run(f: GGUFFile, token: str = " cat") -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports, as a flat dict (lists and numpy values
    allowed), and the tables behind them, each computed once: "metadata", "tensors", "accounting",
    "by_type" (rows), "layout" (layout_check rows), "blocks" ({type name: (pick, Block, checks,
    rows) or None where no hand decoder}), and the three block tables "block_types", "block_fields"
    and "block_rows" (every decoded block's rows, one after the other)."""
    buf = read_prefix(f)  # header, metadata and tensor infos: what the hand readers look at
    header = read_header(buf)
    acc = f.byte_accounting()
    meta_rows = metadata_table(f)
    info_rows = tensor_table(f)
    types = by_type(f)
    structure = block_structure(f)
    rec = first_metadata_record(buf)
    info0 = first_tensor_info(f, buf)
    counted = pc.table_counts(info_rows)  # every tensor, each in its part ("other" where none fits)
    params = counted["total"]
    arch = f.metadata.get("general.architecture", "")

    m: dict = {
        "file_size": f.file_size,
        "file_size_gb": f.file_size / 1e9,
        "file_size_mib": f.file_size / 2**20,
        "magic": header["magic"],
        "magic_hex": header["magic_hex"],
        "version": header["version"],
        "tensor_count": header["tensor_count"],
        "metadata_count": header["metadata_count"],
        "header_matches_reader": (header["version"], header["tensor_count"], header["metadata_count"])
        == (f.version, len(f.tensors), len(f.metadata)),
        "alignment": f.alignment,
        "data_offset": f.data_offset,
        "architecture": arch,
        "model_name": f.metadata.get("general.name", ""),
        "file_type": f.metadata.get("general.file_type"),
        "block_count": f.metadata.get(f"{arch}.block_count"),
        "embedding_length": f.metadata.get(f"{arch}.embedding_length"),
        "vocab_size": len(f.metadata.get("tokenizer.ggml.tokens") or []),
    }
    m.update({f"bytes_{p}": acc[p] for p in ACCOUNT_PARTS})
    m.update({f"bytes_padding_{k}": v for k, v in acc["padding_parts"].items()})
    m["bytes_accounted"] = sum(acc[p] for p in ACCOUNT_PARTS)
    m["bytes_unaccounted"] = f.file_size - m["bytes_accounted"]
    m["tensor_data_share"] = acc["tensor_data"] / f.file_size
    # The same parts, added up a second way: record by record.
    m["metadata_record_bytes_sum"] = sum(r["bytes"] for r in meta_rows)
    m["tensor_info_record_bytes_sum"] = sum(r["info_bytes"] for r in info_rows)
    m["tensor_bytes_sum"] = sum(r["bytes"] for r in info_rows)
    biggest = max(meta_rows, key=lambda r: r["bytes"]) if meta_rows else None
    m["metadata_largest_key"] = biggest["key"] if biggest else None
    m["metadata_largest_bytes"] = biggest["bytes"] if biggest else 0
    m["metadata_largest_share"] = biggest["bytes"] / acc["metadata"] if biggest and acc["metadata"] else 0.0
    m["first_metadata_key"] = rec["key"]
    m["first_metadata_type"] = rec["type"]
    m["first_metadata_value"] = rec["value"] if not isinstance(rec["value"], bytes) else None
    m["first_metadata_matches_reader"] = (
        rec["key"] == meta_rows[0]["key"] and rec["type"] == meta_rows[0]["type"]
        and (rec["bytes"] is None or rec["bytes"] == meta_rows[0]["bytes"])
    ) if meta_rows else False  # fmt: skip
    t0 = f.tensors[0] if f.tensors else None
    m["first_tensor_info"] = {k: v for k, v in info0.items()} if t0 else None
    m["first_tensor_info_matches_reader"] = bool(t0) and (
        info0["name"] == t0.name and tuple(info0["dims_gguf"]) == t0.shape_gguf
        and info0["relative_offset"] == t0.relative_offset and info0["bytes"] == tensor_info_bytes(t0)
    )  # fmt: skip

    m["parameters"] = params
    m["parameters_by_part"] = dict(sorted(counted["params"].items()))
    m["bits_per_weight_overall"] = 8 * acc["tensor_data"] / params if params else None
    m.update(structure)
    for g in types:
        m[f"type_{g['type']}_tensors"] = g["tensors"]
        m[f"type_{g['type']}_parameters"] = g["parameters"]
        m[f"type_{g['type']}_bytes"] = g["bytes"]
        m[f"type_{g['type']}_byte_share"] = g["byte_share"]
    m["types_present"] = [g["type"] for g in types]
    m["tied_embeddings"] = "token_embd.weight" in f.tensor_names and "output.weight" not in f.tensor_names

    # The layout predicted from the metadata and the architecture table: every name and shape.
    predicted, source = predicted_layout(f)
    layout_rows = layout_check(f, predicted, source)
    m["layout_predicted"] = predicted is not None
    m["layout_predicted_from"] = source if predicted is not None else f"nothing: {source}"
    m["layout_predicted_tensors"] = None if predicted is None else len(predicted)
    m["layout_parameters_predicted"] = None if predicted is None else sum(math.prod(s) for _, s in predicted)
    m["layout_mismatches"] = None if predicted is None else len(layout_rows)
    m["layout_from_metadata_matches"] = None if predicted is None else not layout_rows

    # One block of every type, by hand.
    try:
        tid, _ = lookup(f.metadata, token)
    except (TokenError, KeyError):
        tid = None  # not one token here: the Q8_0 block comes from the first Q8_0 tensor instead
    m["token"], m["token_id"] = token, tid
    blocks: dict = {}
    type_rows, field_table, weight_rows = [], [], []
    for type_name, pick in chosen_blocks(f, tid).items():
        key = type_name.lower()
        blocks[type_name] = None
        if pick is None:
            type_rows.append({"type": type_name, "note": "no hand decoder in bytesup.gguf.quants for this type"})
            continue
        blk, checks = block_report(f, pick)
        rows = block_rows(blk, checks["gguf_py_values"], pick)
        blocks[type_name] = (pick, blk, checks, rows)
        weight_rows += rows
        field_table += field_rows(blk, pick)
        type_rows.append({"type": type_name, "tensor": pick.tensor, "row": pick.row, "offset": pick.offset,
                          "block_bytes": len(pick.raw), "weights": blk.n_weights, "formula": blk.formula,
                          "bit_exact_gguf_py": checks["bit_exact_gguf_py"],
                          "bit_exact_bytesup": checks["bit_exact_bytesup"]})  # fmt: skip
        m[f"{key}_block"] = {k: v for k, v in checks.items() if not k.startswith("bit_exact")}
        m[f"{key}_block_bit_exact_gguf_py"] = checks["bit_exact_gguf_py"]
        m[f"{key}_block_bit_exact_bytesup"] = checks["bit_exact_bytesup"]
        m[f"{key}_block_d"] = checks["d"]
        m[f"{key}_block_tensor"] = pick.tensor
    decoded = [t for t, b in blocks.items() if b is not None]
    m["block_types"] = list(blocks)
    m["block_type_count"] = len(blocks)
    m["block_types_decoded"] = decoded
    m["block_types_without_hand_decoder"] = [t for t, b in blocks.items() if b is None]
    m["block_types_bit_exact_gguf_py"] = sum(1 for t in decoded if blocks[t][2]["bit_exact_gguf_py"])
    m["block_types_bit_exact_bytesup"] = sum(1 for t in decoded if blocks[t][2]["bit_exact_bytesup"])
    m["blocks_all_bit_exact_gguf_py"] = m["block_types_bit_exact_gguf_py"] == len(blocks)

    m.update(course_arithmetic())
    m.update(against_the_specimen(m, f))
    tables = {"metadata": meta_rows, "tensors": info_rows, "accounting": accounting_rows(acc), "by_type": types,
              "layout": layout_rows, "blocks": blocks, "block_types": type_rows, "block_fields": field_table,
              "block_rows": weight_rows}  # fmt: skip
    return m, tables


def compute(f: GGUFFile, token: str = " cat") -> dict:
    """The metrics of ``run`` alone."""
    return run(f, token)[0]


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None,
                    specimen: bool = False):  # fmt: skip
    """Check the lesson's published claims against this run's metrics.

    ``specimen`` is the workflow's config flag for the model; the run also checks the name,
    checksum and metadata itself (bytesup.lessons.claims.is_specimen). Either makes it the specimen.
    """
    context = claims_mod.run_context(model, sha256, metadata, extra=["specimen"] if specimen else [])
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- figures -------------------------------------------------------------------------------------


def plot_by_type(rows: list[dict], title: str = ""):
    """Share of parameters and share of bytes per ggml type, side by side, with bits per weight."""
    fig, ax = figure(figsize=(6.4, 2.2 + 0.8 * len(rows)))
    y = np.arange(len(rows))
    h = 0.38
    ax.barh(y - h / 2, [100 * r["parameter_share"] for r in rows], height=h, color="C0", label="share of parameters")
    ax.barh(y + h / 2, [100 * r["byte_share"] for r in rows], height=h, color="C1", label="share of tensor bytes")
    top = max(max(100 * r["parameter_share"], 100 * r["byte_share"]) for r in rows)
    for i, r in enumerate(rows):  # the bits each weight takes, beside its pair of bars
        ax.text(
            max(100 * r["parameter_share"], 100 * r["byte_share"]) + top / 40,
            i,
            f"{r['bits_per_weight']:g} bits/weight",
            va="center",
        )
    ax.set_yticks(y, [r["type"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.7)
    ax.set_xlabel("% of the parameters, % of the tensor bytes")
    legend_below(fig, ax, ncol=1)
    if title:
        ax.set_title(title)
    return fig

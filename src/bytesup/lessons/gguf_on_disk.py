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
  6. one block of every ggml type the file holds decoded by hand (bytesup.gguf.blocks: F32,
     Q8_0, Q4_1, Q5_0, a K-quant super-block field by field, ...), from raw bytes to float32
     weights, and compared bit for bit with gguf-py (llama.cpp's own Python reader) and with
     bytesup.gguf.dequant.

The file is read through bytesup.gguf.file.GGUFFile, which memory-maps it: only the header,
the tables and one block per type are ever touched, so this runs in well under a second on the
default model and in a few seconds on a 7 GB one.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup.gguf.blocks import BLOCK_DECODERS, Block
from bytesup.gguf.dequant import bit_equal, dequantize, reference_dequantize
from bytesup.gguf.extract import shape_text
from bytesup.gguf.file import HEADER_BYTES, VALUE_TYPES, GGUFFile, TensorInfo, printable
from bytesup.lessons import claims as claims_mod
from bytesup.lessons import figure
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model import param_counts as pc
from bytesup.model.arch import ArchMetadataError, UnsupportedArchitectureError, spec_from_metadata
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
    figures={
        "bytes_by_type.png": "Share of the file's parameters and of its tensor bytes per ggml type",
    },
    headlines=(
        Headline("file_size", "file size", unit="bytes"),
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


# --- 1. the header, by hand --------------------------------------------------------------------


def read_prefix(f: GGUFFile) -> bytes:
    """The file's bytes up to the end of the tensor infos (a few MB at most): everything before
    the tensor data, read as plain bytes for the hand-written readers below."""
    with open(f.path, "rb") as fh:
        return fh.read(f.tensor_infos_end)


def read_header(buf) -> dict:
    """The first 24 bytes: 4 magic bytes, then uint32 version, uint64 tensor count, uint64
    metadata count, all little-endian ('<' in struct's format)."""
    if len(buf) < HEADER_BYTES:
        raise ValueError(f"a GGUF header is {HEADER_BYTES} bytes; got {len(buf)}")
    magic = bytes(buf[0:4])
    version, tensor_count, metadata_count = struct.unpack_from("<IQQ", buf, 4)
    return {
        "magic": magic.decode("ascii", errors="backslashreplace"),
        "magic_hex": magic.hex(" "),
        "version": version,
        "tensor_count": tensor_count,
        "metadata_count": metadata_count,
    }


def hex_dump(buf, start: int = 0, length: int = 48, width: int = 16) -> str:
    """Bytes as an offset, hex and printable-ASCII listing, like `xxd`."""
    data = bytes(buf[start : start + length])
    lines = []
    for i in range(0, len(data), width):
        chunk = data[i : i + width]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start + i:08x}  {chunk.hex(' '):<{3 * width}} {text}")
    return "\n".join(lines)


# --- 2. the metadata table -----------------------------------------------------------------------


def _read_string(buf, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, pos)
    raw = bytes(buf[pos + 8 : pos + 8 + n])
    return raw.decode("utf-8", errors="backslashreplace"), pos + 8 + n


def first_metadata_record(buf) -> dict:
    """The record right after the header, read by hand: key (uint64 length + UTF-8 bytes),
    value type (uint32), value. Scalars and strings only; an array is summarised by its
    element type and count."""
    pos = HEADER_BYTES
    key, pos = _read_string(buf, pos)
    (vtype,) = struct.unpack_from("<I", buf, pos)
    pos += 4
    type_name, fmt, size = VALUE_TYPES[vtype]
    if type_name == "STRING":
        value, pos = _read_string(buf, pos)
    elif type_name == "ARRAY":
        etype, count = struct.unpack_from("<IQ", buf, pos)
        value = f"{count} x {VALUE_TYPES[etype][0]}"
        pos = None  # the record's end needs the elements walked; not done by hand here
    else:
        (value,) = struct.unpack_from(fmt, buf, pos)
        pos += size
    return {"key": key, "type": type_name, "value": value, "end": pos,
            "bytes": None if pos is None else pos - HEADER_BYTES}  # fmt: skip


def short_value(value, limit: int = 60) -> str:
    """A metadata value in one printable line: long strings cut, arrays as count + first items."""
    if isinstance(value, list):
        head = ", ".join(printable(repr(v)) for v in value[:3])
        more = ", ..." if len(value) > 3 else ""
        return f"{len(value)} items: [{head}{more}]"
    text = printable(value if isinstance(value, str) else repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def metadata_table(f: GGUFFile) -> list[dict]:
    """One row per metadata key, in file order, with the size of its whole record on disk.

    A record runs from its key's first byte to the next key's; the last one ends where the
    tensor infos begin. So the record sizes add up to the metadata section exactly.
    """
    starts = sorted((off, key) for key, off in f.metadata_offsets.items())
    ends = [off for off, _ in starts[1:]] + [f.metadata_end]
    rows = []
    for (start, key), end in zip(starts, ends, strict=True):
        value = f.metadata[key]
        rows.append({
            "key": key,
            "type": f.metadata_types[key],
            "count": len(value) if isinstance(value, list) else 1,
            "value": short_value(value),
            "offset": start,
            "bytes": end - start,
        })  # fmt: skip
    return rows


# --- 3. the tensor table -------------------------------------------------------------------------


def tensor_info_bytes(info: TensorInfo) -> int:
    """Size of one tensor-info record: name (8 + UTF-8 bytes), n_dims (4), dims (8 each),
    ggml type (4), data offset (8)."""
    return 8 + len(info.name.encode("utf-8")) + 4 + 8 * len(info.shape_gguf) + 4 + 8


def first_tensor_info(f: GGUFFile, buf) -> dict:
    """The first tensor-info record, read by hand from where the metadata ends."""
    pos = f.metadata_end
    name, pos = _read_string(buf, pos)
    (n_dims,) = struct.unpack_from("<I", buf, pos)
    dims = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
    pos += 4 + 8 * n_dims
    ggml_type, offset = struct.unpack_from("<IQ", buf, pos)
    pos += 12
    return {
        "name": name,
        "n_dims": n_dims,
        "dims_gguf": list(dims),  # innermost first
        "shape_numpy": list(reversed(dims)),
        "ggml_type": ggml_type,
        "type_name": GGMLQuantizationType(ggml_type).name,
        "relative_offset": offset,
        "bytes": pos - f.metadata_end,
    }


def bits_per_weight(type_name: str) -> float:
    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    return 8 * type_size / block_size


def tensor_table(f: GGUFFile) -> list[dict]:
    """One row per tensor in file order. shape is numpy order (rows x row length); dims_gguf is
    the file's own order, innermost first. offset is absolute in the file."""
    rows = []
    for t in f.tensors:
        rows.append({
            "name": t.name,
            "type": t.type_name,
            "shape": "x".join(map(str, t.shape)),
            "dims_gguf": "x".join(map(str, t.shape_gguf)),
            "elements": t.n_elements,
            "bytes": t.n_bytes,
            "bits_per_weight": bits_per_weight(t.type_name),
            "offset": t.offset,
            "info_bytes": tensor_info_bytes(t),
        })  # fmt: skip
    return rows


def _block_of(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
        return int(parts[1])
    return None


def block_structure(f: GGUFFile) -> dict:
    """How many blocks the tensor names show, and how many tensors each holds."""
    per_block: dict[int, int] = {}
    outside = []
    for t in f.tensors:
        b = _block_of(t.name)
        if b is None:
            outside.append(t.name)
        else:
            per_block[b] = per_block.get(b, 0) + 1
    counts = set(per_block.values())
    return {
        "blocks_in_names": len(per_block),
        "tensors_per_block": counts.pop() if len(counts) == 1 else None,  # None: blocks differ
        "tensors_outside_blocks": len(outside),
        "tensor_names_outside_blocks": outside,
    }


# --- 4. the byte accounting ----------------------------------------------------------------------

ACCOUNT_PARTS = ("header", "metadata", "tensor_infos", "padding", "tensor_data")


def accounting_rows(acc: Mapping) -> list[dict]:
    """The byte accounting as a table, with each part's share of the file."""
    total = acc["file_size"]
    rows = [{"part": p, "bytes": acc[p], "share": acc[p] / total} for p in ACCOUNT_PARTS]
    rows.append({"part": "file_size", "bytes": total, "share": 1.0})
    return rows


# --- 5. parameters and bytes by type -------------------------------------------------------------


def by_type(f: GGUFFile) -> list[dict]:
    """Per ggml type: tensors, parameters (elements), bytes, bits per weight, shares; most bytes first."""
    counted = pc.table_counts(pc.tensor_rows(f.tensors))["by_type"]  # every tensor, by its ggml type
    groups = {t: {"type": t, **g} for t, g in counted.items()}
    params = sum(g["parameters"] for g in groups.values()) or 1
    data = sum(g["bytes"] for g in groups.values()) or 1
    rows = sorted(groups.values(), key=lambda g: (-g["bytes"], g["type"]))
    for g in rows:
        g["bits_per_weight"] = bits_per_weight(g["type"])
        g["parameter_share"] = g["parameters"] / params
        g["byte_share"] = g["bytes"] / data
    return rows


# --- 5b. the layout the architecture table predicts ---------------------------------------------

LAYOUT_COLUMNS = ["tensor", "problem", "predicted_shape", "file_shape"]


def predicted_layout(f: GGUFFile) -> tuple[list[tuple[str, tuple[int, ...]]] | None, str]:
    """(name, numpy shape) of every tensor the architecture table (bytesup.model.arch) expects a file
    of this metadata to hold, and what the prediction rests on; (None, the one-line reason) for an
    architecture the table has no row for, or metadata that does not give the sizes.

    The metadata gives every size; only "is the head tied?" it does not say (GGUF has no such key),
    so that one fact comes from the file: the head is tied exactly when output.weight is absent.
    """
    try:
        spec = spec_from_metadata(f.metadata, path=f.path.name)
    except (UnsupportedArchitectureError, ArchMetadataError) as err:
        return None, str(err)
    spec = dataclasses.replace(spec, tied=spec.facts.output not in f.tensor_names)
    return spec.tensor_shapes(), f"the {spec.arch} row of the architecture table and the metadata's sizes"


def layout_check(f: GGUFFile, predicted: list[tuple[str, tuple[int, ...]]] | None, reason: str = "") -> list[dict]:
    """One row per difference between the predicted layout and the file, in file order: a tensor
    predicted but missing from the file, one in the file the prediction lacks, or one of another
    shape. Empty when the file holds exactly the predicted tensors. With no prediction, one row
    saying why, and that the parameters are the file's own tensors counted."""
    if predicted is None:
        return [{"tensor": "(every tensor)", "problem": f"not predicted: {reason}; the parameters are counted from "
                 f"the file's {len(f.tensors)} tensors", "predicted_shape": None, "file_shape": None}]  # fmt: skip
    actual = {t.name: t.shape for t in f.tensors}
    expected = dict(predicted)
    rows = []
    for t in f.tensors:
        if t.name not in expected:
            rows.append({"tensor": t.name, "problem": "in the file, not predicted", "predicted_shape": None,
                         "file_shape": shape_text(t.shape)})  # fmt: skip
        elif expected[t.name] != t.shape:
            rows.append({"tensor": t.name, "problem": "shape differs", "predicted_shape": shape_text(expected[t.name]),
                         "file_shape": shape_text(t.shape)})  # fmt: skip
    for name, shape in predicted:
        if name not in actual:
            rows.append({"tensor": name, "problem": "predicted, missing from the file",
                         "predicted_shape": shape_text(shape), "file_shape": None})  # fmt: skip
    return rows


# --- 6. one block by hand ------------------------------------------------------------------------
def gguf_py_block(raw: bytes, type_name: str) -> np.ndarray:
    """The same bytes through gguf-py's dequantizer (bytesup.gguf.dequant.reference_dequantize): the reference."""
    block_size, _ = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    return reference_dequantize(np.frombuffer(raw, np.uint8), type_name, (block_size,))


same_bits = bit_equal  # same shape, identical float32 bits (bytesup.gguf.dequant.bit_equal)


@dataclass(frozen=True)
class BlockPick:
    tensor: str
    type_name: str
    row: int
    block: int  # index of the block within the row
    offset: int  # absolute byte offset of the block in the file
    first_weight: int  # index within the row of the block's first weight
    raw: bytes
    row_bytes: int


def pick_block(f: GGUFFile, type_name: str, prefer: list[tuple[str, int]] = ()) -> BlockPick | None:
    """Block 0 of a row of a tensor of ``type_name``: the first ``prefer`` entry (tensor, row)
    whose tensor has that type, else row 0 of the first such tensor in the file, else None."""
    by_name = {t.name: t for t in f.tensors}
    choice = next(((by_name[n], r) for n, r in prefer if n in by_name and by_name[n].type_name == type_name), None)
    if choice is None:
        first = next((t for t in f.tensors if t.type_name == type_name), None)
        if first is None:
            return None
        choice = (first, 0)
    info, row = choice
    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    row_len = info.shape[-1]
    row_bytes = row_len // block_size * type_size
    start = row * row_bytes  # block 0 of the row
    raw = bytes(f.raw(info.name)[start : start + type_size])
    return BlockPick(info.name, type_name, row, 0, info.offset + start, 0, raw, row_bytes)


def chosen_blocks(f: GGUFFile, token_id: int | None = None) -> dict[str, BlockPick | None]:
    """One block of every ggml type the file holds, keyed by type name, most bytes first (by_type's
    order). The token's row of token_embd.weight where that tensor has the type (its first block is
    the first numbers of the token's vector), else row 0 of blk.0.ffn_gate.weight, else row 0 of the
    first tensor of the type. None for a type bytesup.gguf.blocks has no hand decoder for."""
    prefer = [("token_embd.weight", token_id)] if token_id is not None else []
    prefer.append(("blk.0.ffn_gate.weight", 0))
    return {g["type"]: pick_block(f, g["type"], prefer) if g["type"] in BLOCK_DECODERS else None
            for g in by_type(f)}  # fmt: skip


BLOCK_TABLE_COLUMNS = ["type", "tensor", "row", "i", "stored_in", "q", "level", "scale", "offset", "by_hand", "gguf_py",
                       "same_bits"]  # fmt: skip
FIELD_TABLE_COLUMNS = ["type", "tensor", "field", "first_byte", "bytes", "value"]
TYPE_TABLE_COLUMNS = ["type", "tensor", "row", "offset", "block_bytes", "weights", "formula", "bit_exact_gguf_py",
                      "bit_exact_bytesup", "note"]  # fmt: skip


def block_report(f: GGUFFile, pick: BlockPick) -> tuple[Block, dict]:
    """Decode the picked block by hand and check it against gguf-py and bytesup.gguf.dequant."""
    blk = BLOCK_DECODERS[pick.type_name](pick.raw)
    reference = gguf_py_block(pick.raw, pick.type_name)
    row_raw = f.raw(pick.tensor)[pick.row * pick.row_bytes : (pick.row + 1) * pick.row_bytes]
    row = dequantize(np.array(row_raw), pick.type_name, (f.tensor(pick.tensor).shape[-1],))
    f.check_finite(pick.tensor, row, start=pick.row * row.size)  # NaN or infinity: one line naming the tensor
    ours = row[pick.first_weight : pick.first_weight + len(blk.q)]
    checks = {
        "tensor": pick.tensor,
        "row": pick.row,
        "block": pick.block,
        "offset": pick.offset,
        "bytes": len(pick.raw),
        "raw_hex": pick.raw.hex(" "),
        "formula": blk.formula,
        "weights": blk.n_weights,
        "d_bits": None if blk.d is None else f"0x{blk.d.bits:04x}",
        "d": None if blk.d is None else blk.d.value,
        "m_bits": None if blk.m is None else f"0x{blk.m.bits:04x}",
        "m": None if blk.m is None else blk.m.value,
        "q": blk.q,
        "values": blk.values,
        "gguf_py_values": reference,
        "bit_exact_gguf_py": bit_equal(blk.values, reference),
        "bit_exact_bytesup": bit_equal(blk.values, ours),
        "d_matches_numpy_fp16": None if blk.d is None else blk.d.value == float(np.uint16(blk.d.bits).view(np.float16)),
        "sub_scales": blk.sub_scales or None,
        "sub_mins": blk.sub_mins or None,
    }
    return blk, checks


def block_rows(blk: Block, reference: np.ndarray, pick: BlockPick | None = None) -> list[dict]:
    """The block as a table: one row per weight, with where its quant came from, the integer the
    formula multiplies (level), the float32 scale and offset, and the weight by hand and by gguf-py."""
    rows = []
    for i, q in enumerate(blk.q):
        rows.append({
            "type": blk.type_name,
            "tensor": pick.tensor if pick else None,
            "row": pick.row if pick else None,
            "i": i,
            "stored_in": blk.stored_in[i],
            "q": q,
            "level": blk.level[i] if blk.level else None,
            "scale": blk.scale[i] if blk.scale else None,
            "offset": blk.offset[i] if blk.offset else None,
            "by_hand": float(blk.values[i]),
            "gguf_py": float(reference[i]),
            "same_bits": bit_equal(blk.values[i : i + 1], reference[i : i + 1]),
        })  # fmt: skip
    return rows


def field_rows(blk: Block, pick: BlockPick | None = None) -> list[dict]:
    """The block field by field, in byte order; a K-quant's packed sub-block scales (and mins) follow,
    unpacked: the stored integers, and the float32 factors d * scale[j] (dmin * min[j]) they give."""
    base = {"type": blk.type_name, "tensor": pick.tensor if pick else None}
    rows = [{**base, "field": name, "first_byte": at, "bytes": n, "value": value} for name, at, n, value in blk.fields]
    if blk.sub_scales:
        per_sub = blk.n_weights // len(blk.sub_scales)
        factors = [str(np.float32(blk.scale[j * per_sub])) for j in range(len(blk.sub_scales))]
        rows.append({**base, "field": f"scale[0..{len(blk.sub_scales) - 1}] (unpacked)", "value": blk.sub_scales})
        rows.append({**base, "field": "d * scale[j] (float32)", "value": ", ".join(factors)})
    if blk.sub_mins:
        per_sub = blk.n_weights // len(blk.sub_mins)
        factors = [str(np.float32(-blk.offset[j * per_sub])) for j in range(len(blk.sub_mins))]
        rows.append({**base, "field": f"min[0..{len(blk.sub_mins) - 1}] (unpacked)", "value": blk.sub_mins})
        rows.append({**base, "field": "dmin * min[j] (float32)", "value": ", ".join(factors)})
    return rows


# --- the course's arithmetic about its own file --------------------------------------------------


def layout_bytes(layout, matrix_type: str, vector_type: str = "F32") -> int:
    """Tensor data bytes if every matrix is ``matrix_type`` and every vector ``vector_type``."""
    total = 0
    for _, shape in layout:
        block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[matrix_type if len(shape) == 2 else vector_type]]
        total += math.prod(shape) // block_size * type_size
    return total


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
            type_rows.append({"type": type_name, "note": "no hand decoder in bytesup.gguf.blocks for this type"})
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
    fig, ax = figure()
    y = np.arange(len(rows))
    h = 0.38
    ax.barh(y - h / 2, [100 * r["parameter_share"] for r in rows], height=h, color="C0", label="share of parameters")
    ax.barh(y + h / 2, [100 * r["byte_share"] for r in rows], height=h, color="C1", label="share of tensor bytes")
    for i, r in enumerate(rows):
        n = f"{r['tensors']} tensor" + ("s" if r["tensors"] != 1 else "")
        ax.text(max(100 * r["parameter_share"], 100 * r["byte_share"]) + 1, i,
                f"{r['bits_per_weight']:g} bits/weight, {n}\n{100 * r['parameter_share']:.1f} % of parameters,"
                f" {100 * r['byte_share']:.1f} % of bytes", va="center", fontsize=8)  # fmt: skip
    ax.set_yticks(y, [r["type"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 145)
    ax.set_xlabel("% of the file's parameters / tensor bytes")
    ax.legend(loc="lower right", fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig

"""Lesson 1, "What a model is on disk": one GGUF file, accounted for to its last byte.

What is computed, in the lesson's order:
  1. the header, read by hand from the first 24 bytes (magic, version, two counts);
  2. the metadata table: every key, its type, its value in short, and how many bytes its record
     takes; the first record is also read by hand;
  3. the tensor table: every tensor's name, type, shape, offset and size; the first tensor-info
     record is read by hand;
  4. the byte accounting: header + metadata + tensor infos + padding + tensor data = file size;
  5. parameters and bytes by quantization type;
  6. one Q8_0 block and one Q4_1 block decoded by hand, from raw bytes to float32 weights, and
     compared bit for bit with gguf-py (llama.cpp's own Python reader) and with bytesup.dequant.

The file is read through bytesup.gguf_file.GGUFFile, which memory-maps it: only the header,
the tables and the two blocks are ever touched, so this runs in well under a second on the
default model and in a few seconds on a 7 GB one.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup import claims as claims_mod
from bytesup.dequant import bit_equal, dequantize, reference_dequantize
from bytesup.gguf_file import HEADER_BYTES, VALUE_TYPES, GGUFFile, TensorInfo, printable
from bytesup.quant_blocks import BLOCK_DECODERS, Block
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.lessons import figure
from bytesup.model.configs import DEEPSEEK_CODER_6_7B, Architecture, llama_tensor_shapes
from bytesup.tokens import TokenError, lookup

SPEC = LessonSpec(
    id='01_gguf_on_disk',
    title='What a model is on disk',
    kind=SERIES,
    position=1,
    source=(
        "Lesson 1 of the LLM Basics series (its text is not among the course files here; the numbers "
        "come from what the lesson 3 text and the FFN-stores text say about the file)"
    ),
    reads=('model_gguf',),
    tables=('metadata_table.csv', 'tensor_table.csv', 'byte_accounting.csv', 'bytes_by_type.csv', 'q8_0_block.csv', 'q4_1_block.csv'),
    figures={
        'bytes_by_type.png': "Share of the file's parameters and of its tensor bytes per ggml type",
    },
    headlines=(
        Headline('file_size', 'file size', unit='bytes'),
        Headline('tensor_count', 'tensors'),
        Headline('metadata_count', 'metadata keys'),
        Headline('bytes_metadata', 'metadata bytes'),
        Headline('bytes_tensor_infos', 'tensor-info bytes'),
        Headline('bytes_padding', 'padding bytes'),
        Headline('bytes_tensor_data', 'tensor data bytes'),
        Headline('bytes_unaccounted', 'bytes unaccounted'),
        Headline('parameters', 'parameters'),
        Headline('bits_per_weight_overall', 'average bits per weight', fmt='.2f'),
        Headline('q8_0_block_bit_exact_gguf_py', 'Q8_0 block decoded by hand, bit-exact with gguf-py'),
        Headline('q4_1_block_bit_exact_gguf_py', 'Q4_1 block decoded by hand, bit-exact with gguf-py'),
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
    groups: dict[str, dict] = {}
    for t in f.tensors:
        g = groups.setdefault(t.type_name, {"type": t.type_name, "tensors": 0, "parameters": 0, "bytes": 0})
        g["tensors"] += 1
        g["parameters"] += t.n_elements
        g["bytes"] += t.n_bytes
    params = sum(g["parameters"] for g in groups.values()) or 1
    data = sum(g["bytes"] for g in groups.values()) or 1
    rows = sorted(groups.values(), key=lambda g: (-g["bytes"], g["type"]))
    for g in rows:
        g["bits_per_weight"] = bits_per_weight(g["type"])
        g["parameter_share"] = g["parameters"] / params
        g["byte_share"] = g["bytes"] / data
    return rows


# --- 6. one block by hand ------------------------------------------------------------------------














def gguf_py_block(raw: bytes, type_name: str) -> np.ndarray:
    """The same bytes through gguf-py's dequantizer (bytesup.dequant.reference_dequantize): the reference."""
    block_size, _ = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    return reference_dequantize(np.frombuffer(raw, np.uint8), type_name, (block_size,))


same_bits = bit_equal  # same shape, identical float32 bits (bytesup.dequant.bit_equal)


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
    """The lesson's two blocks: Q8_0 from the token's row of token_embd.weight (the first 32
    numbers of its vector) and Q4_1 from row 0 of blk.0.ffn_gate.weight, where those tensors
    have those types; otherwise the first tensor of the type; None when the file has none."""
    q8_prefer = [("token_embd.weight", token_id)] if token_id is not None else []
    return {
        "q8_0": pick_block(f, "Q8_0", q8_prefer),
        "q4_1": pick_block(f, "Q4_1", [("blk.0.ffn_gate.weight", 0)]),
    }


BLOCK_TABLE_COLUMNS = ["i", "stored_in", "q", "d", "m", "by_hand", "gguf_py", "same_bits"]


def block_report(f: GGUFFile, pick: BlockPick) -> tuple[Block, dict]:
    """Decode the picked block by hand and check it against gguf-py and bytesup.dequant."""
    blk = BLOCK_DECODERS[pick.type_name](pick.raw)
    reference = gguf_py_block(pick.raw, pick.type_name)
    row_raw = f.raw(pick.tensor)[pick.row * pick.row_bytes : (pick.row + 1) * pick.row_bytes]
    row = dequantize(np.array(row_raw), pick.type_name, (f.tensor(pick.tensor).shape[-1],))
    ours = row[pick.first_weight : pick.first_weight + len(blk.q)]
    checks = {
        "tensor": pick.tensor,
        "row": pick.row,
        "block": pick.block,
        "offset": pick.offset,
        "bytes": len(pick.raw),
        "raw_hex": pick.raw.hex(" "),
        "d_bits": f"0x{blk.d.bits:04x}",
        "d": blk.d.value,
        "m_bits": None if blk.m is None else f"0x{blk.m.bits:04x}",
        "m": None if blk.m is None else blk.m.value,
        "q": blk.q,
        "values": blk.values,
        "gguf_py_values": reference,
        "bit_exact_gguf_py": bit_equal(blk.values, reference),
        "bit_exact_bytesup": bit_equal(blk.values, ours),
        "d_matches_numpy_fp16": blk.d.value == float(np.uint16(blk.d.bits).view(np.float16)),
    }
    return blk, checks


def block_rows(blk: Block, reference: np.ndarray) -> list[dict]:
    """The block as a table: one row per weight, with where its quant came from."""
    rows = []
    for i, q in enumerate(blk.q):
        if blk.type_name == "Q4_1":
            j = i % 16
            source = f"byte {4 + j} ({blk.packed[j]:08b}) {'low' if i < 16 else 'high'} nibble"
        else:
            source = f"byte {2 + i} (int8)"
        rows.append({
            "i": i,
            "stored_in": source,
            "q": q,
            "d": blk.d.value,
            "m": None if blk.m is None else blk.m.value,
            "by_hand": float(blk.values[i]),
            "gguf_py": float(reference[i]),
            "same_bits": bit_equal(blk.values[i : i + 1], reference[i : i + 1]),
        })  # fmt: skip
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


def metadata_architecture(metadata: Mapping, tied: bool) -> Architecture | None:
    """This file's configuration as a bytesup.model.configs.Architecture, read from its metadata
    (``tied``: the output head reuses token_embd), or None for a file that does not say."""
    arch = metadata.get("general.architecture")
    try:
        c = int(metadata[f"{arch}.embedding_length"])
        heads = int(metadata[f"{arch}.attention.head_count"])
        return Architecture(
            str(metadata.get("general.name", arch)),
            d_model=c,
            d_ff=int(metadata[f"{arch}.feed_forward_length"]),
            n_layers=int(metadata[f"{arch}.block_count"]),
            vocab=len(metadata["tokenizer.ggml.tokens"]),
            n_heads=heads,
            n_kv_heads=int(metadata.get(f"{arch}.attention.head_count_kv", heads)),
            head_dim=c // heads,
            tied=tied,
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


# --- the whole lesson ----------------------------------------------------------------------------


def run(f: GGUFFile, token: str = " cat") -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports, as a flat dict (lists and numpy values
    allowed), and the tables behind them, each computed once: "metadata", "tensors", "accounting",
    "by_type" (rows) and "blocks" ({"q8_0": ..., "q4_1": ...}: (pick, Block, checks, rows), or None)."""
    buf = read_prefix(f)  # header, metadata and tensor infos: what the hand readers look at
    header = read_header(buf)
    acc = f.byte_accounting()
    meta_rows = metadata_table(f)
    info_rows = tensor_table(f)
    types = by_type(f)
    structure = block_structure(f)
    rec = first_metadata_record(buf)
    info0 = first_tensor_info(f, buf)
    params = sum(t.n_elements for t in f.tensors)
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
    m["bits_per_weight_overall"] = 8 * acc["tensor_data"] / params if params else None
    m.update(structure)
    for g in types:
        m[f"type_{g['type']}_tensors"] = g["tensors"]
        m[f"type_{g['type']}_parameters"] = g["parameters"]
        m[f"type_{g['type']}_bytes"] = g["bytes"]
        m[f"type_{g['type']}_byte_share"] = g["byte_share"]
    m["types_present"] = [g["type"] for g in types]
    m["tied_embeddings"] = "token_embd.weight" in f.tensor_names and "output.weight" not in f.tensor_names

    # The layout predicted from the metadata alone: same names, shapes and parameter count?
    cfg = metadata_architecture(f.metadata, tied=m["tied_embeddings"])
    if cfg is not None:
        layout = llama_tensor_shapes(cfg)
        actual = {t.name: t.shape for t in f.tensors}
        m["layout_from_metadata_matches"] = dict(layout) == actual
        m["layout_parameters_from_metadata"] = sum(math.prod(s) for _, s in layout)
    else:
        m["layout_from_metadata_matches"] = None
        m["layout_parameters_from_metadata"] = None

    # One block of each of the two types, by hand.
    try:
        tid, _ = lookup(f.metadata, token)
    except (TokenError, KeyError):
        tid = None  # not one token here: the Q8_0 block comes from the first Q8_0 tensor instead
    m["token"], m["token_id"] = token, tid
    blocks: dict = {}
    for key, pick in chosen_blocks(f, tid).items():
        blocks[key] = None
        if pick is None:
            m[f"{key}_block"] = None  # the file has no tensor of this type
            m[f"{key}_block_bit_exact_gguf_py"] = m[f"{key}_block_bit_exact_bytesup"] = None
            m[f"{key}_block_d"] = m[f"{key}_block_tensor"] = None
            continue
        blk, checks = block_report(f, pick)
        blocks[key] = (pick, blk, checks, block_rows(blk, checks["gguf_py_values"]))
        m[f"{key}_block"] = {k: v for k, v in checks.items() if not k.startswith("bit_exact")}
        m[f"{key}_block_bit_exact_gguf_py"] = checks["bit_exact_gguf_py"]
        m[f"{key}_block_bit_exact_bytesup"] = checks["bit_exact_bytesup"]
        m[f"{key}_block_d"] = checks["d"]
        m[f"{key}_block_tensor"] = pick.tensor

    m.update(course_arithmetic())
    tables = {"metadata": meta_rows, "tensors": info_rows, "accounting": accounting_rows(acc), "by_type": types,
              "blocks": blocks}  # fmt: skip
    return m, tables


def compute(f: GGUFFile, token: str = " cat") -> dict:
    """The metrics of ``run`` alone."""
    return run(f, token)[0]


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None,
                    specimen: bool = False):  # fmt: skip
    """Check the lesson's published claims against this run's metrics.

    ``specimen`` is the workflow's config flag for the model; the run also checks the name,
    checksum and metadata itself (bytesup.claims.is_specimen). Either makes it the specimen.
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

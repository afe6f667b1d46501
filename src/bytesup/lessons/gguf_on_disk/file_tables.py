"""Lesson 1's steps 1 to 5: the header, the metadata and tensor tables read by hand, the byte accounting, the
bytes by type and the layout the architecture table predicts."""

from __future__ import annotations

import struct
from collections.abc import Mapping

from gguf.constants import GGMLQuantizationType

from bytesup.gguf.file import HEADER_BYTES, VALUE_TYPES, GGUFFile, TensorInfo, printable
from bytesup.gguf.sizes import bits_per_weight, shape_text
from bytesup.model import param_counts as pc
from bytesup.model.arch import ArchMetadataError, UnsupportedArchitectureError, spec_from_metadata

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

    The metadata gives every size; what it does not say (GGUF has no such keys) comes from the
    file's tensor names: the head is tied exactly when output.weight is absent, Phi-3's Q K V are one
    attn_qkv when the file has it, and the optional rope tensors (rope_freqs.weight) when present.
    """
    try:
        spec = spec_from_metadata(f.metadata, f.tensor_names, path=f.path.name, check_tensors=False)
    except (UnsupportedArchitectureError, ArchMetadataError) as err:
        return None, str(err)
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

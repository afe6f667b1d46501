"""A validating GGUF reader over mmap.

A GGUF file is four parts, one after the other (all numbers little-endian):

    header        magic "GGUF", version (uint32), tensor count (uint64), metadata count (uint64)
    metadata      key (string) + value type (uint32) + value, repeated
    tensor infos  name (string), n_dims (uint32), dims (uint64 each, innermost first),
                  ggml type (uint32), offset into the data section (uint64), repeated
    data          starts at the next multiple of `general.alignment` (default 32);
                  each tensor's bytes at data_offset + its offset

A string is a uint64 byte length followed by UTF-8 bytes; an array is an element type
(uint32), a count (uint64) and the elements.

The reader maps the file and never reads it whole. Every length or count it finds is
checked against the bytes that remain before anything is allocated for it, so a
corrupt or hostile file costs milliseconds and a few kilobytes, and ends in one
`GGUFFormatError` that names the file, the field and the byte offset.
A split model (bytesup.gguf.split) and a partial file (a download cut short) are read too:
see GGUFFile's docstring.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGMLQuantizationType

from bytesup.errors import printable, quote
from bytesup.gguf import sizes
from bytesup.gguf.accounting import HEADER_BYTES, byte_accounting
from bytesup.gguf.dequant import dequantize
from bytesup.gguf.errors import (
    GGUFFormatError,
    TensorNotFoundError,
    UnsupportedTypeError,
    tensor_field,
)
from bytesup.gguf.numbers import NonFiniteWeightsError, check_finite
from bytesup.gguf.split import Split, open_parts, read_split
from bytesup.run.files import release_mapped_pages

__all__ = [  # the errors and printable live below; importing them from here still works
    "GGUFFile", "GGUFFormatError", "HEADER_BYTES", "NonFiniteWeightsError", "TensorInfo", "TensorNotFoundError",
    "UnsupportedTypeError", "gguf_to_numpy_shape", "numpy_to_gguf_shape", "printable",
]  # fmt: skip

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)  # v1 used 32-bit counts; v2 and v3 share one little-endian layout
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_NESTING = 8

# Metadata value types: id -> (name, struct format, smallest encoded size in bytes).
# STRING is at least its 8-byte length; ARRAY at least its element type and count.
VALUE_TYPES: dict[int, tuple[str, str | None, int]] = {
    0: ("UINT8", "<B", 1),
    1: ("INT8", "<b", 1),
    2: ("UINT16", "<H", 2),
    3: ("INT16", "<h", 2),
    4: ("UINT32", "<I", 4),
    5: ("INT32", "<i", 4),
    6: ("FLOAT32", "<f", 4),
    7: ("BOOL", "<B", 1),
    8: ("STRING", None, 8),
    9: ("ARRAY", None, 12),
    10: ("UINT64", "<Q", 8),
    11: ("INT64", "<q", 8),
    12: ("FLOAT64", "<d", 8),
}
_STRING, _ARRAY, _BOOL = 8, 9, 7
_ARRAY_DTYPES = {
    0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4",
    6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8", 12: "<f8",
}  # fmt: skip


def gguf_to_numpy_shape(dims) -> tuple[int, ...]:
    """THE place where GGUF dimensions become a numpy shape.

    GGUF (like ggml) lists dimensions innermost first: ne[0] is the length of a row,
    the axis along which bytes are contiguous and blocks are quantized. numpy lists
    them outermost first. So GGUF dims [4096, 11008] are an 11008 x 4096 matrix:
    11008 rows of 4096 weights, numpy shape (11008, 4096). Reverse, nothing more.
    """
    return tuple(int(d) for d in reversed(tuple(dims)))


def numpy_to_gguf_shape(shape) -> tuple[int, ...]:
    """Inverse of `gguf_to_numpy_shape` (numpy shape -> GGUF dims, innermost first)."""
    return tuple(int(d) for d in reversed(tuple(shape)))


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the file describes it.

    shape_gguf is the file's order (innermost first); shape is numpy order (see
    `gguf_to_numpy_shape`). offset is absolute in the file that holds the tensor (part
    `part` of a split model, 0 otherwise: GGUFFile.file_of names it); relative_offset
    is from the start of that file's data section, as stored.
    """

    name: str
    ggml_type: int
    type_name: str
    shape_gguf: tuple[int, ...]
    shape: tuple[int, ...]
    offset: int
    n_bytes: int
    n_elements: int
    relative_offset: int = 0
    part: int = 0


class _Cursor:
    """A position in the mapped file; every read checks the bytes that remain first."""

    def __init__(self, buf, size: int, path: Path):
        self.buf, self.size, self.path, self.pos = buf, size, path, 0

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def fail(self, what: str, *, at: int | None = None, field: str | None = None):
        raise GGUFFormatError(self.path, what, offset=self.pos if at is None else at, field=field)

    def need(self, n: int, field: str) -> None:
        if n > self.size - self.pos:
            self.fail(f"needs {n} bytes but the file ends after {self.size - self.pos} (truncated?)", field=field)

    def unpack(self, fmt: str, size: int, field: str):
        self.need(size, field)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def u32(self, field: str) -> int:
        return self.unpack("<I", 4, field)

    def u64(self, field: str) -> int:
        return self.unpack("<Q", 8, field)

    def string(self, field: str, *, strict: bool) -> str:
        at = self.pos
        n = self.u64(field)
        if n > self.size - self.pos:
            left = self.size - self.pos
            self.fail(f"string length {n} exceeds the {left} bytes left in the file", at=at, field=field)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return _decode(raw, self, at, field, strict)


def _decode(raw: bytes, cur: _Cursor, at: int, field: str, strict: bool) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if strict:
            cur.fail(f"is not valid UTF-8 ({err.reason} at string byte {err.start})", at=at, field=field)
        # Values: keep going, but say so; backslashreplace keeps the result printable and JSON-safe.
        log.warning("%s: %s at byte %d: invalid UTF-8, bad bytes shown as \\xNN", printable(str(cur.path)),
                    printable(field), at)  # fmt: skip
        return raw.decode("utf-8", errors="backslashreplace")


class GGUFFile:
    """A GGUF file, parsed and validated on open; tensor bytes stay on disk until asked for.

        with GGUFFile("model.gguf") as f:
            f.metadata["llama.embedding_length"]     # 576
            f.tensor("token_embd.weight").shape      # (49152, 576), numpy order
            f.load("blk.0.attn_q.weight")            # float32 array, dequantized

    Usable without `with` too; arrays from raw() stay valid after close().

    A split model opened on its first part is one model: `tensors` lists every part's, raw() and
    load() read the part that holds the tensor, file_size and byte_accounting() cover all parts,
    and `parts` lists their paths (just `path` for a file of one part). parts=False reads one
    file of a split model on its own. partial=True reads a file whose tensor data are cut short
    (an unfinished download): `missing_bytes` says how much is missing, `incomplete` which
    tensors, and raw()/load() refuse only those.
    """

    magic = GGUF_MAGIC

    def __init__(self, path: str | os.PathLike, *, partial: bool = False, parts: bool = True):
        self.path = Path(path)
        self.partial = partial
        self._mm: mmap.mmap | None = None
        self.metadata: dict[str, Any] = {}
        self.metadata_types: dict[str, str] = {}
        self.metadata_offsets: dict[str, int] = {}  # key -> byte where its record starts
        self.tensors: list[TensorInfo] = []
        self._by_name: dict[str, TensorInfo] = {}
        self._finite: set[str] = set()  # tensors already checked for NaN and infinity
        self._checked_upto: dict[str, int] = {}  # ... and how far a check piece by piece has come
        self._files: list[GGUFFile] = [self]  # the parts, in order (this file is the first)

        # FileNotFoundError, IsADirectoryError, PermissionError propagate as OSError.
        if not stat.S_ISREG(os.stat(self.path).st_mode):  # before open(): a FIFO would block
            raise GGUFFormatError(self.path, "not a regular file", offset=0)
        with open(self.path, "rb") as fh:
            self.file_size = os.fstat(fh.fileno()).st_size
            head = fh.read(4)
            if len(head) == 4 and head != GGUF_MAGIC:
                raise GGUFFormatError(
                    self.path, f"not a GGUF file: magic is {head!r}, expected {GGUF_MAGIC!r}", offset=0
                )
            if self.file_size < HEADER_BYTES:
                what = "file is empty" if self.file_size == 0 else f"file is only {self.file_size} bytes"
                raise GGUFFormatError(self.path, f"{what}; a GGUF header needs {HEADER_BYTES} bytes", offset=0)
            self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.own_size = self.file_size  # this file's bytes; file_size becomes the sum over the parts
        try:
            self._parse(_Cursor(self._mm, self.file_size, self.path))
            self.split = read_split(self.path, self.metadata, self.metadata_types, self.metadata_offsets)
            if parts and self.split is not None and self.split.count > 1:
                self._open_parts(self.split)
        except BaseException:
            self.close()
            raise

    # -- parsing -----------------------------------------------------------------------

    def _parse(self, cur: _Cursor) -> None:
        magic = cur.buf[0:4]
        if magic != GGUF_MAGIC:
            cur.fail(f"not a GGUF file: magic is {magic!r}, expected {GGUF_MAGIC!r}", at=0)
        cur.pos = 4
        version = cur.u32("version")
        if version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in SUPPORTED_VERSIONS:
                cur.fail(f"big-endian GGUF (version {swapped}) is not supported", at=4, field="version")
            cur.fail(f"unsupported GGUF version {version} (this reader reads versions 2 and 3)", at=4, field="version")
        self.version = version
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        # Smallest possible records: a metadata entry is 13 bytes (empty key, type, 1-byte
        # value); a tensor info is 24 (empty name, n_dims, type, offset).
        if n_kv * 13 > cur.remaining:
            cur.fail(f"metadata count {n_kv} cannot fit in the {cur.remaining} bytes after the header", at=16)
        if n_tensors * 24 + n_kv * 13 > cur.remaining:
            cur.fail(f"tensor count {n_tensors} cannot fit in the {cur.remaining} bytes after the header", at=8)
        self.tensor_count, self.metadata_count = n_tensors, n_kv

        for i in range(n_kv):
            start = cur.pos
            key = cur.string(f"metadata key #{i}", strict=True)
            if key in self.metadata:
                cur.fail(f"duplicate metadata key {quote(key)}", at=start)
            field = f"metadata {quote(key)}"
            vtype = cur.u32(f"{field} value type")
            value, type_name = self._read_value(cur, vtype, field, depth=0, type_at=cur.pos - 4)
            self.metadata[key] = value
            self.metadata_types[key] = type_name
            self.metadata_offsets[key] = start
        self.metadata_end = cur.pos

        self.alignment = self._alignment(cur)

        infos = []
        for i in range(n_tensors):
            infos.append(self._read_tensor_info(cur, i))
        self.tensor_infos_end = cur.pos
        self.data_offset = -(-cur.pos // self.alignment) * self.alignment

        ends = [self.data_offset + rel + n_bytes for _, _, _, _, _, n_bytes, rel, _ in infos]
        self.missing_bytes = max(0, max(ends, default=0) - self.file_size)  # tensor data the file lacks
        self.incomplete = []  # tensors whose bytes are not all in the file (partial=True only)
        for (name, ggml_type, type_name, dims, n_el, n_bytes, rel, rel_at), end in zip(infos, ends, strict=True):
            start = self.data_offset + rel
            if end > self.file_size:
                if not self.partial:
                    cur.fail(
                        f"data [{start}, {end}) runs past the end of the file ({self.file_size} bytes; the tensor"
                        f" data lack {self.missing_bytes:,} bytes: an unfinished download? `bytesup inspect`"
                        " reads what it holds)",
                        at=rel_at,
                        field=tensor_field(name),
                    )
                self.incomplete.append(name)
            info = TensorInfo(
                name=name,
                ggml_type=ggml_type,
                type_name=type_name,
                shape_gguf=dims,
                shape=gguf_to_numpy_shape(dims),
                offset=start,
                n_bytes=n_bytes,
                n_elements=n_el,
                relative_offset=rel,
            )
            self.tensors.append(info)
            self._by_name[name] = info
        self._check_overlaps(cur)

    def _read_value(self, cur: _Cursor, vtype: int, field: str, depth: int, type_at: int):
        if vtype not in VALUE_TYPES:
            cur.fail(f"unknown value type {vtype} (valid: 0-12)", at=type_at, field=field)
        name, fmt, size = VALUE_TYPES[vtype]
        if vtype == _STRING:
            return cur.string(field, strict=False), name
        if vtype == _ARRAY:
            return self._read_array(cur, field, depth)
        at = cur.pos
        value = cur.unpack(fmt, size, field)
        if vtype == _BOOL:
            if value > 1:
                cur.fail(f"bool byte is {value}, must be 0 or 1", at=at, field=field)
            value = bool(value)
        return value, name

    def _read_array(self, cur: _Cursor, field: str, depth: int):
        if depth >= MAX_ARRAY_NESTING:
            cur.fail(f"arrays nested deeper than {MAX_ARRAY_NESTING}", field=field)
        type_at = cur.pos
        etype = cur.u32(f"{field} array element type")
        if etype not in VALUE_TYPES:
            cur.fail(f"unknown array element type {etype} (valid: 0-12)", at=type_at, field=field)
        ename, _, esize = VALUE_TYPES[etype]
        count_at = cur.pos
        count = cur.u64(f"{field} array count")
        if count * esize > cur.remaining:
            cur.fail(
                f"array of {count} {ename} needs at least {count * esize} bytes but {cur.remaining} remain",
                at=count_at,
                field=field,
            )
        if etype == _STRING:
            values = self._read_strings(cur, count, field)
        elif etype == _ARRAY:
            values = []
            for j in range(count):
                item, _ = self._read_array(cur, f"{field}[{j}]", depth + 1)
                values.append(item)
        elif count == 0:
            values = []
        else:
            arr = np.frombuffer(cur.buf, dtype=_ARRAY_DTYPES[etype], count=count, offset=cur.pos)
            if etype == _BOOL:
                if arr.max() > 1:
                    bad = int(np.argmax(arr > 1))
                    cur.fail(f"bool byte is {arr[bad]}, must be 0 or 1", at=cur.pos + bad, field=f"{field}[{bad}]")
                values = arr.astype(bool).tolist()
            else:
                values = arr.tolist()
            del arr  # release the view on the map
            cur.pos += count * esize
        return values, f"ARRAY[{ename}]"

    @staticmethod
    def _read_strings(cur: _Cursor, count: int, field: str) -> list[str]:
        # The vocabulary is 49152 strings: the loop is written out with locals for speed.
        buf, size, pos, unpack_from = cur.buf, cur.size, cur.pos, struct.unpack_from
        out = []
        append = out.append
        bad = []  # (index, byte) of strings that are not valid UTF-8
        for j in range(count):
            if pos + 8 > size:
                cur.pos = pos
                cur.fail("string length runs past the end of the file", field=f"{field}[{j}]")
            (n,) = unpack_from("<Q", buf, pos)
            if n > size - pos - 8:
                cur.fail(f"string length {n} exceeds the {size - pos - 8} bytes left", at=pos, field=f"{field}[{j}]")
            raw = buf[pos + 8 : pos + 8 + n]
            try:
                append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                append(raw.decode("utf-8", errors="backslashreplace"))
                bad.append((j, pos))
            pos += 8 + n
        cur.pos = pos
        if bad:
            log.warning("%s: %s: %d strings are not valid UTF-8 (first: [%d] at byte %d); bad bytes shown as \\xNN",
                        printable(str(cur.path)), printable(field), len(bad), bad[0][0], bad[0][1])  # fmt: skip
        return out

    def _alignment(self, cur: _Cursor) -> int:
        key = "general.alignment"
        if key not in self.metadata:
            return DEFAULT_ALIGNMENT
        at, value = self.metadata_offsets[key], self.metadata[key]
        if self.metadata_types[key] != "UINT32":
            cur.fail(f"must be UINT32, found {self.metadata_types[key]}", at=at, field=f"metadata {quote(key)}")
        if value == 0 or value & (value - 1):
            cur.fail(f"alignment {value} is not a power of two", at=at, field=f"metadata {quote(key)}")
        return value

    def _read_tensor_info(self, cur: _Cursor, i: int):
        start = cur.pos
        name = cur.string(f"tensor #{i} name", strict=True)
        if name in self._by_name:
            cur.fail(f"duplicate tensor name {quote(name)}", at=start)
        self._by_name[name] = None  # reserved; filled in once the data is checked
        field = tensor_field(name)
        n_dims_at = cur.pos
        n_dims = cur.u32(f"{field} n_dims")
        if n_dims > MAX_DIMS:
            cur.fail(f"{n_dims} dimensions, at most {MAX_DIMS} allowed", at=n_dims_at, field=field)
        dims = []
        for d in range(n_dims):
            at = cur.pos
            dim = cur.u64(f"{field} dim {d}")
            if dim >= 2**63:
                cur.fail(f"dimension {d} is {dim}, larger than int64", at=at, field=field)
            dims.append(dim)
        type_at = cur.pos
        ggml_type = cur.u32(f"{field} ggml type")
        try:
            qtype = GGMLQuantizationType(ggml_type)
            block_size, _ = sizes.block_shape(qtype.name)
        except ValueError:  # no such type (QuantSizeError is a ValueError too: no block size)
            cur.fail(f"unknown ggml type {ggml_type}", at=type_at, field=field)
        row = dims[0] if dims else 1
        if row % block_size:
            cur.fail(
                f"innermost dimension {row} is not a multiple of the {qtype.name} block size {block_size}",
                at=n_dims_at,
                field=field,
            )
        n_elements = 1
        for dim in dims:
            n_elements *= dim
        n_bytes = sizes.type_bytes(qtype.name, n_elements)
        rel_at = cur.pos
        rel = cur.u64(f"{field} data offset")
        if rel % self.alignment:
            cur.fail(f"data offset {rel} is not a multiple of the alignment {self.alignment}", at=rel_at, field=field)
        if n_bytes > self.file_size and not self.partial:  # (a partial file's tensors may be cut off)
            cur.fail(f"{n_elements} {qtype.name} elements need {n_bytes} bytes, more than the whole file", at=n_dims_at,
                     field=field)  # fmt: skip
        return name, ggml_type, qtype.name, tuple(dims), n_elements, n_bytes, rel, rel_at

    def _check_overlaps(self, cur: _Cursor) -> None:
        previous = None
        for info in sorted((t for t in self.tensors if t.n_bytes), key=lambda t: t.offset):
            if previous is not None and info.offset < previous.offset + previous.n_bytes:
                cur.fail(
                    f"data [{info.offset}, {info.offset + info.n_bytes}) overlaps tensor {quote(previous.name)}"
                    f" [{previous.offset}, {previous.offset + previous.n_bytes})",
                    at=info.offset,
                    field=tensor_field(info.name),
                )
            previous = info

    def _open_parts(self, split: Split) -> None:
        """Open parts 2..n beside this first part and make their tensors this file's (see bytesup.gguf.split)."""
        self._files += open_parts(self.path, split, lambda path: GGUFFile(path, partial=self.partial, parts=False))
        for k, part in enumerate(self._files[1:], start=1):
            for info in part.tensors:
                if info.name in self._by_name:
                    raise GGUFFormatError(part.path, f"duplicate tensor name {quote(info.name)} (also in an earlier"
                                          " part)", offset=info.offset)  # fmt: skip
                self._by_name[info.name] = dataclasses.replace(info, part=k)
                self.tensors.append(self._by_name[info.name])
            self.incomplete += part.incomplete
            self.missing_bytes += part.missing_bytes
        if len(self.tensors) != split.tensors:
            raise GGUFFormatError(self.path, f"the {split.count} parts hold {len(self.tensors)} tensors, split.tensors"
                                  f".count says {split.tensors}: a part is of another model; fetch them again")  # fmt: skip
        self.file_size = sum(f.own_size for f in self._files)

    # -- use ---------------------------------------------------------------------------

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release the maps. Arrays from raw() keep their own reference and stay valid."""
        for f in self._files:
            mm, f._mm = f._mm, None
            if mm is not None:
                try:
                    mm.close()
                except BufferError:  # raw() views still exist: the map lives until they go
                    pass

    def __repr__(self) -> str:
        return (f"GGUFFile({str(self.path)!r}, version={self.version}, tensors={len(self.tensors)},"
                f" metadata={len(self.metadata)}, parts={len(self._files)})")  # fmt: skip

    @property
    def parts(self) -> list[Path]:
        """The files of the model, in order: [path] for a file of one part."""
        return [f.path for f in self._files]

    @property
    def part_files(self) -> list[GGUFFile]:
        """The GGUFFile of each part, in order (this one first; each of the others holds only its own tensors)."""
        return list(self._files)

    @property
    def tensor_names(self) -> list[str]:
        return [t.name for t in self.tensors]

    def tensor(self, name: str) -> TensorInfo:
        info = self._by_name.get(name)
        if info is None:
            close = difflib.get_close_matches(name, self._by_name, n=3)
            hint = f"; did you mean {', '.join(map(quote, close))}?" if close else ""
            raise TensorNotFoundError(f"{printable(str(self.path))}: no tensor named {quote(name)}{hint}")
        return info

    def file_of(self, name: str) -> Path:
        """The file holding tensor `name` (its part of a split model); TensorInfo.offset is into it."""
        return self._files[self.tensor(name).part].path

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a read-only uint8 array over the map (no copy)."""
        info = self.tensor(name)
        f = self._files[info.part]
        if f._mm is None:
            raise ValueError(f"{printable(str(self.path))}: file is closed")
        if name in self.incomplete:
            raise GGUFFormatError(f.path, f"data [{info.offset}, {info.offset + info.n_bytes}) are not all in this"
                                  f" partial file ({f.own_size:,} bytes)", offset=info.offset, field=tensor_field(name))  # fmt: skip
        if info.n_bytes == 0:
            empty = np.empty(0, dtype=np.uint8)
            empty.flags.writeable = False
            return empty
        return np.frombuffer(f._mm, dtype=np.uint8, count=info.n_bytes, offset=info.offset)

    def release_pages(self, name: str) -> None:
        """Tell the kernel this process is done with tensor `name`'s pages of the map (see run.files)."""
        info = self.tensor(name)
        release_mapped_pages(self._files[info.part]._mm, info.offset, info.n_bytes)

    def load(self, name: str) -> np.ndarray:
        """The tensor as float32 in numpy shape, dequantized (see bytesup.gguf.dequant), checked finite."""
        info = self.tensor(name)
        try:
            values = dequantize(self.raw(name), info.type_name, info.shape)
        except NotImplementedError:
            raise UnsupportedTypeError(
                self.path,
                name,
                f"ggml type {info.ggml_type} ({info.type_name}) cannot be dequantized by bytesup or gguf.quants",
                offset=info.offset,
            ) from None
        return self.check_finite(name, values)

    def check_finite(self, name: str, values: np.ndarray, *, start: int | None = 0) -> np.ndarray:
        """`values`, tensor `name` dequantized from its element `start` on (None: rows picked here and
        there), when all are finite numbers; else one line naming the tensor (bytesup.gguf.numbers). A
        tensor checked whole, or piece by piece from its first element to its last, is not checked again."""
        if name in self._finite:
            return values
        check_finite(self.file_of(name), self.tensor(name), values, start=start)
        if start is not None and start == self._checked_upto.get(name, 0):
            upto = start + np.size(values)
            if upto >= self.tensor(name).n_elements:
                self._finite.add(name)
            self._checked_upto[name] = upto
        return values

    def byte_accounting(self) -> dict:
        """Where every byte of the file goes (bytesup.gguf.accounting); the five parts sum to file_size."""
        return byte_accounting(self)

"""Extract a GGUF's metadata and chosen tensors into plain files the lessons read.

    extract("model.gguf", "results/m/gguf", ["token_embd.weight", "blk.0.*", "?output.weight"])

writes, into out_dir (or wherever the caller's explicit paths say):

    metadata.json      every metadata key in full (the vocabulary too) with its GGUF type
    tensors.csv        every tensor in the file: name, type, shape (numpy order), offset, bytes, elements
    tensors/<name>.npy the selected tensors, dequantized to float32, numpy order (a chunk of rows at
                       a time: the job's memory does not grow with the tensor)
    extract.json       the index, written last: per tensor its .npy (relative path), type,
                       shape, sha256, and whether our hand dequantizer or gguf.quants made it

Selecting tensors. Patterns are fnmatch patterns matched against whole names
('blk.0.*', 'blk.*.ffn_down.weight'). Each pattern must match at least one tensor,
so a typo fails loudly, unless it is optional: prefix it with '?' ('?output.weight'
is absent in models whose output projection is tied to token_embd), or pass it in
`optional=`. The '?' prefix is only ever the marker: '??lk.0.*' is an optional
pattern starting with a one-character wildcard. patterns=None selects every tensor.

Every file is written to a temporary name in the same directory, then renamed, so a
crash never leaves a half-written file under the final name.
"""

from __future__ import annotations

import csv
import errno
import fnmatch
import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bytesup.errors import BytesupError, printable, quote
from bytesup.gguf.dequant import dequantize, dequantizer_used
from bytesup.gguf.file import GGUFFile, UnsupportedTypeError
from bytesup.gguf.sizes import shape_text
from bytesup.run.files import plain, sha256_file

log = logging.getLogger(__name__)

INDEX_FORMAT = "bytesup.extract/1"
METADATA_FORMAT = "bytesup.metadata/1"
OPTIONAL_PREFIX = "?"


class TensorSelectionError(BytesupError, ValueError):
    """A required pattern matched no tensor (one line: the file, the pattern, close names)."""


def split_patterns(patterns: Iterable[str], optional: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(required, optional) pattern lists; a leading '?' moves a pattern to optional."""
    required, opt = [], list(optional)
    for pattern in patterns:
        if pattern.startswith(OPTIONAL_PREFIX):
            opt.append(pattern[len(OPTIONAL_PREFIX) :])
        else:
            required.append(pattern)
    return required, opt


def select_tensors(
    names: Iterable[str], patterns: Iterable[str] | None, optional: Iterable[str] = (), *, source: str = ""
) -> list[str]:
    """Names matching any pattern, in file order, each once.

    A required pattern that matches nothing raises TensorSelectionError; an optional one
    ('?name' or in `optional`) may match nothing. patterns=None means every tensor.
    """
    names = list(names)
    if patterns is None:
        return names
    if isinstance(patterns, str):
        raise TypeError("patterns must be a list of strings, not one string")
    required, opt = split_patterns(patterns, optional)
    chosen: set[str] = set()
    for pattern in required:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            where = f"{printable(source)}: " if source else ""
            stem = re.split(r"[*?\[]", pattern)[0]
            similar = [n for n in names if stem and n.startswith(stem)][:3] or names[:3]
            raise TensorSelectionError(
                f"{where}pattern {quote(pattern)} matches no tensor (e.g. {', '.join(map(quote, similar))});"
                f" prefix it with '?' if it may be absent"
            )
        chosen.update(hits)
    for pattern in opt:
        chosen.update(n for n in names if fnmatch.fnmatchcase(n, pattern))
    return [n for n in names if n in chosen]


_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def tensor_file_name(name: str) -> str:
    """A file name for a tensor's .npy. Ordinary names ('blk.0.attn_q.weight') are kept as
    they are; any other character is %XX-escaped (so '/', '..', control characters can't
    escape the directory), and very long names are cut and given a hash suffix."""
    if _SAFE_NAME.fullmatch(name):
        stem = name
    else:
        stem = "".join(
            c if (c.isascii() and (c.isalnum() or c in "._-")) else "".join(f"%{b:02X}" for b in c.encode())
            for c in name
        )
        if stem.startswith("."):
            stem = "%2E" + stem[1:]
        stem = stem or "%"  # the empty name; escapes are always %XX, so this is unique
    if len(stem) > 200:
        stem = stem[:180] + "~" + hashlib.sha256(name.encode()).hexdigest()[:16]
    return stem + ".npy"


def _atomic_write(path: Path, write) -> None:
    """Call write(binary file) on a temporary file next to `path`, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class _HashingWriter:
    """A write-only file that hashes what passes through it."""

    def __init__(self, fh):
        self.fh, self.sha256 = fh, hashlib.sha256()

    def write(self, data) -> int:
        self.sha256.update(data)
        return self.fh.write(data)


def _save_npy(path: Path, array: np.ndarray) -> str:
    """Save `array` as .npy atomically; return the sha256 of the file's bytes (hashed while writing)."""
    holder = {}

    def write(fh):
        tee = _HashingWriter(fh)
        np.save(tee, array, allow_pickle=False)
        holder["sha256"] = tee.sha256.hexdigest()

    _atomic_write(path, write)
    return holder["sha256"]


CHUNK_BYTES = 64 * 2**20  # float32 bytes of rows dequantized at a time


def _save_tensor_npy(path: Path, f: GGUFFile, info, chunk_bytes: int = CHUNK_BYTES) -> str:
    """Dequantize one tensor into a .npy, a chunk of rows at a time; return the file's sha256.

    The same bytes np.save would write (its version 1.0 header, then the float32 rows in C
    order), but memory holds one chunk of rows, not the tensor: the quantized bytes are read
    with plain reads rather than through the memory map, so they do not stay resident either.
    Every chunk is checked finite (a NaN or infinite weight is one line naming the tensor).
    """
    shape = tuple(info.shape)
    row_elements = math.prod(shape[1:]) if len(shape) > 1 else 0
    if not row_elements or info.n_elements * 4 <= chunk_bytes:
        return _save_npy(path, f.load(info.name))
    rows_per_chunk = max(1, chunk_bytes // (4 * row_elements))
    row_bytes = info.n_bytes // shape[0]
    holder = {}

    def write(fh):
        tee = _HashingWriter(fh)
        np.lib.format.write_array_header_1_0(tee, {"descr": "<f4", "fortran_order": False, "shape": shape})
        with open(f.file_of(info.name), "rb") as src:  # the part holding it, for a split model
            for start in range(0, shape[0], rows_per_chunk):
                n = min(rows_per_chunk, shape[0] - start)
                raw = np.frombuffer(os.pread(src.fileno(), n * row_bytes, info.offset + start * row_bytes), np.uint8)
                try:
                    rows = dequantize(raw, info.type_name, (n, *shape[1:]))
                except NotImplementedError:
                    raise UnsupportedTypeError(
                        f.path,
                        info.name,
                        f"ggml type {info.ggml_type} ({info.type_name}) "
                        "cannot be dequantized by bytesup or gguf.quants",
                        offset=info.offset,
                    ) from None
                f.check_finite(info.name, rows, start=start * row_elements)
                tee.write(np.ascontiguousarray(rows, "<f4").data)
        holder["sha256"] = tee.sha256.hexdigest()

    _atomic_write(path, write)
    return holder["sha256"]


def _write_json(path: Path, obj: Any) -> None:
    text = json.dumps(obj, ensure_ascii=False, indent=1, allow_nan=False) + "\n"
    _atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))


class NoSpaceError(BytesupError, OSError):
    """The disk cannot hold the extracted tensors; the message is one line with the space needed."""


def _free_mb(folder: Path) -> float:
    return shutil.disk_usage(folder).free / 2**20


def _check_space(tensors_dir: Path, total: int) -> None:
    """Refuse before writing when the float32 tensors cannot fit (the .npy files already there are replaced)."""
    have = sum(p.stat().st_size for p in tensors_dir.glob("*.npy"))
    need = total - have
    if need > shutil.disk_usage(tensors_dir).free:
        raise NoSpaceError(
            f"extract: {tensors_dir} has {_free_mb(tensors_dir):.1f} MiB free, the tensors need "
            f"{need / 2**20:.1f} MiB more; free some space and run again"
        )


def part_files(f: GGUFFile) -> dict:
    """{"parts": [{file, size}, ...]} for a split model (file_size is their sum), {} for one file."""
    if len(f.parts) == 1:
        return {}
    return {"parts": [{"file": p.name, "size": p.stat().st_size} for p in f.parts]}


def metadata_document(f: GGUFFile) -> dict:
    """What metadata.json holds: the file's header facts and every key with value and type.
    (data_offset is the first part's, for a split model; tensors.csv says which part holds a tensor.)"""
    return {
        "format": METADATA_FORMAT,
        "gguf": {
            "file": f.path.name,
            "file_size": f.file_size,
            "version": f.version,
            "alignment": f.alignment,
            "data_offset": f.data_offset,
            "tensor_count": len(f.tensors),
            "metadata_count": len(f.metadata),
            **part_files(f),
        },
        "metadata": plain(f.metadata, nonfinite="text"),
        "types": dict(f.metadata_types),
    }


def tensors_csv_text(f: GGUFFile) -> str:
    """The tensor table; a split model's has a last column, part (1 to n: the file holding it, offset into it)."""
    split = len(f.parts) > 1
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["name", "type", "shape", "offset", "bytes", "elements"] + ["part"] * split)
    for t in f.tensors:
        writer.writerow([t.name, t.type_name, shape_text(t.shape), t.offset, t.n_bytes, t.n_elements]
                        + [t.part + 1] * split)  # fmt: skip
    return buf.getvalue()


def extract(
    gguf_path: str | os.PathLike,
    out_dir: str | os.PathLike | None,
    patterns: Iterable[str] | None,
    *,
    optional: Iterable[str] = (),
    metadata_path: str | os.PathLike | None = None,
    tensors_csv_path: str | os.PathLike | None = None,
    index_path: str | os.PathLike | None = None,
    tensors_dir: str | os.PathLike | None = None,
    gguf_sha256: str | None = None,
    check: Callable[[GGUFFile], None] | None = None,
) -> dict:
    """Write metadata.json, tensors.csv, tensors/<name>.npy and extract.json; return the index.

    Explicit paths (as a Snakemake rule gives them) override the defaults under out_dir.
    File names in the index are relative to the index's directory. gguf_sha256: pass it
    when already known (e.g. verified on fetch) to skip hashing the model again (a split
    model's is the sha256 of its parts' bytes joined in order, as the fetch records it).
    check(f), when given, is called on the open file before anything is written (the workflow's
    script checks the architecture's numbers there: bytesup.model.arch.check_hyperparameters).
    """
    if out_dir is None and None in (metadata_path, tensors_csv_path, index_path, tensors_dir):
        raise ValueError("give out_dir, or all four of metadata_path, tensors_csv_path, index_path, tensors_dir")
    base = Path(out_dir) if out_dir is not None else None
    metadata_path = Path(metadata_path) if metadata_path else base / "metadata.json"
    tensors_csv_path = Path(tensors_csv_path) if tensors_csv_path else base / "tensors.csv"
    index_path = Path(index_path) if index_path else base / "extract.json"
    tensors_dir = Path(tensors_dir) if tensors_dir else base / "tensors"
    patterns = None if patterns is None else list(patterns)
    optional = list(optional)

    with GGUFFile(gguf_path) as f:
        if check is not None:
            check(f)
        selected = select_tensors(f.tensor_names, patterns, optional, source=str(gguf_path))
        total = sum(f.tensor(n).n_elements for n in selected) * 4
        log.info("%s: extracting %d of %d tensors (%.1f MiB as float32)", f.path.name, len(selected),
                 len(f.tensors), total / 2**20)  # fmt: skip
        tensors_dir.mkdir(parents=True, exist_ok=True)
        _check_space(tensors_dir, total)
        index_dir = index_path.parent
        entries: dict[str, dict] = {}
        files_written = set()
        for i, name in enumerate(selected, 1):
            info = f.tensor(name)
            npy = tensors_dir / tensor_file_name(name)
            if npy.name in files_written:  # two names escaped to one file: impossible, but check
                raise RuntimeError(f"tensor file name clash for {name!r}")
            files_written.add(npy.name)
            try:
                digest = _save_tensor_npy(npy, f, info)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                raise NoSpaceError(
                    f"extract: no space left writing {npy} ({_free_mb(tensors_dir):.1f} MiB free; "
                    f"the tensors need {total / 2**20:.1f} MiB in all); free some space and run again"
                ) from None
            how = dequantizer_used(info.type_name)
            entries[name] = {
                "file": os.path.relpath(npy, index_dir),
                "type": info.type_name,
                "shape": list(info.shape),
                "dtype": "float32",
                "elements": info.n_elements,
                "bytes_in_gguf": info.n_bytes,
                "offset": info.offset,
                **({"part": info.part + 1} if len(f.parts) > 1 else {}),
                "sha256": digest,
                "dequantizer": how,
            }
            log.info("[%d/%d] %s %s %s: %s bytes -> %s (%s dequantizer)", i, len(selected), printable(name),
                     info.type_name, shape_text(info.shape), f"{info.n_bytes:,}", npy.name, how)  # fmt: skip
        stale = sorted(p.name for p in tensors_dir.glob("*.npy") if p.name not in files_written)
        if stale:
            log.warning("%s holds %d .npy files not in this extraction (e.g. %s); extract.json lists the current ones",
                        tensors_dir, len(stale), stale[0])  # fmt: skip

        _atomic_write(tensors_csv_path, lambda fh: fh.write(tensors_csv_text(f).encode("utf-8")))
        _write_json(metadata_path, metadata_document(f))
        index = {
            "format": INDEX_FORMAT,
            "gguf": {
                "file": f.path.name,
                "file_size": f.file_size,
                "sha256": gguf_sha256 or sha256_file(f.parts),
                **part_files(f),
            },
            "patterns": patterns,
            "optional": optional,
            "metadata": os.path.relpath(metadata_path, index_dir),
            "tensors_csv": os.path.relpath(tensors_csv_path, index_dir),
            "tensors": entries,
        }
    _write_json(index_path, index)
    log.info("wrote %s (%d tensors)", index_path, len(entries))
    return index

"""Facts every stage needs, in one place: a file's sha256, a value made safe for strict JSON, letting go
of a memory map's pages, and where the parts of a split model lie (bytesup.gguf.split reads them)."""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np


def sha256_file(path: str | os.PathLike | Sequence[str | os.PathLike], chunk: int = 1 << 20) -> str:
    """The file's sha256 as 64 hex digits, read in 1 MiB chunks (memory does not grow with the file).
    A list of paths (a split model's parts) hashes their bytes joined in order, as `cat` would."""
    h = hashlib.sha256()
    for one in [path] if isinstance(path, (str, os.PathLike)) else path:
        with open(one, "rb") as fh:
            while block := fh.read(chunk):
                h.update(block)
    return h.hexdigest()


def release_mapped_pages(mm, start: int = 0, length: int = 0) -> None:
    """Tell the kernel this process is done with pages of a memory map (from `start`, `length` bytes;
    0: to the end). They stay in the page cache, but no longer count as the job's resident memory.
    A no-op for a missing map or where madvise is unavailable."""
    if mm is None or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    if length:
        length += start % mmap.PAGESIZE  # madvise takes a page-aligned start
    start -= start % mmap.PAGESIZE
    try:
        mm.madvise(mmap.MADV_DONTNEED, start, length)
    except (OSError, ValueError):
        pass


NONFINITE_TEXT = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def plain(value, nonfinite: str = "null"):
    """numpy scalars and arrays as plain Python numbers and lists, mappings with string keys, so that
    json.dumps(..., allow_nan=False) takes the result. JSON has no NaN or infinity: nonfinite="null"
    writes them as null (a measurement that is not a number), "text" as "NaN", "Infinity", "-Infinity"
    (a value read from a file, kept recognisable)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v, nonfinite) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return plain(value.tolist(), nonfinite)
    if isinstance(value, (list, tuple)):
        return [plain(v, nonfinite) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isfinite(value):
            return value
        return None if nonfinite == "null" else NONFINITE_TEXT[str(value)]
    return value


# -- split models: llama.cpp's gguf-split names its parts model-00001-of-00003.gguf, ... ----------------

PART_NAME = re.compile(r"(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")


def part_name(prefix: str, k: int, count: int) -> str:
    """The name of part k (1-based) of `count`: 'model-00002-of-00003.gguf'."""
    return f"{prefix}-{k:05d}-of-{count:05d}.gguf"


def part_paths(first: Path, count: int) -> list[Path]:
    """Every part's path, `first` first: beside it, `<prefix>-<k>-of-<count>.gguf` (k from 2), where prefix
    is first's name without its own `-00001-of-<count>.gguf` (llama.cpp's llama_split_prefix) or, for a
    first part named otherwise (resources/models/<model>.gguf, as the fetch names it), without `.gguf`."""
    first = Path(first)
    m = PART_NAME.fullmatch(first.name)
    if m and int(m["no"]) == 1 and int(m["count"]) == count:
        prefix = m["prefix"]
    else:
        prefix = first.name[: -len(".gguf")] if first.name.endswith(".gguf") else first.name
    return [first] + [first.with_name(part_name(prefix, k, count)) for k in range(2, count + 1)]


def find_parts(first: Path, count: int) -> list[Path]:
    """part_paths of `first`, or of the file it links to when its own name has no parts beside it."""
    paths = part_paths(first, count)
    if count > 1 and not paths[1].exists() and Path(first).is_symlink():
        target = Path(first).resolve()
        beside_target = part_paths(target, count)
        if beside_target[1].exists():
            return [Path(first)] + beside_target[1:]
    return paths

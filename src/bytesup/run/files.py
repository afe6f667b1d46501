"""Facts every stage needs, in one place: a file's sha256, a value made safe for strict JSON, and letting go
of a memory map's pages."""

from __future__ import annotations

import hashlib
import math
import mmap
import os
from collections.abc import Mapping

import numpy as np


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The file's sha256 as 64 hex digits, read in 1 MiB chunks (memory does not grow with the file)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
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

"""Split models, as llama.cpp's gguf-split (and gguf-py's writer) write them: one model, N GGUF files.

    model-00001-of-00003.gguf   the model's metadata + split.no 0, split.count 3, split.tensors.count T
    model-00002-of-00003.gguf   split.no 1, split.count 3, split.tensors.count T
    model-00003-of-00003.gguf   split.no 2, ...

Each part is a whole GGUF file of its own (header, metadata, tensor infos, aligned data). Only the first
holds the model's metadata ("all metadata in first split only", gguf-split.cpp); every part carries the
three split keys (split.no and split.count UINT16, split.tensors.count INT32). The first part may hold no
tensor at all (gguf-split --no-tensor-first-split). The tensors of all parts, in part order, are the
model's T tensors; bytesup.gguf.file.GGUFFile opened on the first part presents them as one table.

Where the parts lie (bytesup.run.files.part_paths, which the fetch uses too): beside the first, named
`<prefix>-<k>-of-<n>.gguf` (five digits each, k from 1), prefix being the first part's name without its
`-00001-of-<n>.gguf` (llama.cpp's llama_split_prefix) or, for a first part named otherwise
(resources/models/<model>.gguf, as the fetch names it), without `.gguf`. A first part reached through a
symlink whose own name has no parts beside it is looked up beside the file the link points to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bytesup.errors import quote
from bytesup.gguf.errors import GGUFFormatError
from bytesup.run.files import PART_NAME, find_parts, part_name, part_paths

__all__ = [  # the part naming lives in bytesup.run.files (the fetch names the parts too)
    "SPLIT_KEYS", "Split", "find_parts", "first_part_name", "open_parts", "part_name", "part_paths", "read_split",
]  # fmt: skip

SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"
SPLIT_KEYS = (SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS)
MAX_PARTS = 99_999  # five digits in the part names
INTEGER_TYPES = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64")


@dataclass(frozen=True)
class Split:
    """A file's split keys: it is part `no + 1` of `count`; the model holds `tensors` tensors in all."""

    no: int
    count: int
    tensors: int


def first_part_name(path: Path, split: Split) -> str:
    """The name of the first part of the model that the file at `path` (part split.no + 1) belongs to."""
    m = PART_NAME.fullmatch(Path(path).name)
    return part_name(m["prefix"], 1, split.count) if m else f"part 1 of {split.count}"


def open_parts(first: Path, split: Split, open_part) -> list:
    """Parts 2..n of the split model whose first part is `first`, each opened with open_part(path)
    (a GGUFFile of that one file) and checked to be that part; a missing or foreign part is one line."""
    if split.no != 0:
        raise GGUFFormatError(first, f"is part {split.no + 1} of {split.count} of a split model: open"
                              f" {first_part_name(first, split)} (its first part, which holds the metadata)")  # fmt: skip
    parts = []
    try:
        for k, path in enumerate(find_parts(first, split.count)[1:], start=1):
            if not path.is_file():
                raise GGUFFormatError(path, f"part {k + 1} of {split.count} of {Path(first).name} is missing; put it"
                                      " beside the first part (or fetch the model again)")  # fmt: skip
            parts.append(open_part(path))
            check_part(first, path, k, split, parts[-1].split)
    except BaseException:
        for part in parts:
            part.close()
        raise
    return parts


def read_split(path, metadata: dict, types: dict, offsets: dict) -> Split | None:
    """The file's split keys, checked; None for a file that is not a part of a split model."""
    present = [k for k in SPLIT_KEYS if k in metadata]
    if not present:
        return None
    for key in present:
        if types[key] not in INTEGER_TYPES:
            raise GGUFFormatError(path, f"must be an integer, found {types[key]}", offset=offsets[key],
                                  field=f"metadata {quote(key)}")  # fmt: skip
    missing = [k for k in SPLIT_KEYS if k not in metadata]
    if missing:
        raise GGUFFormatError(path, f"a part of a split model needs {', '.join(missing)} too",
                              offset=offsets[present[0]], field=f"metadata {quote(present[0])}")  # fmt: skip
    no, count, tensors = (metadata[k] for k in SPLIT_KEYS)
    if not 1 <= count <= MAX_PARTS:
        raise GGUFFormatError(path, f"split count {count} must be 1 to {MAX_PARTS}", offset=offsets[SPLIT_COUNT],
                              field=f"metadata {quote(SPLIT_COUNT)}")  # fmt: skip
    if not 0 <= no < count:
        raise GGUFFormatError(path, f"split number {no} is not a part of {count} (0 to {count - 1})",
                              offset=offsets[SPLIT_NO], field=f"metadata {quote(SPLIT_NO)}")  # fmt: skip
    if tensors < 0:
        raise GGUFFormatError(path, f"split tensor count {tensors} is negative", offset=offsets[SPLIT_TENSORS],
                              field=f"metadata {quote(SPLIT_TENSORS)}")  # fmt: skip
    return Split(no, count, tensors)


def check_part(first: Path, path: Path, k: int, split: Split, part_split: Split | None) -> None:
    """Refuse, in one line naming it, a part k (0-based) whose split keys do not say it is that part."""
    what = f"part {k + 1} of {split.count} of {Path(first).name}"
    if part_split is None:
        raise GGUFFormatError(path, f"is not a part of a split model (no split keys), yet it is named as {what}")
    if (part_split.no, part_split.count, part_split.tensors) != (k, split.count, split.tensors):
        raise GGUFFormatError(
            path,
            f"says it is part {part_split.no + 1} of {part_split.count} ({part_split.tensors} tensors), but it is"
            f" named as {what} ({split.tensors} tensors): the parts do not belong together; fetch them again",
        )

"""Where every byte of a GGUF file goes: header, metadata, tensor infos, padding and tensor data.

    byte_accounting(GGUFFile(path))   # the five parts sum to file_size exactly

A split model's figures are the sums over its parts (each has its own header, metadata and infos);
a partial file counts the tensor bytes it holds and says, apart, how many it lacks.
"""

from __future__ import annotations

HEADER_BYTES = 24  # magic 4 + version 4 + tensor count 8 + metadata count 8


def own_accounting(f) -> dict:
    """byte_accounting of one file (a part of a split model, or the whole of any other)."""
    size = f.own_size
    data_start = min(f.data_offset, size)
    tensor_data = between = 0
    end = data_start
    own = f.tensors if len(f.parts) == 1 else [t for t in f.tensors if t.part == 0]  # its own tensors
    for info in sorted(own, key=lambda t: t.offset):
        if info.n_bytes and info.offset < size:  # a partial file counts the bytes it holds
            stop = min(info.offset + info.n_bytes, size)
            between += info.offset - end
            end = stop
            tensor_data += stop - info.offset
    before = data_start - min(f.tensor_infos_end, data_start)
    parts = {"before_data": before, "between_tensors": between, "trailing": size - end}
    return {
        "header": HEADER_BYTES,
        "metadata": f.metadata_end - HEADER_BYTES,
        "tensor_infos": f.tensor_infos_end - f.metadata_end,
        "padding": sum(parts.values()),
        "tensor_data": tensor_data,
        "file_size": size,
        "padding_parts": parts,
    }


def byte_accounting(f) -> dict:
    """Where every byte of the file goes; the five parts sum to file_size exactly.

    padding is everything that is neither structure nor tensor data: the alignment
    gap before the data section, gaps between tensors, and bytes after the last one.
    padding_parts itemizes it (those three sum to padding; do not add them again).
    A split model's figures are the sums over its parts (`parts` of them, each with its own
    header); tensor_data_missing is what a partial file lacks (not part of file_size).
    """
    result = {"parts": len(f.parts), "tensor_data_missing": f.missing_bytes}
    for part in f.part_files:
        own = own_accounting(part)
        for key in ("header", "metadata", "tensor_infos", "padding", "tensor_data", "file_size"):
            result[key] = result.get(key, 0) + own[key]
        padding = result.setdefault("padding_parts", dict.fromkeys(own["padding_parts"], 0))
        for key, value in own["padding_parts"].items():
            padding[key] += value
    return result

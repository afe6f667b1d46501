"""Bytes of n weights of a ggml type: the one home of that arithmetic.

A ggml type stores its weights in blocks along a row: `block_size` weights in `type_size` bytes
(F32: 1 weight in 4 bytes; Q8_0: 32 in 34; Q4_K: 256 in 144). The numbers are gguf-py's own
(gguf.constants.GGML_QUANT_SIZES), read here and never retyped anywhere else; every count of
bytes in the package (the reader, the dequantizers, the lessons, the memory budgets) comes
from these functions.
"""

from __future__ import annotations

from math import prod

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup.errors import BytesupError


class QuantSizeError(BytesupError, ValueError):
    """An unknown ggml type name, or a number of weights that does not fill whole blocks."""


def ggml_type(type_name: str) -> GGMLQuantizationType:
    """The ggml type of that name ('Q4_K'), one that gguf-py knows the block size of."""
    try:
        qtype = GGMLQuantizationType[type_name]
    except KeyError:
        raise QuantSizeError(
            f"unknown ggml type name {type_name!r}; expected a name like F32, BF16, Q8_0, Q4_K"
        ) from None
    if qtype not in GGML_QUANT_SIZES:
        raise QuantSizeError(f"ggml type {type_name} has no block size in gguf.constants")
    return qtype


def block_shape(type_name: str) -> tuple[int, int]:
    """(weights per block, bytes per block) of a ggml type: (32, 34) for Q8_0."""
    return GGML_QUANT_SIZES[ggml_type(type_name)]


def type_bytes(type_name: str, elements: int) -> int:
    """Bytes of `elements` weights stored as `type_name` (whole blocks only)."""
    block_size, type_size = block_shape(type_name)
    if elements % block_size:
        raise QuantSizeError(f"{elements} weights do not fill whole {type_name} blocks of {block_size}")
    return elements // block_size * type_size


def tensor_bytes(type_name: str, shape) -> int:
    """Bytes of a tensor of numpy `shape` stored as `type_name`. Blocks run along a row (shape[-1]),
    so the row, not only the total, must be whole blocks."""
    block_size, _ = block_shape(type_name)
    row = shape[-1] if len(shape) else 1
    if row % block_size:
        raise QuantSizeError(f"{type_name}: row length {row} is not a multiple of the block size {block_size}")
    return type_bytes(type_name, prod(shape))


def bits_per_weight(type_name: str) -> float:
    """Bits of storage per weight: 8 x bytes per block / weights per block (Q8_0: 8.5, Q4_K: 4.5)."""
    block_size, type_size = block_shape(type_name)
    return 8 * type_size / block_size


# -- shapes as tensors.csv writes them (numpy order, outermost first) --------------------


def shape_text(shape: tuple[int, ...]) -> str:
    """(1536, 576) -> '1536x576' (numpy order); a scalar is ''."""
    return "x".join(str(d) for d in shape)


def parse_shape(shape) -> tuple[int, ...]:
    """The inverse of shape_text, as tensors.csv holds it: '49152x576' -> (49152, 576); tuples and
    lists pass through."""
    if isinstance(shape, str):
        try:
            return tuple(int(s) for s in shape.lower().split("x"))
        except ValueError:
            raise ValueError(f"tensors.csv: shape {shape!r} is not like 49152x576") from None
    return tuple(int(s) for s in shape)

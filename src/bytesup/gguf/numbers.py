"""Weights checked where they enter: a NaN or an infinity in a tensor is one line naming it.

A finite float16 scale times a quant is finite, so only a damaged or badly converted file holds them;
but one NaN in a weight makes every later number of the forward pass NaN, and the lessons would stop
on an assert or a "Probabilities contain NaN" far from the cause. GGUFFile.load, the extract stage and
the forward pass's weights (bytesup.model.weights) call `check_finite` on what they dequantize.
"""

from __future__ import annotations

import numpy as np

from bytesup.gguf import sizes
from bytesup.gguf.errors import GGUFFormatError, tensor_field


class NonFiniteWeightsError(GGUFFormatError):
    """A tensor holding NaN or infinite values (a damaged or badly converted file); `.tensor` names it."""

    def __init__(self, path, tensor: str, what: str, *, offset: int | None = None):
        self.tensor = tensor
        super().__init__(path, what, offset=offset, field=tensor_field(tensor))


def check_finite(path, info, values: np.ndarray, *, start: int | None = 0) -> np.ndarray:
    """`values` (tensor `info` dequantized, from its element `start` on; None: rows picked here and
    there) when every one is a finite number; else NonFiniteWeightsError naming the tensor, how many
    are NaN or infinite, and (start given) the byte where the block of the first one starts (`path`:
    the file holding the tensor)."""
    flat = np.asarray(values).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(flat.sum()):  # a NaN or an infinity makes the sum one: a pass without a mask
            return values
    finite = np.isfinite(flat)  # (or finite weights large enough that their sum overflowed)
    if finite.all():
        return values
    nan = int(np.isnan(flat).sum())
    inf = flat.size - nan - int(finite.sum())
    counts = " and ".join(f"{n:,} {what}" for n, what in ((nan, "NaN"), (inf, "infinite")) if n)
    offset = None
    if start is None:
        where = f"among the {flat.size:,} weights of the rows read"
    else:
        first = start + int(np.argmin(finite))
        block, _ = sizes.block_shape(info.type_name)
        offset = info.offset + sizes.type_bytes(info.type_name, first // block * block)  # where its block starts
        whole = start == 0 and flat.size == info.n_elements
        span = "elements" if whole else f"elements {start:,} to {start + flat.size:,}"
        where = f"among its {span} (the first at element {first:,})"
    raise NonFiniteWeightsError(
        path,
        info.name,
        f"holds {counts} weights {where}: the file is damaged or was converted wrong; download or convert it again",
        offset=offset,
    )

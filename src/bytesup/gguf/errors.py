"""The reader's expected failures: each a BytesupError whose str() is one line naming the file.

    <file>: <field>: <what> at byte <n>

Names and values from the file are quoted with `bytesup.errors.quote` (printable, cut to a readable
length with the full length given) by whoever builds the field; the whole line is made printable here.
"""

from __future__ import annotations

from bytesup.errors import BytesupError, printable, quote


class GGUFFormatError(BytesupError, ValueError):
    """A file that is not a well-formed GGUF. str() is one line: '<file>: <what> at byte <n>'."""

    def __init__(self, path, what: str, *, offset: int | None = None, field: str | None = None):
        self.path = str(path)
        self.what = what
        self.offset = offset
        self.field = field
        message = f"{printable(self.path)}: "
        if field:
            message += f"{printable(field)}: "
        message += printable(what)
        if offset is not None:
            message += f" at byte {offset}"
        super().__init__(message)


def tensor_field(name: str) -> str:
    """How a message names a tensor: "tensor 'blk.0.attn_q.weight'" (a long name cut, see quote)."""
    return f"tensor {quote(name)}"


class UnsupportedTypeError(GGUFFormatError):
    """A well-formed tensor of a type nothing here can dequantize; `.tensor` names it."""

    def __init__(self, path, tensor: str, what: str, *, offset: int | None = None):
        self.tensor = tensor
        super().__init__(path, what, offset=offset, field=tensor_field(tensor))


class TensorNotFoundError(BytesupError, KeyError):
    """No tensor of that name in the file; the message suggests close names."""

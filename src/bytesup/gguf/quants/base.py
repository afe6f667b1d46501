"""What a quant record is: one class per ggml type, as gguf-py's quants.py has.

A record declares its facts once:

    name      the ggml type name; block_size (weights per block) and type_size (bytes per block)
              come from gguf.constants.GGML_QUANT_SIZES through bytesup.gguf.sizes, never typed here
    fields    the block's bytes in file order, each Field(name, bytes, what it holds): the one
              declaration of the layout, read by split() (the clear version), by `at` (the fast
              version's byte offsets) and by decode_block (the field table a lesson shows)
    formula   the weight in symbols ("w = d * q + m"), and `words`, the same in a sentence

and reads the same bytes three ways, each bit-exact against gguf.quants.dequantize:

    clear(raw)          whole blocks -> float32 weights, one line per field: reads like the lesson
    step(r, o)          the fast version's body: a chunk of blocks r (k, type_size) into o (k, block_size);
                        fast(raw, out=, threads=) runs it over a tensor (kernels.run_blocks)
    decode_block(raw)   one block, field by field (bytesup.gguf.blocks.Block)

SuperBlock is the family of the K-quants and IQ4 types: sub-blocks with their own integer scale (and
minimum), so a record says how to unpack() its fields and the family does the formula.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bytesup.gguf import sizes
from bytesup.gguf.blocks import Block, check_size, fp16_by_hand
from bytesup.gguf.quants import kernels
from bytesup.gguf.quants.bits import f16


@dataclass(frozen=True)
class Field:
    name: str
    bytes: int
    holds: str  # what the bytes are, in words


class Quant:
    """One ggml type. Subclasses set name, fields, formula and words, and write clear, step and decode_block."""

    name: ClassVar[str] = ""  # empty on a family (SuperBlock), which is no type of its own
    fields: ClassVar[tuple[Field, ...]] = ()
    formula: ClassVar[str] = ""
    words: ClassVar[str] = ""
    block_size: ClassVar[int]  # weights per block, from GGML_QUANT_SIZES
    type_size: ClassVar[int]  # bytes per block, from GGML_QUANT_SIZES
    at: ClassVar[dict[str, int]]  # field name -> its first byte in the block

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name:
            cls.block_size, cls.type_size = sizes.block_shape(cls.name)
            cls.at, first = {}, 0
            for f in cls.fields:
                cls.at[f.name] = first
                first += f.bytes

    @classmethod
    def fields_bytes(cls) -> int:
        """What the declared fields add up to: type_size, or the record is wrong (the tests check)."""
        return sum(f.bytes for f in cls.fields)

    @classmethod
    def split(cls, raw: np.ndarray) -> dict[str, np.ndarray]:
        """Bytes of whole blocks -> {field name: (n_blocks, field bytes) uint8}, in file order."""
        raw = np.asarray(raw, np.uint8).reshape(-1)
        if raw.size % cls.type_size:
            raise ValueError(f"{cls.name}: {raw.size} bytes is not a whole number of {cls.type_size}-byte blocks")
        blocks = raw.reshape(-1, cls.type_size)
        return {f.name: blocks[:, cls.at[f.name] : cls.at[f.name] + f.bytes] for f in cls.fields}

    @classmethod
    def block_fields(cls, raw: bytes) -> dict[str, bytes]:
        """One block's bytes -> {field name: its bytes}; refuses a block of the wrong size."""
        check_size(raw, cls.name, cls.type_size)
        return {f.name: bytes(raw[cls.at[f.name] : cls.at[f.name] + f.bytes]) for f in cls.fields}

    @classmethod
    def fp16_field(cls, raw: bytes, name: str):
        """The fp16 number in field `name` of one block, taken apart by hand (blocks.FP16)."""
        return fp16_by_hand(struct.unpack_from("<H", raw, cls.at[name])[0])

    @classmethod
    def field_rows(cls, raw: bytes, shown: dict) -> list[tuple[str, int, int, object]]:
        """Block.fields: (name, first byte, bytes, value) in byte order; `shown` gives a field's value
        (d's number, qh in hex...), else its bytes as a list (up to 16) or a count."""
        rows = []
        for f in cls.fields:
            at = cls.at[f.name]
            value = shown.get(f.name)
            if value is None:
                value = list(raw[at : at + f.bytes]) if f.bytes <= 16 else f"{f.bytes} bytes"
            rows.append((f.name, at, f.bytes, value))
        return rows

    @classmethod
    def clear(cls, raw: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def step(cls, r: np.ndarray, o: np.ndarray) -> None:
        raise NotImplementedError

    @classmethod
    def fast(cls, raw: np.ndarray, out: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
        """The fast version: step over the whole tensor, in chunks, on `threads` threads (None: the
        default, kernels.default_threads()); out= reuses a float32 array of the right size."""
        return kernels.run_blocks(raw, cls.type_size, cls.block_size, cls.step, out, threads)

    @classmethod
    def decode_block(cls, raw: bytes) -> Block:
        raise NotImplementedError


class SuperBlock(Quant):
    """The K-quants and IQ4 types: a block split into sub-blocks of `sub_block` weights, each with its
    own integer scale (and minimum) that the block's fp16 d (and dmin) multiply. unpack() gives the
    integers, named as the formula uses them; the family computes it, in gguf-py's roundings:
    (d * scale[j]) rounded to float32 once per sub-block, times q (IQ4: levels[q]), minus
    (dmin * min[j]) rounded the same way. IQ4_NL, one block of 32 with d alone, is its own sub-block."""

    sub_block: ClassVar[int]
    levels: ClassVar[np.ndarray | None] = None  # IQ4: q is an index into these levels

    @classmethod
    def unpack(cls, f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """split()'s fields -> {"scale", "min" (where the type has them), "q"}: integers, q in weight order."""
        raise NotImplementedError

    @classmethod
    def stored_in(cls) -> list[str]:
        """Where each weight's q comes from, in weight order (Block.stored_in)."""
        raise NotImplementedError

    @classmethod
    def unpack_fields(cls, raw: np.ndarray) -> dict[str, np.ndarray]:
        """Whole blocks -> their numbers, named as in the formula: d, dmin (n,) float32 (the fp16
        fields); scale, min (n, sub-blocks) integers as the formula uses them (Q3_K and IQ4_XS already
        minus 32, Q6_K signed); q (n, weights) integers in weight order (Q3_K -4..3, Q6_K -32..31, IQ4
        an index 0..15). A lesson shows one block with these."""
        f = cls.split(raw)
        out = {"d": f16(f["d"])[:, 0]}
        if "dmin" in f:
            out["dmin"] = f16(f["dmin"])[:, 0]
        out.update(cls.unpack(f))
        return out

    @classmethod
    def clear(cls, raw: np.ndarray) -> np.ndarray:
        u = cls.unpack_fields(raw)
        q = u["q"] if cls.levels is None else cls.levels[u["q"]]
        q = q.astype(np.float32).reshape(u["d"].size, -1, cls.sub_block)
        d = u["d"][:, None]  # (n, 1)
        step = d if "scale" not in u else d * u["scale"].astype(np.float32)  # (n, sub-blocks), rounded once
        w = step[:, :, None] * q
        if "min" in u:
            w = w - (u["dmin"][:, None] * u["min"].astype(np.float32))[:, :, None]
        return w.reshape(-1)

    @classmethod
    def decode_block(cls, raw: bytes) -> Block:
        """One block field by field: its fp16 numbers by hand, its integers from unpack_fields, and the
        formula done in the open, one float32 rounding at a time."""
        check_size(raw, cls.name, cls.type_size)
        u = cls.unpack_fields(np.frombuffer(raw, np.uint8))  # one block: row 0 of each
        d = cls.fp16_field(raw, "d")
        dmin = cls.fp16_field(raw, "dmin") if "dmin" in cls.at else None
        q = [int(x) for x in u["q"][0]]
        level = q if cls.levels is None else [int(cls.levels[x]) for x in q]
        n, size = len(q), cls.sub_block
        scales = [int(x) for x in u["scale"][0]] if "scale" in u else []
        mins = [int(x) for x in u["min"][0]] if "min" in u else []
        # d * scale[j]: one float32 per sub-block (IQ4_NL has no sub-block scale: d itself)
        step = [float(np.float32(d.value) * np.float32(s)) for s in scales] if scales else [d.value] * (n // size)
        scale = [step[i // size] for i in range(n)]
        values = np.array(scale, np.float32) * np.array(level, np.float32)
        offset = []
        if mins:  # minus dmin * min[j], one float32 per sub-block; x - y is x + (-y) exactly
            low = [float(np.float32(dmin.value) * np.float32(m)) for m in mins]
            values = values - np.array([low[i // size] for i in range(n)], np.float32)
            offset = [-low[i // size] for i in range(n)]
        shown = {"d": d.value, "dmin": None if dmin is None else dmin.value}
        quants = "qs" if "qs" in cls.at else "ql"
        packed = list(cls.block_fields(raw)[quants])
        return Block(cls.name, bytes(raw), d, dmin, q, values, cls.formula, packed, level, scale, offset,
                     cls.stored_in(), cls.field_rows(raw, shown), scales, mins)  # fmt: skip

"""Lesson 1's step 6: one block of each quantization type decoded by hand, beside gguf-py's decoder."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bytesup.gguf.blocks import Block
from bytesup.gguf.dequant import bit_equal, dequantize, reference_dequantize
from bytesup.gguf.file import GGUFFile
from bytesup.gguf.quants import QUANTS
from bytesup.gguf.sizes import block_shape, tensor_bytes
from bytesup.lessons.gguf_on_disk.file_tables import by_type


# --- 6. one block by hand ------------------------------------------------------------------------
def gguf_py_block(raw: bytes, type_name: str) -> np.ndarray:
    """The same bytes through gguf-py's dequantizer (bytesup.gguf.dequant.reference_dequantize): the reference."""
    block_size, _ = block_shape(type_name)
    return reference_dequantize(np.frombuffer(raw, np.uint8), type_name, (block_size,))


same_bits = bit_equal  # same shape, identical float32 bits (bytesup.gguf.dequant.bit_equal)


@dataclass(frozen=True)
class BlockPick:
    tensor: str
    type_name: str
    row: int
    block: int  # index of the block within the row
    offset: int  # absolute byte offset of the block in the file
    first_weight: int  # index within the row of the block's first weight
    raw: bytes
    row_bytes: int


def pick_block(f: GGUFFile, type_name: str, prefer: list[tuple[str, int]] = ()) -> BlockPick | None:
    """Block 0 of a row of a tensor of ``type_name``: the first ``prefer`` entry (tensor, row)
    whose tensor has that type, else row 0 of the first such tensor in the file, else None."""
    by_name = {t.name: t for t in f.tensors}
    choice = next(((by_name[n], r) for n, r in prefer if n in by_name and by_name[n].type_name == type_name), None)
    if choice is None:
        first = next((t for t in f.tensors if t.type_name == type_name), None)
        if first is None:
            return None
        choice = (first, 0)
    info, row = choice
    _, type_size = block_shape(type_name)
    row_bytes = tensor_bytes(type_name, info.shape[-1:])
    start = row * row_bytes  # block 0 of the row
    raw = bytes(f.raw(info.name)[start : start + type_size])
    return BlockPick(info.name, type_name, row, 0, info.offset + start, 0, raw, row_bytes)


def chosen_blocks(f: GGUFFile, token_id: int | None = None) -> dict[str, BlockPick | None]:
    """One block of every ggml type the file holds, keyed by type name, most bytes first (by_type's
    order). The token's row of token_embd.weight where that tensor has the type (its first block is
    the first numbers of the token's vector), else row 0 of blk.0.ffn_gate.weight, else row 0 of the
    first tensor of the type. None for a type bytesup.gguf.quants has no record (hand decoder) for."""
    prefer = [("token_embd.weight", token_id)] if token_id is not None else []
    prefer.append(("blk.0.ffn_gate.weight", 0))
    return {g["type"]: pick_block(f, g["type"], prefer) if g["type"] in QUANTS else None
            for g in by_type(f)}  # fmt: skip


BLOCK_TABLE_COLUMNS = ["type", "tensor", "row", "i", "stored_in", "q", "level", "scale", "offset", "by_hand", "gguf_py",
                       "same_bits"]  # fmt: skip
FIELD_TABLE_COLUMNS = ["type", "tensor", "field", "first_byte", "bytes", "value"]
TYPE_TABLE_COLUMNS = ["type", "tensor", "row", "offset", "block_bytes", "weights", "formula", "bit_exact_gguf_py",
                      "bit_exact_bytesup", "note"]  # fmt: skip


def block_report(f: GGUFFile, pick: BlockPick) -> tuple[Block, dict]:
    """Decode the picked block by hand and check it against gguf-py and bytesup.gguf.dequant."""
    blk = QUANTS[pick.type_name].decode_block(pick.raw)
    reference = gguf_py_block(pick.raw, pick.type_name)
    row_raw = f.raw(pick.tensor)[pick.row * pick.row_bytes : (pick.row + 1) * pick.row_bytes]
    row = dequantize(np.array(row_raw), pick.type_name, (f.tensor(pick.tensor).shape[-1],))
    f.check_finite(pick.tensor, row, start=pick.row * row.size)  # NaN or infinity: one line naming the tensor
    ours = row[pick.first_weight : pick.first_weight + len(blk.q)]
    checks = {
        "tensor": pick.tensor,
        "row": pick.row,
        "block": pick.block,
        "offset": pick.offset,
        "bytes": len(pick.raw),
        "raw_hex": pick.raw.hex(" "),
        "formula": blk.formula,
        "weights": blk.n_weights,
        "d_bits": None if blk.d is None else f"0x{blk.d.bits:04x}",
        "d": None if blk.d is None else blk.d.value,
        "m_bits": None if blk.m is None else f"0x{blk.m.bits:04x}",
        "m": None if blk.m is None else blk.m.value,
        "q": blk.q,
        "values": blk.values,
        "gguf_py_values": reference,
        "bit_exact_gguf_py": bit_equal(blk.values, reference),
        "bit_exact_bytesup": bit_equal(blk.values, ours),
        "d_matches_numpy_fp16": None if blk.d is None else blk.d.value == float(np.uint16(blk.d.bits).view(np.float16)),
        "sub_scales": blk.sub_scales or None,
        "sub_mins": blk.sub_mins or None,
    }
    return blk, checks


def block_rows(blk: Block, reference: np.ndarray, pick: BlockPick | None = None) -> list[dict]:
    """The block as a table: one row per weight, with where its quant came from, the integer the
    formula multiplies (level), the float32 scale and offset, and the weight by hand and by gguf-py."""
    rows = []
    for i, q in enumerate(blk.q):
        rows.append({
            "type": blk.type_name,
            "tensor": pick.tensor if pick else None,
            "row": pick.row if pick else None,
            "i": i,
            "stored_in": blk.stored_in[i],
            "q": q,
            "level": blk.level[i] if blk.level else None,
            "scale": blk.scale[i] if blk.scale else None,
            "offset": blk.offset[i] if blk.offset else None,
            "by_hand": float(blk.values[i]),
            "gguf_py": float(reference[i]),
            "same_bits": bit_equal(blk.values[i : i + 1], reference[i : i + 1]),
        })  # fmt: skip
    return rows


def field_rows(blk: Block, pick: BlockPick | None = None) -> list[dict]:
    """The block field by field, in byte order; a K-quant's packed sub-block scales (and mins) follow,
    unpacked: the stored integers, and the float32 factors d * scale[j] (dmin * min[j]) they give."""
    base = {"type": blk.type_name, "tensor": pick.tensor if pick else None}
    rows = [{**base, "field": name, "first_byte": at, "bytes": n, "value": value} for name, at, n, value in blk.fields]
    if blk.sub_scales:
        per_sub = blk.n_weights // len(blk.sub_scales)
        factors = [str(np.float32(blk.scale[j * per_sub])) for j in range(len(blk.sub_scales))]
        rows.append({**base, "field": f"scale[0..{len(blk.sub_scales) - 1}] (unpacked)", "value": blk.sub_scales})
        rows.append({**base, "field": "d * scale[j] (float32)", "value": ", ".join(factors)})
    if blk.sub_mins:
        per_sub = blk.n_weights // len(blk.sub_mins)
        factors = [str(np.float32(-blk.offset[j * per_sub])) for j in range(len(blk.sub_mins))]
        rows.append({**base, "field": f"min[0..{len(blk.sub_mins) - 1}] (unpacked)", "value": blk.sub_mins})
        rows.append({**base, "field": "dmin * min[j] (float32)", "value": ", ".join(factors)})
    return rows

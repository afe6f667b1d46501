"""Lesson 1, what a model is on disk: the hand readers, the accounting, the claims, the notebook."""

from __future__ import annotations

import csv
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from workflow_helpers import run_notebook

from bytesup.gguf import blocks as qb
from bytesup.gguf.dequant import reference_dequantize
from bytesup.gguf.file import GGUFFile
from bytesup.gguf.quants import QUANTS
from bytesup.gguf.quants.kquants import unpack_scale_min_k4
from bytesup.lessons import claims
from bytesup.lessons import gguf_on_disk as lesson
from bytesup.lessons.gguf_on_disk import file_tables, one_block
from bytesup.lessons.spec import parameter
from bytesup.model.configs import Architecture, llama_tensor_shapes
from bytesup.model.synthetic import write_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "workflow" / "notebooks" / "01_gguf_on_disk.ipynb"


# --- the header and the fp16 scale, by hand --------------------------------------------------


def test_read_header_from_bytes():
    raw = b"GGUF" + struct.pack("<IQQ", 3, 272, 33)
    h = file_tables.read_header(raw)
    assert h == {"magic": "GGUF", "magic_hex": "47 47 55 46", "version": 3, "tensor_count": 272, "metadata_count": 33}
    with pytest.raises(ValueError):
        file_tables.read_header(raw[:20])


def test_hex_dump_line():
    assert file_tables.hex_dump(b"GGUF\x03\x00", 0, 6) == "00000000  47 47 55 46 03 00" + " " * 31 + " GGUF.."


@pytest.mark.parametrize(
    "bits, value",
    [(0x3C00, 1.0), (0xC000, -2.0), (0x3555, 0.333251953125), (0x0001, 2.0**-24), (0x0000, 0.0),
     (0x7BFF, 65504.0), (0x15E4, 0.001438140869140625), (0xB540, -0.328125)],
)  # fmt: skip
def test_fp16_by_hand_known_values(bits, value):
    assert qb.fp16_by_hand(bits).value == value


def test_fp16_by_hand_matches_numpy_for_every_pattern():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    ours = np.array([qb.fp16_by_hand(int(b)).value for b in bits], dtype=np.float64)
    numpy = bits.view(np.float16).astype(np.float64)
    assert np.array_equal(ours, numpy, equal_nan=True)
    assert qb.fp16_by_hand(0x7C00).value == float("inf")
    h = qb.fp16_by_hand(0xB540)
    assert (h.sign, h.exponent, h.mantissa) == (1, 13, 320)


# --- one block by hand ---------------------------------------------------------------------------


def test_q8_0_block_toy():
    raw = struct.pack("<H", 0x3800) + struct.pack("<32b", *range(-16, 16))  # d = 0.5
    blk = QUANTS["Q8_0"].decode_block(raw)
    assert blk.d.value == 0.5 and blk.q == list(range(-16, 16))
    assert blk.values.tolist() == [0.5 * q for q in range(-16, 16)]
    assert one_block.same_bits(blk.values, one_block.gguf_py_block(raw, "Q8_0"))


def test_q4_1_block_toy_nibble_order():
    # byte j: low nibble j (weight j), high nibble 15 - j (weight j + 16)
    packed = bytes(j | ((15 - j) << 4) for j in range(16))
    raw = struct.pack("<HH", 0x3400, 0xBC00) + packed  # d = 0.25, m = -1
    blk = QUANTS["Q4_1"].decode_block(raw)
    assert blk.q == list(range(16)) + list(range(15, -1, -1))
    assert blk.values.tolist() == [0.25 * q - 1.0 for q in blk.q]
    assert one_block.same_bits(blk.values, one_block.gguf_py_block(raw, "Q4_1"))


def test_wrong_block_sizes_are_refused():
    with pytest.raises(ValueError, match="34 bytes"):
        QUANTS["Q8_0"].decode_block(b"\x00" * 33)
    with pytest.raises(ValueError, match="20 bytes"):
        QUANTS["Q4_1"].decode_block(b"\x00" * 34)


def finite_scale_bytes(type_name: str) -> list[int]:
    """Where a block of the type keeps its fp16 numbers (d, m, dmin; a float type: the number itself, F32
    by its exponent's top bits at byte 2), as its record declares them: their exponent is kept below
    the all-ones pattern so that every random block is finite. A record that declares them in the
    wrong place still fails: gguf-py then reads random bits as the scale."""
    if type_name == "F32":
        return [2]
    return [at for name, at in QUANTS[type_name].at.items() if name in ("d", "m", "dmin", "value")]


@pytest.mark.parametrize("type_name", sorted(QUANTS))
def test_random_blocks_bit_exact_against_gguf_py(type_name):
    size, fp16_at = QUANTS[type_name].type_size, finite_scale_bytes(type_name)
    assert fp16_at
    rng = np.random.default_rng(7)
    for _ in range(200):
        raw = bytearray(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        for at in fp16_at:  # keep the fp16 fields finite (F32: its exponent's top bits)
            raw[at + 1] &= 0x3B if type_name == "F32" else 0x7B
        raw = bytes(raw)
        blk = QUANTS[type_name].decode_block(raw)
        reference = one_block.gguf_py_block(raw, type_name)
        assert one_block.same_bits(blk.values, reference)
        assert len(blk.q) == len(blk.stored_in) == reference.size
        if blk.scale:  # the per-weight factors rebuild the weights: scale * level (+ offset), in float32
            w = np.array(blk.scale, np.float32) * np.array(blk.level, np.float32)
            if blk.offset:
                w = w + np.array(blk.offset, np.float32)
            assert np.array_equal(w, reference)
    q = QUANTS[type_name]
    if q.block_size > 1:  # the field table a lesson shows is the record's declaration, in byte order
        assert [row[:3] for row in blk.fields] == [(f.name, q.at[f.name], f.bytes) for f in q.fields]


def unpack(packed: bytes) -> tuple[list[int], list[int]]:
    sc, mn = unpack_scale_min_k4(np.frombuffer(packed, np.uint8))
    return sc.tolist(), mn.tolist()


def test_k_quant_scale_unpack_by_hand():
    # scales 1..8, mins 9..16 (6 bits each), packed the way Q4_K packs them
    sc, mn = list(range(1, 9)), list(range(9, 17))
    packed = [sc[j] | ((sc[j + 4] >> 4) << 6) for j in range(4)] + [mn[j] | ((mn[j + 4] >> 4) << 6) for j in range(4)]
    packed += [(sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4) for j in range(4)]
    assert unpack(bytes(packed)) == (sc, mn)
    top = bytes([255] * 12)  # every bit set: every scale and min is 63
    assert unpack(top) == ([63] * 8, [63] * 8)
    with pytest.raises(ValueError, match="144 bytes"):
        QUANTS["Q4_K"].decode_block(b"\x00" * 143)


def test_q4_k_block_field_by_field():
    # d = 0.5, dmin = 0.25; sub-block j has scale j + 1 and min j; quant i is i % 16
    sc, mn = [j + 1 for j in range(8)], list(range(8))
    packed = [sc[j] | ((sc[j + 4] >> 4) << 6) for j in range(4)] + [mn[j] | ((mn[j + 4] >> 4) << 6) for j in range(4)]
    packed += [(sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4) for j in range(4)]
    qs = bytes((j % 16) | (((j + 1) % 16) << 4) for j in range(128))
    raw = struct.pack("<HH", 0x3800, 0x3400) + bytes(packed) + qs
    blk = QUANTS["Q4_K"].decode_block(raw)
    assert (blk.d.value, blk.m.value, blk.sub_scales, blk.sub_mins) == (0.5, 0.25, sc, mn)
    # weight 32 is the high nibble of byte 16 (sub-block 1): q = 1, w = 0.5 * 2 * 1 - 0.25 * 1
    assert blk.q[32] == 1 and blk.values[32] == 0.75 and blk.stored_in[32].startswith("byte 16 ")
    assert one_block.same_bits(blk.values, one_block.gguf_py_block(raw, "Q4_K"))
    with pytest.raises(ValueError, match="144 bytes"):
        QUANTS["Q4_K"].decode_block(raw[:-1])


def test_q6_k_block_bit_placement():
    # only weight 200 non-zero: half 1, l = 8, k = 2 -> ql byte 64 + 8 high nibble, qh byte 128 + 32 + 8 bits 4-5
    ql, qh = bytearray(128), bytearray(64)
    ql[72] = 0x50  # low bits 5 in the high nibble
    qh[40] = 0b10 << 4  # high bits 2 -> stored 5 + 32 = 37
    scales = struct.pack("<16b", *range(-8, 8))
    raw = bytes(ql) + bytes(qh) + scales + struct.pack("<H", 0x3C00)  # d = 1
    blk = QUANTS["Q6_K"].decode_block(raw)
    # q as the record's unpack_fields names it: stored 37, minus 32
    assert blk.q[200] == blk.level[200] == 5 and blk.scale[200] == 200 // 16 - 8
    assert blk.stored_in[200] == "byte 72 high nibble + byte 168 bits 4-5"
    assert [blk.q[i] for i in range(256) if i != 200] == [-32] * 255
    assert blk.values[200] == 5 * (200 // 16 - 8)
    assert one_block.same_bits(blk.values, one_block.gguf_py_block(raw, "Q6_K"))


def test_fp32_by_hand():
    assert qb.fp32_by_hand(0x3F800000).value == 1.0 and qb.fp32_by_hand(0xC0400000).value == -3.0
    assert qb.fp32_by_hand(0x00000001).value == 2.0**-149
    h = qb.fp32_by_hand(0x3E200000)  # 0.15625 = 1.25 * 2^-3
    assert (h.sign, h.exponent, h.mantissa, h.value) == (0, 124, 0x200000, 0.15625)


def test_same_bits_tells_zeros_apart():
    assert one_block.same_bits(np.float32([1.0, 0.0]), np.float32([1.0, 0.0]))
    assert not one_block.same_bits(np.float32([0.0]), np.float32([-0.0]))
    assert not one_block.same_bits(np.float32([1.0]), np.float32([1.0, 2.0]))


@pytest.mark.parametrize("embd_type, first_block", [("Q8_0", True), ("Q4_1", True), ("F16", False), ("Q5_0", False)])
def test_lesson_2_first_block_keeps_to_its_two_formulas(tmp_path, embd_type, first_block):
    """The records decode many types; lesson 2 shows the first block of a Q8_0 or Q4_1 row only."""
    from bytesup.lessons import tokens_and_embeddings as lesson2

    path = write_tiny_llama(tmp_path / "t.gguf", types={"token_embd.weight": embd_type})
    with GGUFFile(path) as f:
        row = lesson2.row_by_hand(f, 5)
        assert one_block.same_bits(row.values, f.load("token_embd.weight")[5])
    assert (row.first_block is not None) == first_block
    if first_block:
        assert row.first_block.type_name == embd_type and one_block.same_bits(row.first_block.values, row.values[:32])


# --- the whole file, accounted for ---------------------------------------------------------------


@pytest.fixture
def tiny(tmp_path):
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    with GGUFFile(path) as f:
        yield f


def test_records_add_up_to_the_sections(tiny):
    acc = tiny.byte_accounting()
    meta = file_tables.metadata_table(tiny)
    infos = file_tables.tensor_table(tiny)
    assert [r["key"] for r in meta] == list(tiny.metadata)
    assert sum(r["bytes"] for r in meta) == acc["metadata"]
    assert sum(r["info_bytes"] for r in infos) == acc["tensor_infos"]
    assert sum(r["bytes"] for r in infos) == acc["tensor_data"]
    assert sum(r["bytes"] for r in file_tables.accounting_rows(acc)[:-1]) == tiny.file_size == acc["file_size"]


def test_first_records_by_hand(tiny):
    prefix = file_tables.read_prefix(tiny)
    assert len(prefix) == tiny.tensor_infos_end
    rec = file_tables.first_metadata_record(prefix)
    assert (rec["key"], rec["type"], rec["value"]) == ("general.architecture", "STRING", "llama")
    assert rec["bytes"] == 8 + len("general.architecture") + 4 + 8 + len("llama")
    info = file_tables.first_tensor_info(tiny, prefix)
    t0 = tiny.tensors[0]
    assert info["name"] == t0.name and tuple(info["dims_gguf"]) == t0.shape_gguf
    assert tuple(info["shape_numpy"]) == t0.shape and info["bytes"] == file_tables.tensor_info_bytes(t0)


def test_by_type_and_structure(tiny):
    rows = file_tables.by_type(tiny)
    assert sum(r["parameters"] for r in rows) == sum(t.n_elements for t in tiny.tensors)
    assert sum(r["tensors"] for r in rows) == len(tiny.tensors)
    assert sum(r["byte_share"] for r in rows) == pytest.approx(1.0)
    bpw = {r["type"]: r["bits_per_weight"] for r in rows}
    assert bpw["Q8_0"] == 8.5 and bpw["Q4_1"] == 5.0 and bpw["Q4_0"] == 4.5 and bpw["F32"] == 32.0
    s = file_tables.block_structure(tiny)
    assert (s["blocks_in_names"], s["tensors_per_block"], s["tensors_outside_blocks"]) == (2, 9, 3)


def test_compute_on_tiny(tiny):
    m = lesson.compute(tiny, " cat")
    assert m["magic"] == "GGUF" and m["version"] == 3 and m["header_matches_reader"]
    assert m["bytes_unaccounted"] == 0 and m["bytes_accounted"] == m["file_size"]
    parts = ("before_data", "between_tensors", "trailing")
    assert m["bytes_padding"] == sum(m[f"bytes_padding_{p}"] for p in parts) > 0  # the tiny file has gaps
    assert m["metadata_record_bytes_sum"] == m["bytes_metadata"]
    assert m["tensor_info_record_bytes_sum"] == m["bytes_tensor_infos"]
    assert m["first_metadata_matches_reader"] and m["first_tensor_info_matches_reader"]
    assert m["layout_from_metadata_matches"] is True and not m["tied_embeddings"]
    assert m["block_count"] == 2 and m["tensors_per_block"] == 9
    assert m["token_id"] == tiny.metadata["tokenizer.ggml.tokens"].index("Ġcat")
    assert m["q8_0_block_tensor"] == "token_embd.weight" and m["q8_0_block"]["row"] == m["token_id"]
    assert m["q4_1_block_tensor"] == "blk.0.ffn_gate.weight"
    for key in ("q8_0", "q4_1"):
        assert m[f"{key}_block_bit_exact_gguf_py"] is True and m[f"{key}_block_bit_exact_bytesup"] is True
    # the Q8_0 block is the first 32 numbers of the token's row
    row = tiny.load("token_embd.weight")[m["token_id"]]
    assert one_block.same_bits(m["q8_0_block"]["values"], row[:32])


def test_file_without_q4_1(tmp_path):
    path = write_tiny_llama(tmp_path / "q8.gguf", types={"blk.*.*_*.weight": "Q8_0"})
    with GGUFFile(path) as f:
        m = lesson.compute(f, " cat")
    assert "Q4_1" not in m["types_present"] and "Q4_1" not in m["block_types"]
    assert "q4_1_block" not in m and m["block_types"] == m["types_present"]
    assert m["q8_0_block_bit_exact_gguf_py"] is True


def test_one_block_of_every_type_in_the_tiny_file(tiny):
    m, tables = lesson.run(tiny, " cat")
    present = [g["type"] for g in file_tables.by_type(tiny)]
    assert m["block_types"] == m["block_types_decoded"] == present and len(present) == 8
    assert m["block_types_bit_exact_gguf_py"] == m["block_types_bit_exact_bytesup"] == 8
    assert m["blocks_all_bit_exact_gguf_py"] and m["block_types_without_hand_decoder"] == []
    assert [r["type"] for r in tables["block_types"]] == present
    rows = tables["block_rows"]
    assert len(rows) == sum(r["weights"] for r in tables["block_types"]) and all(r["same_bits"] for r in rows)
    for t in present:  # each block's weights are the gguf-py weights of the bytes it names
        pick, blk, checks, _ = tables["blocks"][t]
        assert pick.raw == bytes(tiny.raw(pick.tensor)[pick.row * pick.row_bytes :][: len(pick.raw)])
        assert one_block.same_bits(
            blk.values, reference_dequantize(np.frombuffer(pick.raw, np.uint8), t, (blk.n_weights,))
        )
    fields = {(r["type"], r["field"]): r["value"] for r in tables["block_fields"]}
    assert fields[("Q4_1", "d")] == tables["blocks"]["Q4_1"][1].d.value


def test_a_type_without_a_hand_decoder_is_listed(tiny, monkeypatch):
    monkeypatch.delitem(QUANTS, "Q5_1")  # the registry without Q5_1's record (gguf-py dequantizes it)
    m, tables = lesson.run(tiny, " cat")
    assert m["block_types_without_hand_decoder"] == ["Q5_1"] and not m["blocks_all_bit_exact_gguf_py"]
    assert m["block_types_bit_exact_gguf_py"] == m["block_type_count"] - 1
    row = next(r for r in tables["block_types"] if r["type"] == "Q5_1")
    assert "no hand decoder" in row["note"]


# --- the layout the architecture table predicts, against odd files ---------------------------------


def write_odd_llama(
    path: Path,
    *,
    drop: str = "",
    add: tuple[str, tuple[int, ...]] | None = None,
    reshape: tuple[str, tuple[int, ...]] | None = None,
) -> Path:
    """A one-block llama GGUF (F32 zeros) with a tensor left out, one added or one reshaped."""
    from gguf import GGUFWriter

    a = Architecture("odd", d_model=32, d_ff=64, n_layers=1, vocab=8, n_heads=4, n_kv_heads=2, head_dim=8)
    w = GGUFWriter(path, "llama")
    w.add_embedding_length(32), w.add_feed_forward_length(64), w.add_block_count(1), w.add_head_count(4)
    w.add_head_count_kv(2), w.add_context_length(64), w.add_layer_norm_rms_eps(1e-5), w.add_vocab_size(8)
    tensors = [(n, reshape[1] if reshape and n == reshape[0] else s) for n, s in llama_tensor_shapes(a) if n != drop]
    for name, shape in tensors + ([add] if add else []):
        w.add_tensor(name, np.zeros(shape, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file()
    w.close()
    return path


def test_layout_check_is_empty_for_a_file_as_predicted(tmp_path):
    with GGUFFile(write_odd_llama(tmp_path / "ok.gguf")) as f:
        m, tables = lesson.run(f, " cat")
    assert tables["layout"] == [] and m["layout_mismatches"] == 0 and m["layout_from_metadata_matches"] is True
    assert m["layout_predicted_tensors"] == 12 and m["layout_parameters_predicted"] == m["parameters"]


def test_layout_check_lists_missing_extra_and_reshaped_tensors(tmp_path):
    path = write_odd_llama(tmp_path / "odd.gguf", drop="blk.0.ffn_up.weight", add=("blk.0.mystery.weight", (32,)),
                           reshape=("blk.0.attn_k.weight", (8, 32)))  # fmt: skip
    with GGUFFile(path) as f:
        m, tables = lesson.run(f, " cat")
    got = {(r["tensor"], r["problem"]) for r in tables["layout"]}
    assert got == {("blk.0.ffn_up.weight", "predicted, missing from the file"),
                   ("blk.0.mystery.weight", "in the file, not predicted"),
                   ("blk.0.attn_k.weight", "shape differs")}  # fmt: skip
    k = next(r for r in tables["layout"] if r["problem"] == "shape differs")
    assert (k["predicted_shape"], k["file_shape"]) == ("16x32", "8x32")
    assert m["layout_mismatches"] == 3 and m["layout_from_metadata_matches"] is False
    # the parameters are the file's own tensors, the extra one included and the missing one not
    assert (
        m["parameters"]
        == sum(t.n_elements for t in f.tensors)
        == m["layout_parameters_predicted"] - 64 * 32 - 8 * 32 + 32
    )
    assert m["parameters_by_part"]["other"] == 32


def test_tiny_gemma3_and_qwen2_files_are_predicted_tensor_for_tensor(tmp_path):
    from bytesup.model.synthetic import write_tiny_gemma3

    with GGUFFile(write_tiny_gemma3(tmp_path / "g.gguf")) as f:
        m, tables = lesson.run(f, " cat")
        names = f.tensor_names
    assert tables["layout"] == [] and m["layout_mismatches"] == 0 and m["tensors_per_block"] == 13
    assert m["layout_parameters_predicted"] == m["parameters"] == sum(t.n_elements for t in f.tensors)
    assert "blk.0.attn_q_norm.weight" in names and m["parameters_by_part"]["norms"] == 6 * (2 * 32 + 2 * 16 + 2 * 32)
    assert m["blocks_all_bit_exact_gguf_py"]
    with GGUFFile(write_tiny_llama(tmp_path / "q.gguf", arch="qwen2", qkv_bias=True)) as f:
        m, tables = lesson.run(f, " cat")
    assert (
        tables["layout"] == [] and m["tensors_per_block"] == 12 and m["layout_parameters_predicted"] == m["parameters"]
    )
    # the same qwen2 file without its biases: the table's qwen2 row misses them, 3 per block
    with GGUFFile(write_tiny_llama(tmp_path / "q2.gguf", arch="qwen2")) as f:
        m, tables = lesson.run(f, " cat")
    assert m["layout_mismatches"] == 6 and {r["problem"] for r in tables["layout"]} == {
        "predicted, missing from the file"
    }
    assert {r["tensor"] for r in tables["layout"]} == {f"blk.{i}.attn_{x}.bias" for i in (0, 1) for x in "qkv"}


@pytest.mark.parametrize("name", ["gemma2", "llama3-rope-freqs", "phi3-long-context", "qwen3"])
def test_every_other_row_is_predicted_tensor_for_tensor(tmp_path, name):
    """tests/tiny_rows.py's files: the rope tensors and Phi-3's attn_qkv predicted from the file's names."""
    from tiny_rows import write_row

    with GGUFFile(write_row(name, tmp_path)) as f:
        m, tables = lesson.run(f, " cat")
    assert tables["layout"] == [] and m["layout_parameters_predicted"] == m["parameters"]
    if name.startswith("phi3"):  # Q K V in one tensor: a part of its own, not "other"
        assert m["parameters_by_part"]["attn_qkv"] > 0 and "attn_q" not in m["parameters_by_part"]


def test_an_architecture_outside_the_table_is_said_so(tmp_path):
    path = write_tiny_llama(tmp_path / "mamba.gguf", arch="mamba")
    with GGUFFile(path) as f:
        m, tables = lesson.run(f, " cat")
    assert m["layout_predicted"] is False and m["layout_mismatches"] is None
    assert m["layout_predicted_from"].startswith("nothing: ") and "mamba" in m["layout_predicted_from"]
    (row,) = tables["layout"]
    assert row["problem"].startswith("not predicted: ") and "mamba" in row["problem"]
    assert "22816" not in row["problem"] and f"{len(f.tensors)} tensors" in row["problem"]
    assert m["parameters"] == sum(t.n_elements for t in f.tensors)


def test_pick_block_falls_back_to_first_tensor_of_the_type(tiny):
    pick = one_block.pick_block(tiny, "Q8_0", [("no.such.tensor", 3)])
    first = next(t for t in tiny.tensors if t.type_name == "Q8_0")
    assert (pick.tensor, pick.row, pick.offset) == (first.name, 0, first.offset)
    assert pick.raw == bytes(tiny.raw(first.name)[:34])


# --- the course's arithmetic and the claims ------------------------------------------------------


def test_course_arithmetic_exact():
    c = lesson.course_arithmetic()
    assert c["course_specimen_parameters"] == 6_740_512_768
    assert c["course_specimen_tensor_count"] == 291
    assert c["course_specimen_tensors_per_block"] == 9 and c["course_specimen_block_tensors"] == 288
    # 6,740,246,528 matrix weights at 34/32 bytes + 266,240 norm weights at 4 bytes
    assert c["course_specimen_tensor_data_bytes"] == 6_740_246_528 * 34 // 32 + 266_240 * 4 == 7_162_576_896
    assert round(c["course_specimen_tensor_data_gb"], 2) == 7.16


def test_claims_statuses(tiny):
    m = lesson.compute(tiny, " cat")
    status = {r.claim.claim_id: r.status for r in lesson.evaluate_claims(m, model="tiny", metadata=tiny.metadata)}
    assert status == {
        "file.block_count": "specimen differs",
        "file.tensors_per_block": "reproduced",  # the specimen's 9 tensors a block: this file has 9 too
        "file.size_gb": "specimen differs",
        "course.tensors_per_block": "reproduced",
        "course.size_gb": "reproduced",
    }
    # told it is the specimen, the file's own numbers are compared, and a tiny file fails them
    forced = lesson.evaluate_claims(m, model="tiny", metadata=tiny.metadata, specimen=True)
    got = {r.claim.claim_id: r.status for r in forced}
    assert got["file.block_count"] == "not reproduced" and got["file.size_gb"] == "not reproduced"
    assert got["file.tensors_per_block"] == "reproduced"


def test_specimen_numbers_would_reproduce():
    """The specimen's own values, as its metadata and file size give them, pass every claim."""
    m = {"block_count": 32, "tensors_per_block": 9, "file_size_gb": 7_163_879_648 / 1e9, **lesson.course_arithmetic()}
    results = lesson.evaluate_claims(m, model="deepseek-coder-6.7b-instruct-q8_0")
    assert claims.summary(results) == {"reproduced": 5, "specimen differs": 0, "not reproduced": 0}


# --- the notebook, end to end on a synthetic model ------------------------------------------------


def run_lesson1_notebook(gguf: Path, tmp_path: Path) -> tuple[dict, Path]:
    """The notebook on `gguf`, every output in tmp_path/out (checked to be exactly the SPEC's files)."""
    out = tmp_path / "out"
    outputs = {parameter(name): out / f"x_{name}" for name in lesson.SPEC.files}
    run_notebook(NOTEBOOK, tmp_path / "run.ipynb", cwd=ROOT, model="m", model_sha256="", model_gguf=gguf, **outputs)
    assert sorted(p.name for p in out.iterdir()) == sorted(f"x_{name}" for name in lesson.SPEC.files)
    return json.loads((out / "x_metrics.json").read_text(encoding="utf-8")), out


def read_csv(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow  # a whole notebook again: make test runs every notebook once (test_notebooks)
def test_notebook_runs_on_a_tiny_model(tmp_path):
    gguf = write_tiny_llama(tmp_path / "tiny.gguf")
    metrics, out = run_lesson1_notebook(gguf, tmp_path)
    assert metrics["bytes_accounted"] == metrics["file_size"] == gguf.stat().st_size
    assert metrics["is_specimen"] is False
    rows = read_csv(out / "x_claims.csv")
    assert list(rows[0]) == list(claims.COLUMNS)
    assert {r["status"] for r in rows if r["claim_id"].startswith("course.")} == {"reproduced"}
    file_rows = [r for r in rows if r["claim_id"].startswith("file.")]
    assert {r["status"] for r in file_rows} == {"specimen differs", "reproduced"}  # 9 tensors a block are 9
    for r in file_rows:  # the specimen's numbers: reproduced only where this file agrees within the tolerance
        agrees = abs(float(r["measured"]) - claims.parse_published(r["published"])) <= float(r["tolerance"])
        assert r["status"] == ("reproduced" if agrees else "specimen differs"), r
    types = read_csv(out / "x_block_types.csv")
    assert [r["type"] for r in types] == metrics["block_types"] and len(types) == 8
    assert all(r["bit_exact_gguf_py"] == "True" for r in types)
    block = [r for r in read_csv(out / "x_blocks.csv") if r["type"] == "Q4_1"]
    assert len(block) == 32 and all(r["same_bits"] == "True" for r in block)
    layout = read_csv(out / "x_layout_check.csv")
    assert layout == [] and (out / "x_layout_check.csv").read_text().startswith("tensor,problem,")
    code = "\n".join(
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"
    )
    for step in ('struct.unpack_from("<IQQ", prefix, 4)', "w = np.float32(d) * q.astype(np.float32)",
                 "w = d * q.astype(np.float32) + m", "llama_tensor_shapes(spec)", "spec.tensor_shapes()",
                 "unpack_scale_min_k4(np.frombuffer(packed, np.uint8))", "w = d * (q.astype(np.float32) - 16)"):  # fmt: skip
        assert step in code, step
    assert "matplotlib.use" not in code and not re.search(r"(?<![\w.])gguf\.quants", code)  # gguf-py's, not ours


@pytest.mark.slow  # about 20 s: a second run of the notebook (the layout check itself has quick tests above)
def test_notebook_shows_a_tampered_file_in_the_layout_table(tmp_path):
    gguf = write_odd_llama(tmp_path / "odd.gguf", drop="blk.0.ffn_up.weight", add=("blk.0.mystery.weight", (32,)))
    metrics, out = run_lesson1_notebook(gguf, tmp_path)
    rows = read_csv(out / "x_layout_check.csv")
    assert {(r["tensor"], r["problem"]) for r in rows} == {
        ("blk.0.ffn_up.weight", "predicted, missing from the file"),
        ("blk.0.mystery.weight", "in the file, not predicted"),
    }
    assert metrics["layout_mismatches"] == 2


@pytest.mark.slow
def test_notebook_on_the_gemma_file(gemma_gguf, tmp_path):
    metrics, out = run_lesson1_notebook(gemma_gguf, tmp_path)
    assert metrics["parameters"] == metrics["layout_parameters_predicted"] == 268_098_176
    assert read_csv(out / "x_layout_check.csv") == [] and metrics["layout_mismatches"] == 0
    types = read_csv(out / "x_block_types.csv")
    assert [r["type"] for r in types] == ["Q8_0", "Q5_0", "Q4_K", "Q6_K", "F32"]
    assert all(r["bit_exact_gguf_py"] == r["bit_exact_bytesup"] == "True" for r in types)
    fields = {r["field"]: r["value"] for r in read_csv(out / "x_block_fields.csv") if r["type"] == "Q4_K"}
    assert json.loads(fields["scale[0..7] (unpacked)"]) == metrics["q4_k_block"]["sub_scales"]
    assert json.loads(fields["min[0..7] (unpacked)"]) == metrics["q4_k_block"]["sub_mins"]
    assert len(read_csv(out / "x_blocks.csv")) == 32 + 32 + 256 + 256 + 1


def test_run_returns_each_table_once(tiny):
    metrics, tables = lesson.run(tiny)
    assert set(metrics) == set(lesson.compute(tiny))
    assert tables["metadata"] == file_tables.metadata_table(tiny) and tables["tensors"] == file_tables.tensor_table(
        tiny
    )
    assert sum(r["bytes"] for r in tables["accounting"][:-1]) == metrics["file_size"]
    pick, blk, checks, rows = tables["blocks"]["Q4_1"]
    assert pick.type_name == "Q4_1" and len(rows) == 32 and checks["bit_exact_gguf_py"] is True


# --- the real default model (skipped where it is absent) -------------------------------------------


def test_default_model_accounting(default_gguf):
    with GGUFFile(default_gguf) as f:
        m = lesson.compute(f, " cat")
    assert (m["version"], m["tensor_count"], m["metadata_count"]) == (3, 272, 33)
    parts = [m[f"bytes_{p}"] for p in file_tables.ACCOUNT_PARTS]  # header, metadata, infos, padding, data
    assert parts == [24, 1_769_483, 16_157, 0, 96_576_768]
    assert m["bytes_accounted"] == m["file_size"] == 98_362_432
    assert m["parameters"] == 134_515_008 and m["layout_from_metadata_matches"] and m["tied_embeddings"]
    assert m["layout_mismatches"] == 0 and m["layout_parameters_predicted"] == 134_515_008
    assert m["block_types"] == ["Q4_1", "Q8_0", "F32"] and m["block_types_bit_exact_gguf_py"] == 3
    assert (m["blocks_in_names"], m["tensors_per_block"]) == (30, 9)
    assert m["type_Q4_1_tensors"] == 210 and m["type_Q8_0_tensors"] == 1 and m["type_F32_tensors"] == 61
    assert m["token_id"] == 2644 and m["q8_0_block_d"] == 0.001438140869140625
    assert m["q4_1_block"]["d"] == 0.04791259765625 and m["q4_1_block"]["m"] == -0.328125
    assert m["q8_0_block_bit_exact_gguf_py"] and m["q4_1_block_bit_exact_gguf_py"]


@pytest.mark.slow
def test_gemma_file_every_type_and_every_tensor(gemma_gguf):
    with GGUFFile(gemma_gguf) as f:
        m, tables = lesson.run(f, " cat")
    assert m["architecture"] == "gemma3" and m["bytes_unaccounted"] == 0
    assert m["parameters"] == m["layout_parameters_predicted"] == 268_098_176
    assert m["layout_mismatches"] == 0 and tables["layout"] == [] and m["layout_predicted_tensors"] == 236
    assert (
        m["parameters_by_part"]["norms"] == 18 * (2 * 640 + 2 * 256 + 2 * 640)
        and "other" not in m["parameters_by_part"]
    )
    assert m["blocks_in_names"] == 18 and m["tensors_per_block"] == 13
    assert m["block_types"] == ["Q8_0", "Q5_0", "Q4_K", "Q6_K", "F32"]
    assert m["block_types_bit_exact_gguf_py"] == m["block_types_bit_exact_bytesup"] == 5
    assert m["q4_k_block_tensor"] == "blk.0.attn_output.weight" and m["q6_k_block_tensor"] == "blk.0.ffn_down.weight"
    # the Q4_K super-block field by field: d, dmin, the 12 packed bytes -> 8 scales and 8 mins
    pick, blk, checks, rows = tables["blocks"]["Q4_K"]
    assert len(pick.raw) == 144 and len(rows) == 256 and all(r["same_bits"] for r in rows)
    assert (blk.d.bits, blk.m.bits) == struct.unpack_from("<HH", pick.raw, 0)
    assert (blk.sub_scales, blk.sub_mins) == unpack(pick.raw[4:16])
    assert all(0 <= v < 64 for v in blk.sub_scales + blk.sub_mins)
    fields = {r["field"]: r["value"] for r in tables["block_fields"] if r["type"] == "Q4_K"}
    assert list(fields) == ["d", "dmin", "scales", "qs", "scale[0..7] (unpacked)", "d * scale[j] (float32)",
                            "min[0..7] (unpacked)", "dmin * min[j] (float32)"]  # fmt: skip
    assert fields["scale[0..7] (unpacked)"] == blk.sub_scales and fields["d"] == blk.d.value
    assert [np.float32(x) for x in fields["dmin * min[j] (float32)"].split(", ")] == [
        np.float32(blk.m.value) * np.float32(m) for m in blk.sub_mins
    ]

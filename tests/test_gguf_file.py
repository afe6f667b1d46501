"""bytesup.gguf.file: values read from synthetic and real files, checked against gguf-py and by hand."""

from __future__ import annotations

import os
import struct
import tracemalloc
from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import pytest

from bytesup.gguf.file import (
    GGUFFile,
    GGUFFormatError,
    TensorNotFoundError,
    gguf_to_numpy_shape,
    numpy_to_gguf_shape,
    printable,
)
from bytesup.model.synthetic import default_tokens, raw_gguf, write_tiny_llama

F32 = np.float32


def write(tmp_path: Path, data: bytes, name: str = "x.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def error_of(path: Path) -> GGUFFormatError:
    with pytest.raises(GGUFFormatError) as info:
        GGUFFile(path)
    return info.value


# -- the convention ---------------------------------------------------------------------


def test_gguf_dims_are_innermost_first():
    assert gguf_to_numpy_shape([4096, 11008]) == (11008, 4096)  # the course's FFN up matrix
    assert gguf_to_numpy_shape((576,)) == (576,)
    assert gguf_to_numpy_shape([]) == ()
    assert numpy_to_gguf_shape(gguf_to_numpy_shape([2, 3, 4])) == (2, 3, 4)


# -- the synthetic model ----------------------------------------------------------------


def test_header_and_metadata(tiny_gguf):
    with GGUFFile(tiny_gguf) as f:
        assert (f.version, f.alignment) == (3, 32)
        assert f.magic == b"GGUF"
        assert len(f.tensors) == f.tensor_count == 1 + 9 * 2 + 2
        assert f.data_offset % 32 == 0 and 0 <= f.data_offset - f.tensor_infos_end < 32
        m, t = f.metadata, f.metadata_types
        assert m["general.architecture"] == "llama" and t["general.architecture"] == "STRING"
        assert (m["llama.embedding_length"], m["llama.feed_forward_length"], m["llama.block_count"]) == (32, 64, 2)
        assert t["llama.embedding_length"] == "UINT32"
        assert (m["llama.attention.head_count"], m["llama.attention.head_count_kv"]) == (4, 2)
        assert m["llama.attention.layer_norm_rms_epsilon"] == float(F32(1e-5))  # stored as float32
        assert t["llama.attention.layer_norm_rms_epsilon"] == "FLOAT32"
        assert m["tokenizer.ggml.model"] == "gpt2"
        tokens = m["tokenizer.ggml.tokens"]
        assert tokens == default_tokens() and t["tokenizer.ggml.tokens"] == "ARRAY[STRING]"
        assert {"Ġcat", "Ġdog", "Ġcats", "Ġkitten", "<s>", "</s>", "a"} <= set(tokens)
        assert m["tokenizer.ggml.token_type"][:4] == [3, 3, 3, 1] and t["tokenizer.ggml.token_type"] == "ARRAY[INT32]"
        assert "Ġca t" in m["tokenizer.ggml.merges"]
        assert list(f.metadata_offsets)[0] == "general.architecture"
        assert f.metadata_offsets["general.architecture"] == 24


def test_tensors_match_gguf_py(tiny_gguf):
    reader = gguf.GGUFReader(tiny_gguf)
    with GGUFFile(tiny_gguf) as f:
        assert f.data_offset == reader.data_offset
        assert [t.name for t in f.tensors] == [t.name for t in reader.tensors]
        for ours, theirs in zip(f.tensors, reader.tensors, strict=True):
            assert ours.type_name == theirs.tensor_type.name
            assert ours.ggml_type == int(theirs.tensor_type)
            assert ours.shape_gguf == tuple(int(d) for d in theirs.shape)
            assert ours.offset == theirs.data_offset
            assert ours.n_bytes == theirs.n_bytes and ours.n_elements == theirs.n_elements
            assert ours.offset == f.data_offset + ours.relative_offset
            assert np.array_equal(f.raw(ours.name), np.asarray(theirs.data).reshape(-1).view(np.uint8))
            expected = gguf.quants.dequantize(theirs.data, theirs.tensor_type).reshape(ours.shape)
            assert np.array_equal(f.load(ours.name).view(np.uint32), expected.view(np.uint32))
        assert reader.tensors[0].field.offset == f.metadata_end  # where the tensor infos start


def test_shapes_in_numpy_order(tiny_gguf):
    with GGUFFile(tiny_gguf) as f:
        emb = f.tensor("token_embd.weight")
        assert emb.shape == (len(default_tokens()), 32) and emb.shape_gguf == (32, len(default_tokens()))
        assert (emb.type_name, emb.n_bytes) == ("Q8_0", emb.n_elements // 32 * 34)
        assert f.tensor("blk.0.ffn_down.weight").shape == (32, 64)  # n_embd rows of n_ff
        assert f.tensor("blk.0.ffn_up.weight").shape == (64, 32)
        assert f.tensor("blk.0.attn_k.weight").shape == (16, 32)  # n_embd / n_head * n_head_kv
        assert f.load("blk.0.ffn_up.weight").shape == (64, 32)
        types = Counter(t.type_name for t in f.tensors)
        assert types == {"Q4_1": 8, "F32": 4, "Q4_0": 3, "Q8_0": 2, "F16": 1, "BF16": 1, "Q5_0": 1, "Q5_1": 1}


def test_loaded_values_look_like_the_weights_written(tmp_path):
    """Norms near 1; the cat-like tokens share a direction in the embedding."""
    path = write_tiny_llama(tmp_path / "t.gguf", seed=3)
    with GGUFFile(path) as f:
        norm = f.load("output_norm.weight")
        assert norm.dtype == np.float32 and norm.flags.writeable
        assert not np.shares_memory(norm, f.raw("output_norm.weight"))
        assert 0.5 < float(norm.mean()) < 1.5
        emb = f.load("token_embd.weight")
    tokens = default_tokens()
    cat, cats, dog = (emb[tokens.index(w)] for w in ("Ġcat", "Ġcats", "Ġdog"))

    def cos(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    assert cos(cat, cats) > 0.6 and cos(cat, cats) > cos(cat, dog) > cos(cat, emb[tokens.index("a")])


def test_same_seed_same_bytes(tmp_path):
    a = write_tiny_llama(tmp_path / "a.gguf", seed=1).read_bytes()
    assert a == write_tiny_llama(tmp_path / "b.gguf", seed=1).read_bytes()
    assert a != write_tiny_llama(tmp_path / "c.gguf", seed=2).read_bytes()


def test_byte_accounting_sums_to_file_size(tiny_gguf):
    with GGUFFile(tiny_gguf) as f:
        acc = f.byte_accounting()
        assert (
            sum(acc[k] for k in ("header", "metadata", "tensor_infos", "padding", "tensor_data"))
            == acc["file_size"]
            == tiny_gguf.stat().st_size
        )
        assert acc["header"] == 24
        assert acc["tensor_data"] == sum(t.n_bytes for t in f.tensors)
        assert sum(acc["padding_parts"].values()) == acc["padding"]
        assert acc["padding_parts"]["before_data"] == f.data_offset - f.tensor_infos_end
        # GGUFWriter pads every tensor to 32 bytes
        expected_between = sum(-t.n_bytes % 32 for t in f.tensors[:-1])
        assert acc["padding_parts"]["between_tensors"] == expected_between


def test_raw_is_a_read_only_view_that_outlives_close(tiny_gguf):
    f = GGUFFile(tiny_gguf)  # without `with`
    raw = f.raw("blk.0.attn_norm.weight")
    assert raw.dtype == np.uint8 and raw.size == 128 and not raw.flags.writeable
    with pytest.raises(ValueError):
        raw[0] = 1
    expected = tiny_gguf.read_bytes()[f.tensor("blk.0.attn_norm.weight").offset :][:128]
    f.close()
    f.close()  # twice is fine
    assert raw.tobytes() == expected
    with pytest.raises(ValueError, match="closed"):
        f.raw("blk.0.attn_norm.weight")


def test_unknown_tensor_name_suggests(tiny_gguf):
    with GGUFFile(tiny_gguf) as f:
        with pytest.raises(KeyError) as info:
            f.tensor("blk.0.attn_q")
    assert isinstance(info.value, TensorNotFoundError)
    assert "no tensor named 'blk.0.attn_q'" in str(info.value) and "'blk.0.attn_q.weight'" in str(info.value)


def test_version_2_reads_the_same(tiny_gguf, tmp_path):
    data = bytearray(tiny_gguf.read_bytes())
    data[4:8] = struct.pack("<I", 2)
    v2 = write(tmp_path, bytes(data), "v2.gguf")
    with GGUFFile(tiny_gguf) as a, GGUFFile(v2) as b:
        assert b.version == 2
        assert a.metadata == b.metadata and a.tensors == b.tensors


def test_custom_alignment(tmp_path):
    path = tmp_path / "a64.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    w.add_tensor("a", np.arange(5, dtype=np.float32))
    w.add_tensor("b", np.arange(32, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with GGUFFile(path) as f:
        assert f.alignment == 64 and f.metadata_types["general.alignment"] == "UINT32"
        assert f.data_offset % 64 == 0 and all(t.offset % 64 == 0 for t in f.tensors)
        assert f.load("a").tolist() == [0, 1, 2, 3, 4]
        assert f.load("b").tolist() == list(range(32))
        assert f.byte_accounting()["padding_parts"]["between_tensors"] == 64 - 20


def test_metadata_value_types(tmp_path):
    kv = [
        ("u8", "UINT8", 255), ("i8", "INT8", -128), ("u16", "UINT16", 65535), ("i16", "INT16", -32768),
        ("u32", "UINT32", 2**32 - 1), ("i32", "INT32", -(2**31)), ("f32", "FLOAT32", 0.1), ("b", "BOOL", 1),
        ("s", "STRING", "Ġcat \n<script>"), ("u64", "UINT64", 2**64 - 1), ("i64", "INT64", -(2**63)),
        ("f64", "FLOAT64", 0.1), ("empty", "ARRAY", ("UINT8", [])), ("bools", "ARRAY", ("BOOL", [0, 1])),
        ("nested", "ARRAY", ("ARRAY", [("INT16", [1, -2]), ("STRING", ["x", ""])])), ("", "STRING", ""),
    ]  # fmt: skip
    with GGUFFile(write(tmp_path, raw_gguf(kv))) as f:
        m, t = f.metadata, f.metadata_types
        assert (m["u8"], m["i8"], m["u16"], m["i16"], m["u32"], m["i32"]) == (255, -128, 65535, -32768, 2**32 - 1,
                                                                             -(2**31))  # fmt: skip
        assert m["f32"] == float(F32(0.1)) and m["f64"] == 0.1
        assert m["b"] is True and m["bools"] == [False, True]
        assert m["s"] == "Ġcat \n<script>" and m[""] == ""
        assert (m["u64"], m["i64"]) == (2**64 - 1, -(2**63))
        assert m["empty"] == [] and m["nested"] == [[1, -2], ["x", ""]]
        assert t["nested"] == "ARRAY[ARRAY]" and t["bools"] == "ARRAY[BOOL]" and t["u64"] == "UINT64"
        assert f.tensors == [] and f.byte_accounting()["file_size"] == f.file_size


def test_invalid_utf8_in_a_value_is_kept_visible(tmp_path, caplog):
    with GGUFFile(write(tmp_path, raw_gguf([("k", "STRING", b"ok\xff")]))) as f:
        assert f.metadata["k"] == "ok\\xff"
    assert "invalid UTF-8" in caplog.text


def test_zero_size_and_scalar_tensors(tmp_path):
    data = np.float32(7).tobytes()
    path = write(tmp_path, raw_gguf([], [("empty", (0, 4), 0, 0), ("scalar", (), 0, 0)], data))
    with GGUFFile(path) as f:
        assert f.tensor("empty").shape == (4, 0) and f.load("empty").shape == (4, 0)
        assert f.tensor("scalar").shape == () and f.load("scalar") == 7
        assert f.raw("empty").size == 0


# -- malformed files: one GGUFFormatError naming the place ------------------------------

GOOD_TENSOR = [("w", (32, 2), 0, 0)]
GOOD_DATA = bytes(256)


@pytest.mark.parametrize(
    "data, where, what",
    [
        (b"", 0, "file is empty"),
        (b"GGUF\x03\x00", 0, "file is only 6 bytes"),
        (b"PK\x03\x04" + bytes(40), 0, "not a GGUF file: magic is b'PK\\x03\\x04'"),
        (raw_gguf(version=1), 4, "unsupported GGUF version 1"),
        (raw_gguf(version=4), 4, "unsupported GGUF version 4"),
        (raw_gguf(version=3 << 24), 4, "big-endian GGUF (version 3) is not supported"),
        (raw_gguf(n_kv=2**60), 16, "metadata count 1152921504606846976 cannot fit"),
        (raw_gguf(n_tensors=2**62), 8, "tensor count 4611686018427387904 cannot fit"),
        (raw_gguf([("k", "STRING", "v")], n_kv=2), 16, "metadata count 2 cannot fit in the 22 bytes"),
        (raw_gguf([("k", "STRING", "v"), ("k", "UINT8", 1)]), 46, "duplicate metadata key 'k'"),
        (raw_gguf([("k", "BOOL", 2)]), 37, "bool byte is 2"),
        (raw_gguf([("k", "ARRAY", ("BOOL", [0, 5]))]), 50, "bool byte is 5"),
        (raw_gguf([("general.alignment", "UINT32", 48)]), 24, "alignment 48 is not a power of two"),
        (raw_gguf([("general.alignment", "UINT32", 0)]), 24, "alignment 0 is not a power of two"),
        (raw_gguf([("general.alignment", "UINT64", 32)]), 24, "must be UINT32, found UINT64"),
        (raw_gguf([], GOOD_TENSOR * 2, GOOD_DATA), None, "duplicate tensor name 'w'"),
        (raw_gguf([], [("w", (32, 2, 1, 1, 1), 0, 0)], GOOD_DATA), 33, "5 dimensions, at most 4"),
        (raw_gguf([], [("w", (2**63, 1), 0, 0)], GOOD_DATA), 37, "dimension 0 is 9223372036854775808"),
        (raw_gguf([], [("w", (32, 2), 99, 0)], GOOD_DATA), 53, "unknown ggml type 99"),
        (raw_gguf([], [("w", (32, 2), 4, 0)], GOOD_DATA), 53, "unknown ggml type 4"),  # Q4_2, long removed
        (raw_gguf([], [("w", (48, 2), 8, 0)], GOOD_DATA), 33, "innermost dimension 48 is not a multiple of the Q8_0"),
        (raw_gguf([], [("w", (32, 2), 0, 16)], GOOD_DATA), 57, "data offset 16 is not a multiple of the alignment 32"),
        (raw_gguf([], GOOD_TENSOR, GOOD_DATA[:200]), 57, "data [96, 352) runs past the end of the file (296 bytes"),
        (raw_gguf([], [("w", (2**40, 2**20), 0, 0)], GOOD_DATA), 33, "more than the whole file"),
        (raw_gguf([], [("a", (32,), 0, 0), ("b", (32,), 0, 64)], GOOD_DATA), None, "overlaps tensor 'a'"),
    ],
)
def test_malformed(tmp_path, data, where, what):
    err = error_of(write(tmp_path, data))
    assert what in str(err), str(err)
    if where is not None:
        assert err.offset == where and str(err).endswith(f" at byte {where}")
    assert str(err).startswith(str(tmp_path / "x.gguf") + ": ")
    assert "\n" not in str(err)


def test_unknown_value_type_and_deep_nesting(tmp_path):
    bad_type = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 13) + b"x"
    err = error_of(write(tmp_path, bad_type))
    assert "metadata 'k': unknown value type 13" in str(err) and err.offset == 33
    deep = ("UINT8", [1])
    for _ in range(20):
        deep = ("ARRAY", [deep])
    err = error_of(write(tmp_path, raw_gguf([("k", "ARRAY", deep)])))
    assert "nested deeper than 8" in str(err)


def test_tensor_and_key_names_must_be_utf8(tmp_path):
    data = raw_gguf([("ok", "UINT8", 1)])
    data = data.replace(b"ok", b"o\xff")
    err = error_of(write(tmp_path, data))
    assert "metadata key #0: is not valid UTF-8" in str(err) and err.offset == 24
    data = raw_gguf([], [("w", (32,), 0, 0)], GOOD_DATA).replace(b"w", b"\xff")
    assert "tensor #0 name: is not valid UTF-8" in str(error_of(write(tmp_path, data)))


def test_huge_lengths_do_not_allocate(tmp_path):
    """Lengths and counts near 2**64 must fail on the arithmetic, not on a giant allocation."""
    cases = [
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**63) + b"key",  # key length
        raw_gguf([("k", "STRING", "v")]).replace(struct.pack("<Q", 1) + b"v", struct.pack("<Q", 2**64 - 1) + b"v"),
        raw_gguf([("k", "ARRAY", ("UINT64", [1]))]).replace(struct.pack("<IQ", 10, 1), struct.pack("<IQ", 10, 2**61)),
        raw_gguf([("k", "ARRAY", ("STRING", ["a"]))]).replace(struct.pack("<IQ", 8, 1), struct.pack("<IQ", 8, 2**60)),
        raw_gguf([("k", "ARRAY", ("ARRAY", [("UINT8", [1])]))]).replace(
            struct.pack("<IQ", 9, 1), struct.pack("<IQ", 9, 2**63)
        ),
        raw_gguf([], [("w", (2**62, 2**62), 0, 0)], GOOD_DATA),
        raw_gguf(n_tensors=2**64 - 1, n_kv=2**64 - 1),
    ]
    for i, data in enumerate(cases):
        path = write(tmp_path, data, f"huge{i}.gguf")
        tracemalloc.start()
        try:
            with pytest.raises(GGUFFormatError):
                GGUFFile(path)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1_000_000, (i, peak)


def test_missing_file_directory_and_fifo(tmp_path):
    with pytest.raises(FileNotFoundError):
        GGUFFile(tmp_path / "nope.gguf")
    with pytest.raises(GGUFFormatError, match="not a regular file"):
        GGUFFile(tmp_path)
    os.mkfifo(tmp_path / "fifo.gguf")
    with pytest.raises(GGUFFormatError, match="not a regular file"):  # and does not hang
        GGUFFile(tmp_path / "fifo.gguf")
    assert "not a GGUF file: magic is b'PK" in str(error_of(write(tmp_path, b"PK\x03\x04\x00")))


def test_error_messages_are_one_printable_line(tmp_path):
    name = "evil\n\x1b[31mname\u2028"
    data = raw_gguf([], [(name, (32,), 99, 0)], GOOD_DATA)
    err = error_of(write(tmp_path, data, "we\nird.gguf"))
    assert str(err).isprintable()
    assert "\\n" in str(err) and "\\x1b" in str(err)
    assert printable("a\tb") == "a\\tb" and printable("Ġcat") == "Ġcat"


def test_unsupported_type_fails_on_load_only(tmp_path):
    """Q8_1 is a valid GGUF type that neither we nor gguf.quants can dequantize."""
    path = write(tmp_path, raw_gguf([], [("q", (32,), 9, 0)], bytes(64)))
    with GGUFFile(path) as f:
        assert f.tensor("q").type_name == "Q8_1" and f.tensor("q").n_bytes == 40
        with pytest.raises(GGUFFormatError, match=r"tensor 'q': ggml type 9 \(Q8_1\) cannot be dequantized"):
            f.load("q")


# -- the real default model ---------------------------------------------------------------


def test_default_model_header_and_metadata(default_gguf):
    with GGUFFile(default_gguf) as f:
        assert (f.version, f.alignment, f.file_size) == (3, 32, 98_362_432)
        assert (len(f.tensors), len(f.metadata), f.data_offset) == (272, 33, 1_785_664)
        m = f.metadata
        assert m["general.architecture"] == "llama"
        assert (m["llama.block_count"], m["llama.embedding_length"], m["llama.feed_forward_length"]) == (30, 576, 1536)
        assert m["llama.attention.layer_norm_rms_epsilon"] == float(F32(1e-5))
        assert f.metadata_types["llama.attention.layer_norm_rms_epsilon"] == "FLOAT32"
        tokens = m["tokenizer.ggml.tokens"]
        assert len(tokens) == 49152 and len(m["tokenizer.ggml.token_type"]) == 49152
        assert "Ġcat" in tokens and tokens.index("Ġcat") == 2644
        assert m["tokenizer.ggml.model"] == "gpt2" and len(m["tokenizer.ggml.merges"]) == 48900
        emb = f.tensor("token_embd.weight")
        assert (emb.type_name, emb.shape_gguf, emb.shape) == ("Q8_0", (576, 49152), (49152, 576))
        assert emb.offset == f.data_offset and emb.n_bytes == 49152 * 576 // 32 * 34
        assert "output.weight" not in f.tensor_names  # tied embeddings
        assert f.tensor("blk.0.ffn_down.weight").shape == (576, 1536)
        assert f.tensor("blk.0.ffn_up.weight").shape == (1536, 576)
        assert Counter(t.type_name for t in f.tensors) == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
        acc = f.byte_accounting()
        assert acc == {
            "header": 24, "metadata": 1_769_483, "tensor_infos": 16_157, "padding": 0,
            "tensor_data": 96_576_768, "file_size": 98_362_432,
            "padding_parts": {"before_data": 0, "between_tensors": 0, "trailing": 0},
            "parts": 1, "tensor_data_missing": 0,
        }  # fmt: skip


def test_default_model_offsets_match_gguf_py(default_gguf):
    reader = gguf.GGUFReader(default_gguf)
    with GGUFFile(default_gguf) as f:
        assert f.data_offset == reader.data_offset
        theirs = {t.name: (t.data_offset, int(t.n_bytes), t.tensor_type.name, tuple(map(int, t.shape)))
                  for t in reader.tensors}  # fmt: skip
        ours = {t.name: (t.offset, t.n_bytes, t.type_name, t.shape_gguf) for t in f.tensors}
        assert ours == theirs

"""bytesup.gguf.quants and bytesup.gguf.dequant: every record's clear and fast dequantizer, bit for bit
against gguf.quants, and each record's facts against gguf-py's block table."""

from __future__ import annotations

import logging
import zlib

import numpy as np
import pytest
from gguf import quants as gguf_quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup.gguf import sizes
from bytesup.gguf.dequant import bit_equal, dequantize, dequantizer_used, reference_dequantize
from bytesup.gguf.file import GGUFFile
from bytesup.gguf.quants import QUANTS, kernels
from bytesup.gguf.quants.base import SuperBlock
from bytesup.gguf.quants.iq4 import KVALUES_IQ4, unpack_iq4_xs_scales
from bytesup.gguf.quants.kquants import unpack_q3_k_scales, unpack_scale_min_k4

# Every test below runs over the registry: a record added to QUANTS is tested without a line here.
TYPES = sorted(QUANTS)
PROMISED = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
            "IQ4_NL", "IQ4_XS"}  # fmt: skip


def gguf_py_quantizes(type_name: str) -> bool:
    """gguf-py can quantize this type (the rest it only dequantizes: they are tested on random bytes)."""
    try:
        gguf_quants.quantize(np.zeros((1, 256), np.float32), GGMLQuantizationType[type_name])
    except NotImplementedError:
        return False
    return True


QUANTIZABLE = [t for t in TYPES if gguf_py_quantizes(t)]
SUPER_BLOCK_TYPES = [t for t in TYPES if issubclass(QUANTS[t], SuperBlock)]
BLOCK_TYPES = [t for t in TYPES if QUANTS[t].block_size > 1]  # every type with a scale: random blocks


def same_bits(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Bit-identical float32, except that any NaN matches any NaN (payloads may differ)."""
    ours, theirs = np.asarray(ours, np.float32).reshape(-1), np.asarray(theirs, np.float32).reshape(-1)
    if ours.shape != theirs.shape:
        return False
    nan = np.isnan(theirs)
    if not np.array_equal(nan, np.isnan(ours)):
        return False
    return np.array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))


def encode(x: np.ndarray, type_name: str) -> np.ndarray:
    """float32 weights -> GGUF bytes (rows of bytes), by gguf-py's own quantizer."""
    if type_name == "F32":
        return x.astype(np.float32).view(np.uint8)
    return gguf_quants.quantize(x, GGMLQuantizationType[type_name]).view(np.uint8)


def gguf_reference(q: np.ndarray, type_name: str) -> np.ndarray:
    """gguf.quants.dequantize called directly, as gguf-py's own users call it."""
    return gguf_quants.dequantize(q, GGMLQuantizationType[type_name])


def weights(kind: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == "zeros":
        return np.zeros(shape, np.float32)
    if kind == "huge":  # fp16 scales overflow to inf for the biggest blocks
        return x * np.float32(1e6)
    if kind == "tiny":  # scales become fp16 subnormals or zero
        return x * np.float32(1e-7)
    if kind == "negative":
        return -np.abs(x)
    if kind == "mixed":  # rows of very different magnitude, a zero row, a constant row, a lone spike
        x *= np.logspace(-6, 4, shape[0], dtype=np.float32)[:, None]
        x[0, :8] = 0
        x[-1, 8:16] = 0.5
        x[0, 20] = 1e4
        return x
    return x


def fp16_offsets(type_name: str) -> list[int]:
    """Where a block keeps its fp16 numbers (d, and dmin or m), as its record declares them. A record
    that puts them in the wrong place still fails: gguf-py then reads random bits as its scales."""
    return [at for name, at in QUANTS[type_name].at.items() if name in ("d", "dmin", "m")]


def finite_blocks(type_name: str, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """(n_blocks, type_size) random bytes whose fp16 fields are finite (any sign, subnormals and zero too)."""
    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    if block_size == 1:  # F32, F16, BF16: one number per "block"
        x = rng.standard_normal(n_blocks).astype(np.float32)
        bits = {"F32": x, "F16": x.astype(np.float16), "BF16": (x.view(np.uint32) >> 16).astype(np.uint16)}[type_name]
        return bits.view(np.uint8).reshape(n_blocks, type_size)
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for at in fp16_offsets(type_name):
        bits = rng.integers(0, 0x7C00, size=n_blocks, dtype=np.uint16) | (rng.integers(0, 2, n_blocks, np.uint16) << 15)
        raw[:, at : at + 2] = bits.astype("<u2").view(np.uint8).reshape(n_blocks, 2)
    return raw


SHAPES = [(1, 32), (3, 64), (17, 96), (256, 576)]  # rows of blocks of 32; a type of longer blocks: as many blocks
KINDS = ["normal", "zeros", "huge", "tiny", "negative", "mixed"]


@pytest.mark.parametrize("type_name", QUANTIZABLE)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", KINDS)
def test_clear_and_fast_match_gguf_on_quantized_weights(type_name, shape, kind):
    shape = (shape[0], shape[1] * max(1, QUANTS[type_name].block_size // 32))
    rng = np.random.default_rng(zlib.crc32(repr((type_name, shape, kind)).encode()))
    with np.errstate(all="ignore"):
        q = encode(weights(kind, shape, rng), type_name)
        expected = gguf_reference(q, type_name)
        clear, fast = QUANTS[type_name].clear, QUANTS[type_name].fast
        flat = q.reshape(-1)
        assert same_bits(clear(flat), expected), "clear"
        assert same_bits(fast(flat), expected), "fast"
        assert same_bits(dequantize(flat, type_name, shape), expected)
    assert dequantize(flat, type_name, shape).shape == shape


RANDOM_SHAPES = [(1, 256), (3, 512), (7, 768), (33, 2048)]


@pytest.mark.parametrize("type_name", BLOCK_TYPES)
@pytest.mark.parametrize("shape", RANDOM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_random_blocks_bit_exact(type_name, shape):
    """Random bytes with finite fp16 fields: every quant, scale and minimum pattern; identical float32 bits."""
    block_size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]][0]
    rng = np.random.default_rng(zlib.crc32(repr((type_name, shape)).encode()))
    raw = finite_blocks(type_name, shape[0] * shape[1] // block_size, rng)
    expected = reference_dequantize(raw.reshape(-1), type_name, shape)
    assert np.isfinite(expected).all() and np.count_nonzero(expected) > expected.size // 2
    clear, fast = QUANTS[type_name].clear, QUANTS[type_name].fast
    flat = raw.reshape(-1)
    assert bit_equal(clear(flat), expected.reshape(-1)), "clear"
    assert bit_equal(fast(flat), expected.reshape(-1)), "fast"
    assert bit_equal(fast(flat, threads=2), expected.reshape(-1)), "fast, 2 threads"
    assert bit_equal(dequantize(flat, type_name, shape), expected)


@pytest.mark.parametrize("type_name", TYPES)
def test_every_bit_pattern(type_name):
    """Random bytes: every scale pattern, including inf, NaN and subnormal fp16 scales."""
    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    rng = np.random.default_rng(7)
    n_blocks = 70_000 // type_size * (32 // block_size if block_size == 1 else 1)
    raw = rng.integers(0, 256, size=n_blocks * type_size, dtype=np.uint8)
    # the first values (or block scales) planted: +-inf, NaN, 0, -0, smallest subnormal, largest
    special = np.array([0x7C00, 0xFC00, 0x7E01, 0x0000, 0x8000, 0x0001, 0x7BFF], np.uint16)
    if type_name == "BF16":
        special = np.array([0x7F80, 0xFF80, 0x7FC1, 0x0000, 0x8000, 0x0001, 0x7F7F], np.uint16)
    if type_name != "F32":
        step = type_size if block_size > 1 else 2
        at = fp16_offsets(type_name)[0] if block_size > 1 else 0
        for i, bits in enumerate(special.view(np.uint8).reshape(-1, 2)):
            raw[at + i * step : at + i * step + 2] = bits
    with np.errstate(all="ignore"):
        expected = gguf_reference(raw.reshape(n_blocks, -1), type_name)
        clear, fast = QUANTS[type_name].clear, QUANTS[type_name].fast
        assert same_bits(clear(raw), expected)
        assert same_bits(fast(raw), expected)
    if type_name != "F32":
        assert np.isnan(expected).any() and np.isinf(expected).any()


@pytest.mark.parametrize("type_name", TYPES)
def test_fast_spans_several_chunks_and_fills_out(type_name, monkeypatch):
    """The fast versions step through CHUNK_BLOCKS at a time; make chunks tiny to test the seams."""
    monkeypatch.setattr(kernels, "CHUNK_BLOCKS", 3)  # 3 blocks of 32, or 1 super-block, per chunk
    q = finite_blocks(type_name, 10, np.random.default_rng(1))
    expected = gguf_reference(q, type_name)
    fast = QUANTS[type_name].fast
    for threads in (1, 3):
        out = np.full(expected.size, np.nan, np.float32)
        result = fast(q.reshape(-1), out=out, threads=threads)
        assert result is out and bit_equal(out, expected.reshape(-1)), threads


def test_registry_and_dispatch(caplog):
    assert set(QUANTS) >= PROMISED and set(QUANTS) == set(QUANTIZABLE) | set(BLOCK_TYPES)
    assert {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"} <= set(QUANTIZABLE) and "Q4_K" not in QUANTIZABLE
    assert dequantizer_used("Q4_1") == "hand" and dequantizer_used("Q6_K") == "hand"
    other = next(t for t in ("TQ2_0", "TQ1_0", "IQ2_XXS") if t not in QUANTS)  # gguf-py has it, we do not
    assert dequantizer_used(other) == "fallback"
    # a type we don't hand-write goes to gguf.quants, and says so
    rng = np.random.default_rng(2)
    block_size, type_size = sizes.block_shape(other)
    raw = rng.integers(0, 256, size=2 * type_size, dtype=np.uint8)  # two blocks
    with caplog.at_level(logging.INFO, logger="bytesup.gguf.dequant"), np.errstate(all="ignore"):
        ours = dequantize(raw, other, (2, block_size))
        theirs = gguf_reference(raw.reshape(2, -1), other)
    assert f"no hand dequantizer for {other}" in caplog.text
    assert ours.shape == (2, block_size) and same_bits(ours, theirs)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bytesup.gguf.dequant"):
        dequantize(finite_blocks("Q6_K", 2, rng).reshape(-1), "Q6_K", (2, 256))
    assert "no hand dequantizer" not in caplog.text


def test_worker_threads_keep_the_callers_errstate(monkeypatch):
    """Chunks run in pool threads; np.errstate set by the caller holds there too (quiet, or raising)."""
    import warnings

    monkeypatch.setattr(kernels, "CHUNK_BLOCKS", 3)
    raw = np.zeros((40, 34), np.uint8)
    raw[:, 0:2] = np.array([0x7C00], "<u2").view(np.uint8)  # d = +inf, every q = 0: inf * 0 is NaN
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="ignore"):
            out = QUANTS["Q8_0"].fast(raw.reshape(-1), threads=2)
    assert out.shape == (1280,) and np.isnan(out).all()
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
        QUANTS["Q8_0"].fast(raw.reshape(-1), threads=2)


def test_default_threads(monkeypatch):
    """One thread unless $BYTESUP_THREADS asks for more; a job runner's $OMP_NUM_THREADS is BLAS's."""
    monkeypatch.delenv("BYTESUP_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert kernels.default_threads() == 1
    monkeypatch.setenv("BYTESUP_THREADS", "5")
    assert kernels.default_threads() == 5
    monkeypatch.setenv("BYTESUP_THREADS", "zero")  # not a positive integer: the default
    assert kernels.default_threads() == 1


def test_dispatch_errors():
    with pytest.raises(ValueError, match="needs 34 bytes, got 33"):
        dequantize(np.zeros(33, np.uint8), "Q8_0", (32,))
    with pytest.raises(ValueError, match="not a multiple of the block size 32"):
        dequantize(np.zeros(34, np.uint8), "Q8_0", (1, 16))
    with pytest.raises(ValueError, match="row length 128 is not a multiple of the block size 256"):
        dequantize(np.zeros(144, np.uint8), "Q4_K", (2, 128))
    with pytest.raises(ValueError, match="Q4_K: 145 bytes is not a whole number of 144-byte blocks"):
        QUANTS["Q4_K"].split(np.zeros(145, np.uint8))
    with pytest.raises(ValueError, match="expected uint8"):
        dequantize(np.zeros(8, np.float32), "F32", (8,))
    with pytest.raises(ValueError, match="unknown ggml type name 'Q9_9'"):
        dequantize(np.zeros(8, np.uint8), "Q9_9", (2,))
    with pytest.raises(NotImplementedError, match="Q8_1"):
        dequantize(np.zeros(40, np.uint8), "Q8_1", (32,))


def test_results_are_fresh_arrays():
    raw = np.arange(16, dtype=np.float32).view(np.uint8)
    raw.flags.writeable = False
    out = dequantize(raw, "F32", (4, 4))
    assert out.flags.writeable and not np.shares_memory(out, raw)
    assert out.tolist() == np.arange(16, dtype=np.float32).reshape(4, 4).tolist()
    assert dequantize(np.zeros(0, np.uint8), "Q8_0", (0, 32)).shape == (0, 32)
    assert reference_dequantize(np.zeros(0, np.uint8), "Q4_1", (0, 32)).shape == (0, 32)


def test_known_values_by_hand():
    """One Q8_0 block and one Q4_1 block decoded on paper."""
    q8 = np.concatenate([np.float16(0.5).reshape(1).view(np.uint8), np.arange(-16, 16, dtype=np.int8).view(np.uint8)])
    assert dequantize(q8, "Q8_0", (32,)).tolist() == [0.5 * q for q in range(-16, 16)]
    d, m = np.float16(0.25), np.float16(-1.0)
    qs = np.array([(15 - j) << 4 | j for j in range(16)], np.uint8)  # low nibble j, high nibble 15-j
    q41 = np.concatenate([np.array([d, m], np.float16).view(np.uint8), qs])
    expected = [0.25 * j - 1 for j in range(16)] + [0.25 * (15 - j) - 1 for j in range(16)]
    for f in (QUANTS["Q4_1"].clear, QUANTS["Q4_1"].fast):
        assert f(q41).tolist() == expected


# -- the super-block fields, unpacked on their own ------------------------------------------


def get_scale_min_k4(j: int, q: bytes) -> tuple[int, int]:
    """llama.cpp's get_scale_min_k4 (ggml-quants.c), transcribed: scale and minimum of sub-block j."""
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def q3_k_scales_ggml(q: bytes) -> list[int]:
    """llama.cpp's dequantize_row_q3_K scale unpacking (kmask1, kmask2 on three uint32 words), transcribed."""
    aux = list(np.frombuffer(q, "<u4").astype(int))
    kmask1, kmask2, tmp = 0x03030303, 0x0F0F0F0F, aux[2]
    aux.append(0)
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4)
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4)
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4)
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4)
    return [s - 32 for s in np.array(aux, "<u4").view(np.int8).tolist()]  # int8 scales, stored + 32


def test_packed_scales_match_ggml():
    rng = np.random.default_rng(3)
    packed = rng.integers(0, 256, size=(50, 12), dtype=np.uint8)
    scale, minimum = unpack_scale_min_k4(packed)
    q3 = unpack_q3_k_scales(packed)
    for row, s, m, s3 in zip(packed, scale, minimum, q3):
        assert [get_scale_min_k4(j, bytes(row)) for j in range(8)] == list(zip(s.tolist(), m.tolist()))
        assert q3_k_scales_ggml(bytes(row)) == s3.tolist()
    assert scale.dtype == np.uint8 and scale.max() <= 63 and q3.min() >= -32 and q3.max() <= 31
    # IQ4_XS: ls = ((scales_l[j/2] >> 4*(j%2)) & 0xf) | (((scales_h >> 2*j) & 3) << 4), minus 32
    h, low = rng.integers(0, 256, size=(50, 2), dtype=np.uint8), rng.integers(0, 256, size=(50, 4), dtype=np.uint8)
    for hh, ll, got in zip(h, low, unpack_iq4_xs_scales(h, low)):
        sh, ll = int(hh[0]) | int(hh[1]) << 8, ll.tolist()
        assert got.tolist() == [((ll[j // 2] >> 4 * (j % 2)) & 0xF | ((sh >> 2 * j) & 3) << 4) - 32 for j in range(8)]


def pack_scale_min_k4(scale: list[int], minimum: list[int]) -> np.ndarray:
    """The inverse of get_scale_min_k4: eight 6-bit scales and minimums into 12 bytes."""
    q = [0] * 12
    for j in range(4):
        q[j] = scale[j] | (scale[j + 4] >> 4) << 6
        q[j + 4] = minimum[j] | (minimum[j + 4] >> 4) << 6
        q[j + 8] = (scale[j + 4] & 0xF) | (minimum[j + 4] & 0xF) << 4
    return np.array(q, np.uint8)


def test_q4_k_super_block_by_hand():
    """One Q4_K super-block built field by field and decoded on paper: w = d*scale[j]*q - dmin*min[j]."""
    scale, minimum = [1, 2, 3, 5, 17, 33, 48, 63], [0, 7, 16, 31, 32, 47, 62, 63]
    q = [(w * 7) % 16 for w in range(256)]
    qs = np.zeros(128, np.uint8)
    for w, v in enumerate(q):  # run r: low nibbles weights 64r..64r+31, high nibbles 64r+32..64r+63
        r, i = divmod(w, 64)
        qs[32 * r + i % 32] |= v << (4 * (i // 32))
    d, dmin = np.float16(0.5), np.float16(0.125)
    raw = np.concatenate([np.array([d, dmin], np.float16).view(np.uint8), pack_scale_min_k4(scale, minimum), qs])
    fields = QUANTS["Q4_K"].split(raw)
    assert [(k, v.shape) for k, v in fields.items()] == [
        ("d", (1, 2)),
        ("dmin", (1, 2)),
        ("scales", (1, 12)),
        ("qs", (1, 128)),
    ]
    assert [a.tolist() for a in unpack_scale_min_k4(fields["scales"][0])] == [scale, minimum]
    u = QUANTS["Q4_K"].unpack_fields(raw)
    assert (u["d"].tolist(), u["dmin"].tolist()) == ([0.5], [0.125])
    assert (u["scale"].tolist(), u["min"].tolist(), u["q"].tolist()) == ([scale], [minimum], [q])
    expected = [0.5 * scale[w // 32] * q[w] - 0.125 * minimum[w // 32] for w in range(256)]
    for f in (QUANTS["Q4_K"].clear, QUANTS["Q4_K"].fast):
        assert f(raw).tolist() == expected
    assert reference_dequantize(raw, "Q4_K", (256,)).tolist() == expected


def test_iq4_nl_block_by_hand():
    d = np.float16(0.5)
    qs = np.array([(15 - j) << 4 | j for j in range(16)], np.uint8)  # low nibble j, high nibble 15-j
    raw = np.concatenate([np.array([d], np.float16).view(np.uint8), qs])
    expected = [0.5 * int(KVALUES_IQ4[j]) for j in range(16)] + [0.5 * int(KVALUES_IQ4[15 - j]) for j in range(16)]
    for f in (QUANTS["IQ4_NL"].clear, QUANTS["IQ4_NL"].fast):
        assert f(raw).tolist() == expected


@pytest.mark.parametrize("type_name", TYPES)
def test_every_record_matches_ggml(type_name):
    """A record's name is its key, its block is gguf-py's, its fields fill that block exactly (each field
    once, in file order) and it says what it computes."""
    q = QUANTS[type_name]
    assert q.name == type_name
    assert (q.block_size, q.type_size) == GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    assert q.fields_bytes() == q.type_size, f"{type_name}: fields add up to {q.fields_bytes()} bytes"
    names = [f.name for f in q.fields]
    assert len(set(names)) == len(names) and all(f.bytes > 0 and f.holds for f in q.fields)
    assert list(q.at.values()) == sorted(q.at.values()) and q.at[names[0]] == 0
    assert q.formula.startswith("w = ") and q.words
    if issubclass(q, SuperBlock):
        assert q.block_size % q.sub_block == 0 and "d" in q.at
        assert len(q.stored_in()) == q.block_size


# What the bits allow, written out for the types the course shows: (q range, sub-block scale range).
UNPACKED_RANGES = {"Q2_K": ((0, 3), (0, 15)), "Q3_K": ((-4, 3), (-32, 31)), "Q4_K": ((0, 15), (0, 63)),
                   "Q5_K": ((0, 31), (0, 63)), "Q6_K": ((-32, 31), (-128, 127)), "IQ4_NL": ((0, 15), None),
                   "IQ4_XS": ((0, 15), (-32, 31))}  # fmt: skip


@pytest.mark.parametrize("type_name", SUPER_BLOCK_TYPES)
def test_unpack_fields_ranges(type_name):
    """The unpacked integers span exactly the range their bits allow (random bytes hit every value)."""
    q = QUANTS[type_name]
    u = q.unpack_fields(finite_blocks(type_name, 400, np.random.default_rng(4)))
    assert u["q"].shape == (400, q.block_size) and u["d"].shape == (400,) and np.isfinite(u["d"]).all()
    assert ("scale" not in u) or u["scale"].shape == (400, q.block_size // q.sub_block)
    assert ("min" in u) == ("dmin" in u) == ("dmin" in q.at)
    if type_name in UNPACKED_RANGES:  # a new type is held to gguf-py by the parity tests above
        q_range, scale_range = UNPACKED_RANGES[type_name]
        assert (u["q"].min(), u["q"].max()) == q_range
        assert scale_range is None if "scale" not in u else (u["scale"].min(), u["scale"].max()) == scale_range


# -- sizes: bytes of n weights, from gguf-py's table --------------------------------------------


def test_sizes_from_gguf_py():
    assert sizes.block_shape("Q8_0") == (32, 34) and sizes.block_shape("Q4_K") == (256, 144)
    assert sizes.type_bytes("F32", 10) == 40 and sizes.type_bytes("Q4_1", 64) == 40
    assert sizes.tensor_bytes("Q4_1", (576, 1536)) == 576 * 1536 // 32 * 20
    assert sizes.tensor_bytes("Q4_K", (640, 2048)) == 640 * 2048 // 256 * 144
    assert sizes.tensor_bytes("F32", ()) == 4
    assert sizes.bits_per_weight("Q8_0") == 8.5 and sizes.bits_per_weight("Q6_K") == 6.5625
    with pytest.raises(sizes.QuantSizeError, match="33 weights do not fill whole Q8_0 blocks of 32"):
        sizes.type_bytes("Q8_0", 33)
    with pytest.raises(sizes.QuantSizeError, match="row length 128 is not a multiple of the block size 256"):
        sizes.tensor_bytes("Q4_K", (4, 128))  # 512 weights are two whole blocks, but not along a row
    with pytest.raises(sizes.QuantSizeError, match="unknown ggml type name 'Q9_9'; expected a name like"):
        sizes.type_bytes("Q9_9", 32)


def test_bit_equal_compares_bits_not_values():
    a = np.array([0.0, 1.0], np.float32)
    assert bit_equal(a, a.copy())
    assert not bit_equal(a, np.array([-0.0, 1.0], np.float32))  # equal values, different bits
    assert not bit_equal(a, a.reshape(2, 1))
    nan = np.array([np.nan], np.float32)
    assert bit_equal(nan, nan.copy())


# -- the real default model ---------------------------------------------------------------


def test_default_model_tensors_bit_exact(default_gguf):
    """All of token_embd (Q8_0, 28M weights) and the first and last blocks, clear and fast."""
    with GGUFFile(default_gguf) as f:
        names = ["token_embd.weight"] + [t.name for t in f.tensors if t.name.startswith(("blk.0.", "blk.29."))]
        assert len(names) == 19
        for name in names:
            info = f.tensor(name)
            raw = f.raw(name)
            expected = reference_dequantize(raw, info.type_name, info.shape)
            clear, fast = QUANTS[info.type_name].clear, QUANTS[info.type_name].fast
            assert same_bits(fast(raw), expected), name
            assert same_bits(clear(raw), expected), name
            assert same_bits(f.load(name), expected) and f.load(name).shape == info.shape


@pytest.mark.slow
def test_gemma_every_tensor_bit_exact(gemma_gguf):
    """Every tensor of Gemma 3 270M Q4_K_M (Q8_0, Q5_0, Q4_K, Q6_K, F32), clear and fast, bit for bit."""
    seen = set()
    with GGUFFile(gemma_gguf) as f:
        for info in f.tensors:
            raw = np.asarray(f.raw(info.name))
            expected = reference_dequantize(raw, info.type_name, info.shape).reshape(-1)
            clear, fast = QUANTS[info.type_name].clear, QUANTS[info.type_name].fast
            assert bit_equal(fast(raw), expected), info.name
            row_bytes = sizes.tensor_bytes(info.type_name, info.shape[-1:])
            rows = raw.reshape(-1, row_bytes)
            step = max(1, (1 << 24) // max(1, expected.size // rows.shape[0]))  # the clear version in slices
            for s in range(0, rows.shape[0], step):
                part = clear(rows[s : s + step].reshape(-1))
                assert bit_equal(part, expected[s * (expected.size // rows.shape[0]) :][: part.size]), info.name
            seen.add(info.type_name)
    assert seen == {"Q8_0", "Q5_0", "Q4_K", "Q6_K", "F32"}

"""bytesup.dequant: every hand dequantizer, clear and fast, bit for bit against gguf.quants."""

from __future__ import annotations

import logging
import zlib

import numpy as np
import pytest
from gguf import quants as gguf_quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup.dequant import (
    HAND_DEQUANTIZERS,
    dequantize,
    dequantizer_used,
    expected_bytes,
    reference_dequantize,
)
from bytesup.gguf_file import GGUFFile

TYPES = sorted(HAND_DEQUANTIZERS)


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


SHAPES = [(1, 32), (3, 64), (17, 96), (256, 576)]
KINDS = ["normal", "zeros", "huge", "tiny", "negative", "mixed"]


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", KINDS)
def test_clear_and_fast_match_gguf_on_quantized_weights(type_name, shape, kind):
    rng = np.random.default_rng(zlib.crc32(repr((type_name, shape, kind)).encode()))
    with np.errstate(all="ignore"):
        q = encode(weights(kind, shape, rng), type_name)
        expected = gguf_reference(q, type_name)
        clear, fast = HAND_DEQUANTIZERS[type_name]
        flat = q.reshape(-1)
        assert same_bits(clear(flat), expected), "clear"
        assert same_bits(fast(flat), expected), "fast"
        assert same_bits(dequantize(flat, type_name, shape), expected)
    assert dequantize(flat, type_name, shape).shape == shape


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
        step = type_size if block_size == 32 else 2
        for i, bits in enumerate(special.view(np.uint8).reshape(-1, 2)):
            raw[i * step : i * step + 2] = bits
    shape = (n_blocks * block_size // 32, 32)
    with np.errstate(all="ignore"):
        expected = gguf_reference(raw.reshape(shape[0], -1), type_name)
        clear, fast = HAND_DEQUANTIZERS[type_name]
        assert same_bits(clear(raw), expected)
        assert same_bits(fast(raw), expected)
    if type_name != "F32":
        assert np.isnan(expected).any() and np.isinf(expected).any()


@pytest.mark.parametrize("type_name", TYPES)
def test_fast_spans_several_chunks_and_fills_out(type_name, monkeypatch):
    """The fast versions step through CHUNK_BLOCKS at a time; make chunks tiny to test the seams."""
    import bytesup.dequant as dq

    monkeypatch.setattr(dq, "CHUNK_BLOCKS", 3)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((10, 64)).astype(np.float32)
    q = encode(x, type_name)
    expected = gguf_reference(q, type_name)
    _, fast = HAND_DEQUANTIZERS[type_name]
    out = np.full(640, np.nan, np.float32)
    result = fast(q.reshape(-1), out=out)
    assert result is out and same_bits(out, expected)


def test_registry_and_dispatch(caplog):
    assert set(HAND_DEQUANTIZERS) == {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}
    assert dequantizer_used("Q4_1") == "hand" and dequantizer_used("Q6_K") == "fallback"
    assert expected_bytes("Q4_1", (576, 1536)) == 576 * 1536 // 32 * 20
    assert expected_bytes("F32", ()) == 4
    # a type we don't hand-write goes to gguf.quants, and says so
    rng = np.random.default_rng(2)
    raw = rng.integers(0, 256, size=2 * 210, dtype=np.uint8)  # two Q6_K blocks of 256 weights
    with caplog.at_level(logging.INFO, logger="bytesup.dequant"), np.errstate(all="ignore"):
        ours = dequantize(raw, "Q6_K", (2, 256))
        theirs = gguf_reference(raw.reshape(2, -1), "Q6_K")
    assert "no hand dequantizer for Q6_K" in caplog.text
    assert ours.shape == (2, 256) and same_bits(ours, theirs)


def test_dispatch_errors():
    with pytest.raises(ValueError, match="needs 34 bytes, got 33"):
        dequantize(np.zeros(33, np.uint8), "Q8_0", (32,))
    with pytest.raises(ValueError, match="not a multiple of the block size 32"):
        dequantize(np.zeros(34, np.uint8), "Q8_0", (1, 16))
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
    for f in HAND_DEQUANTIZERS["Q4_1"]:
        assert f(q41).tolist() == expected


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
            clear, fast = HAND_DEQUANTIZERS[info.type_name]
            assert same_bits(fast(raw), expected), name
            assert same_bits(clear(raw), expected), name
            assert same_bits(f.load(name), expected) and f.load(name).shape == info.shape

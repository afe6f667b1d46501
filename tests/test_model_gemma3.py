"""Gemma 3 through the one architecture table: the NumPy forward pass on a tiny synthetic gemma3 file
against an independent float64 Gemma (tests/reference_llama.py), with a context longer than the
sliding window; then (slow) the real Gemma 3 270M against transformers loading the same GGUF."""

from __future__ import annotations

import numpy as np
import pytest
from reference_llama import reference_gemma3

from bytesup.model.forward import Model
from bytesup.model.synthetic import write_tiny_gemma3
from bytesup.model.tokenizer import Tokenizer
from bytesup.model.trace import Trace

IDS = [2, 280, 294, 307, 309, 291, 312, 288, 313, 301, 316, 287]  # 12 tokens > the window of 4


@pytest.fixture
def tiny_gemma(tmp_path):
    return write_tiny_gemma3(tmp_path / "tiny-gemma3.gguf")


def rel_err(got, want) -> float:
    """max |got - want| / max |want|."""
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


# Measured: 2.0e-7 on the logits, 2.6e-7 on the residual stream and the final norm. Gemma's epsilon is
# 1e-6, so leaving it out moves the logits by only 1.3e-6 and the stream by 1.8e-6: a few times the
# clean error is what catches it.
REFERENCE_REL = 6e-7


def test_tiny_gemma3_logits_match_independent_float64_gemma(tiny_gemma):
    expected = reference_gemma3(tiny_gemma, IDS)
    with Model.from_gguf(tiny_gemma) as model:
        trace = Trace(all_positions=True)
        got = model.forward(IDS, trace=trace)
    assert model.spec.sliding_layers == (True,) * 5 + (False,) and model.spec.sliding_window == 4
    assert rel_err(got, expected["logits"]) < REFERENCE_REL
    for mine, theirs in zip(trace.residual, expected["hidden"], strict=True):  # the embedding already x sqrt(d)
        assert rel_err(mine, theirs) < REFERENCE_REL
    assert rel_err(trace.final_norm, expected["final_norm"]) < REFERENCE_REL


def test_sliding_window_and_local_rope_base_follow_the_metadata(tmp_path):
    """A wider window (or another local rope base) changes only what it should."""
    narrow = write_tiny_gemma3(tmp_path / "w4.gguf", sliding_window=4)
    wide = write_tiny_gemma3(tmp_path / "w64.gguf", sliding_window=64)
    other_base = write_tiny_gemma3(tmp_path / "b.gguf", extra_metadata={"gemma3.rope.freq_base_swa": 500.0})
    with Model.from_gguf(narrow) as m:
        a = m.forward(IDS)
    with Model.from_gguf(wide) as m:
        b = m.forward(IDS)
    with Model.from_gguf(other_base) as m:
        assert m.spec.layer_rope_base(0) == 500.0 and m.spec.layer_rope_base(5) == 1e6
        c = m.forward(IDS)
    # within the first 4 positions every key is inside both windows: identical; beyond, they differ
    np.testing.assert_array_equal(a[:4], b[:4])
    assert (np.abs(a[4:] - b[4:]).max(axis=-1) > 1e-4).all()
    # the local rope base: position 0 is not rotated by any base; every later one turns differently
    np.testing.assert_array_equal(a[0], c[0])
    assert np.abs(a[1:] - c[1:]).max() > 1e-3


def test_tiny_gemma3_decode_with_cache_equals_full_recompute(tiny_gemma):
    """Decoding one token at a time past the window gives the prefill's logits (the window is
    applied to a single query too)."""
    with Model.from_gguf(tiny_gemma) as model:
        full = model.forward(IDS)
        cache = model.new_cache()
        steps = [model.forward(IDS[:3], cache)] + [model.forward([i], cache) for i in IDS[3:]]
    np.testing.assert_allclose(np.concatenate(steps), full, rtol=1e-5, atol=1e-5)


def test_tiny_gemma3_streaming_agrees_with_resident(tiny_gemma):
    """Column-major resident matrices against row-major streamed ones: float32 rounding apart (measured 5.1e-7)."""
    with Model.from_gguf(tiny_gemma, mode="resident") as r, Model.from_gguf(tiny_gemma, mode="streaming") as s:
        assert rel_err(r.forward(IDS), s.forward(IDS)) < 1.5e-6
        assert r.weights.block(0).q_norm.shape == (16,) and s.weights.block(0).post_ffn_norm.shape == (32,)


def test_tiny_gemma3_tokenizer_is_sentencepiece_without_space_prefix(tiny_gemma):
    tok = Tokenizer.from_gguf(tiny_gemma)
    ids = tok.encode("the cat sat")
    assert ids[0] == 2 and [tok.token_text(i) for i in ids[1:]] == ["t", "h", "e", " cat", " sat"]
    assert tok.decode(ids, skip_special=True) == "the cat sat"
    assert [tok.token_text(i) for i in tok.encode("é", add_special=False)] == ["<0xC3>", "<0xA9>"]  # byte fallback


def test_write_tiny_gemma3_refuses_unquantizable_shapes(tmp_path):
    with pytest.raises(ValueError, match="multiples of 32"):
        write_tiny_gemma3(tmp_path / "x.gguf", head_dim=12)
    with pytest.raises(ValueError, match="n_head must divide by n_head_kv"):
        write_tiny_gemma3(tmp_path / "x.gguf", n_head=4, n_head_kv=3)

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bytesup.model.layers import (
    FFNTrace,
    ffn,
    gelu,
    matvec,
    matvec_naive,
    relu,
    rms,
    rms_norm,
    sigmoid,
    silu,
    softmax,
    tanh,
)


def test_toy_matvec_both_ways():
    W = [[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]]
    assert matvec(W, [3.0, 1.0, 2.0]).tolist() == [7.0, -1.0]
    assert matvec_naive(W, [3.0, 1.0, 2.0]) == [7.0, -1.0]
    assert matvec_naive(np.array(W), np.array([3.0, 1.0, 2.0])) == [7.0, -1.0]


def test_matvec_shapes_are_checked():
    with pytest.raises(ValueError, match="columns"):
        matvec(np.ones((2, 3)), np.ones(4))
    with pytest.raises(ValueError, match="columns"):
        matvec_naive([[1.0, 2.0], [3.0]], [1.0, 2.0])


def test_naive_matches_numpy_to_float32_precision():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((64, 300)).astype(np.float32)
    x = rng.standard_normal(300).astype(np.float32)
    fast = matvec(W, x)
    assert fast.dtype == np.float32
    slow = np.array(matvec_naive(W, x))
    exact = W.astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(slow, exact, rtol=1e-12, atol=1e-12)  # Python floats are 64-bit
    # float32 sums of 300 products of size ~1: absolute error well under 1e-4
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_naive_equals_numpy_on_small_integers(rows, cols, seed):
    # small integers make every product and sum exact, so the two must agree exactly
    rng = np.random.default_rng(seed)
    W = rng.integers(-9, 10, (rows, cols)).astype(np.float32)
    x = rng.integers(-9, 10, cols).astype(np.float32)
    assert matvec_naive(W, x) == matvec(W, x).tolist()


def test_rms_of_the_lesson_toy():
    assert rms([4.0, -2.0, 0.0, 4.0]) == 3.0
    assert rms(np.array([4.0, -2.0, 0.0, 4.0]) / 3.0) == pytest.approx(1.0, abs=1e-15)  # RMSNorm's promise


def test_rms_norm_against_the_hand_formula():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(16).astype(np.float32) * 0.2
    w = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    eps = 1e-5
    mean_sq = sum(float(v) * float(v) for v in x) / len(x)
    hand = [float(v) / math.sqrt(mean_sq + eps) * float(g) for v, g in zip(x, w)]
    got = rms_norm(x, w, eps)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, hand, rtol=2e-6)


def test_rms_norm_eps_only_matters_near_zero():
    x = np.zeros(8, dtype=np.float32)
    assert np.all(rms_norm(x, np.ones(8, dtype=np.float32), 1e-6) == 0)  # no division by zero
    big = np.full(4, 3.0)
    np.testing.assert_allclose(rms_norm(big, np.ones(4), 1e-6), np.ones(4), rtol=1e-6)
    with pytest.raises(ValueError, match="weight"):
        rms_norm(np.ones(4), np.ones(3), 1e-6)


def test_softmax_values_and_stability():
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0])
    p = softmax([0.0, np.log(3.0)])
    np.testing.assert_allclose(p, [0.25, 0.75])
    big = softmax([1000.0, 1000.0, 0.0])  # no overflow: the maximum is subtracted first
    np.testing.assert_allclose(big, [0.5, 0.5, 0.0], atol=1e-300)
    assert big.dtype == np.float64 and softmax([3, 1]).dtype == np.float64  # lists and integers: float64
    np.testing.assert_allclose(softmax(logits, 2.0), softmax(logits / 2.0))
    # along the last axis: each row on its own; masked (-inf) scores give exactly 0; float32 stays float32
    rows = softmax(np.array([[0.0, np.log(3.0), -np.inf], [5.0, 5.0, 5.0]], np.float32))
    assert rows.dtype == np.float32 and rows[0, 2] == 0
    np.testing.assert_allclose(rows, [[0.25, 0.75, 0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-6)
    with pytest.raises(ValueError, match="temperature"):
        softmax(logits, 0.0)


def test_silu_values():
    assert float(silu(0.0)) == 0.0
    assert float(silu(2.0)) == pytest.approx(2 / (1 + math.exp(-2)), rel=1e-15)
    assert round(float(silu(2.0)), 2) == 1.76
    assert round(2 * float(silu(1.0)), 2) == 1.46
    z = np.linspace(-5, 0, 500_001)
    s = silu(z)
    assert s.min() == pytest.approx(-0.278464542761074, abs=1e-9)
    assert z[np.argmin(s)] == pytest.approx(-1.278464542761074, abs=1e-5)
    assert silu(np.float32(3.0)).dtype == np.float32


def test_sigmoid_saturates_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = sigmoid(np.array([-1000.0, 0.0, 1000.0], dtype=np.float32))
        assert out.tolist() == [0.0, 0.5, 1.0]
        assert float(silu(np.float32(-200.0))) == 0.0


def test_other_activations():
    assert relu([-2.0, 0.0, 3.0]).tolist() == [0.0, 0.0, 3.0]
    assert float(gelu(1.0)) == pytest.approx(0.8411919906082768, rel=1e-12)  # tanh form
    assert float(gelu(1.0, approximate="none")) == pytest.approx(0.8413447460685429, rel=1e-12)
    assert float(tanh(0.5)) == pytest.approx(math.tanh(0.5))
    with pytest.raises(ValueError, match="approximate"):
        gelu(1.0, approximate="fast")


def test_matvec_is_linear_exactly_for_doubling():
    rng = np.random.default_rng(2)
    W = rng.standard_normal((50, 40)).astype(np.float32)
    x = rng.standard_normal(40).astype(np.float32)
    assert np.array_equal(matvec(W, 2 * x), 2 * matvec(W, x))


def test_ffn_against_an_independent_float64_formula():
    rng = np.random.default_rng(4)
    n, f = 12, 30
    x = (rng.standard_normal(n) * 0.1).astype(np.float32)
    wg, wu = (rng.standard_normal((2, f, n)) * 0.3).astype(np.float32)
    wd = (rng.standard_normal((n, f)) * 0.3).astype(np.float32)
    norm = rng.uniform(0.5, 2.0, n).astype(np.float32)
    t = ffn(x, wg, wu, wd, norm, 1e-6)
    assert isinstance(t, FFNTrace)
    assert all(a.dtype == np.float32 for a in t)
    assert [a.shape for a in t] == [(n,), (f,), (f,), (f,), (n,), (n,)]
    X, G, U, D, N = (a.astype(np.float64) for a in (x, wg, wu, wd, norm))
    xn = X / np.sqrt(np.mean(X**2) + 1e-6) * N
    g, u = G @ xn, U @ xn
    h = g / (1 + np.exp(-g)) * u
    y = X + D @ h
    for got, want in [(t.xn, xn), (t.g, g), (t.u, u), (t.h, h), (t.y, y)]:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

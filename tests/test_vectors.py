import math

import numpy as np
import pytest

from bytesup.model.vectors import angle_deg, angle_from_cosine, cosine, dot, dot_naive, length


def test_toy_vectors_match_the_lesson_exactly():
    a, b = [3.0, 4.0], [4.0, 3.0]
    assert dot(a, b) == 24.0
    assert dot_naive(a, b) == 24.0
    assert length(a) == 5.0
    assert cosine(a, b) == pytest.approx(0.96, abs=1e-15)
    assert angle_deg(a, b) == pytest.approx(math.degrees(math.acos(0.96)), abs=1e-12)
    assert round(angle_deg(a, b)) == 16


def test_angles_of_special_pairs():
    assert angle_deg([1.0, 0.0], [0.0, 2.0]) == pytest.approx(90.0)
    assert angle_deg([1.0, 1.0], [-3.0, -3.0]) == pytest.approx(180.0)
    v = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    assert angle_deg(v, v) == pytest.approx(0.0, abs=0.05)  # no NaN although cos may round above 1
    assert angle_from_cosine(1.0000001) == 0.0
    assert angle_from_cosine(0.95) == pytest.approx(18.1949, abs=1e-4)


def test_naive_and_numpy_dot_agree_on_float32():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 4096)).astype(np.float32)
    exact = float(np.dot(a.astype(np.float64), b.astype(np.float64)))
    assert dot_naive(a, b) == pytest.approx(exact, rel=1e-12, abs=1e-9)  # 64-bit sums
    assert float(dot(a, b)) == pytest.approx(exact, rel=1e-4, abs=1e-3)  # float32 sums
    assert dot(a, b).dtype == np.float32  # stays float32, like the model
    assert length(a).dtype == np.float32


def test_length_is_sqrt_of_sum_of_squares():
    v = np.array([1.0, -2.0, 2.0])
    assert length(v) == 3.0


def test_mismatched_vectors_are_refused():
    with pytest.raises(ValueError, match="same length"):
        dot([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="1-D"):
        dot_naive(np.ones((2, 2)), np.ones((2, 2)))

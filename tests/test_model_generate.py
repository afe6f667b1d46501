"""Sampling and the generation loop, on fixed logits and a toy step function."""

from __future__ import annotations

import numpy as np
import pytest

from bytesup.model.generate import (
    GenerationError,
    filter_probs,
    generate,
    next_token_probs,
    sample_next,
)
from bytesup.model.layers import softmax

LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -1.0])


def test_next_token_probs_are_float64_softmax_at_the_temperature():
    logits32 = (LOGITS * 7).astype(np.float32)
    p = next_token_probs(logits32, 0.7)
    assert p.dtype == np.float64 and abs(p.sum() - 1) < 1e-15
    z = logits32.astype(np.float64) / 0.7
    np.testing.assert_allclose(p, np.exp(z - z.max()) / np.exp(z - z.max()).sum(), rtol=1e-15)
    for bad in (0.0, -1.0):
        with pytest.raises(GenerationError, match="temperature"):
            next_token_probs(LOGITS, bad)


def test_temperature_sharpens_and_flattens():
    cold, warm, hot = softmax(LOGITS, 0.5), softmax(LOGITS, 1.0), softmax(LOGITS, 4.0)
    assert cold[0] > warm[0] > hot[0] > 0.2  # the top token gains as T falls
    assert np.ptp(hot) < np.ptp(warm) < np.ptp(cold)
    np.testing.assert_allclose(softmax(LOGITS, 1e-3)[0], 1.0)

    def entropy(p):
        return -(p * np.log(p)).sum()

    assert entropy(cold) < entropy(warm) < entropy(hot) < np.log(5)


def test_filters():
    p = softmax(LOGITS)  # [0.5745, 0.2113, 0.1282, 0.0777, 0.0286]
    np.testing.assert_allclose(filter_probs(p, top_k=2), [p[0] / (p[0] + p[1]), p[1] / (p[0] + p[1]), 0, 0, 0])
    np.testing.assert_allclose(filter_probs(p, top_p=0.5), [1, 0, 0, 0, 0])
    k3 = filter_probs(p, top_p=0.8)  # 0.5745 + 0.2113 = 0.786 < 0.8: a third token is needed
    assert np.count_nonzero(k3) == 3
    assert np.count_nonzero(filter_probs(p, top_k=4, top_p=0.9)) == 3
    np.testing.assert_allclose(filter_probs(p, top_p=1.0), p)


def test_sampling_seeded_and_reproducible():
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    a = [sample_next(LOGITS, temperature=1.0, rng=rng_a) for _ in range(50)]
    b = [sample_next(LOGITS, temperature=1.0, rng=rng_b) for _ in range(50)]
    assert a == b and len(set(a)) > 1
    rng_c = np.random.default_rng(8)
    assert [sample_next(LOGITS, temperature=1.0, rng=rng_c) for _ in range(50)] != a


def test_top_k_1_and_tiny_top_p_are_greedy():
    rng = np.random.default_rng(0)
    shuffled = np.array([0.1, 3.0, -2.0, 2.9, 0.0])
    assert {sample_next(shuffled, temperature=5.0, top_k=1, rng=rng) for _ in range(200)} == {1}
    assert {sample_next(shuffled, temperature=5.0, top_p=1e-6, rng=rng) for _ in range(200)} == {1}


def test_empirical_frequencies_match_softmax():
    rng = np.random.default_rng(123)
    n = 40_000
    for t in (0.7, 1.5):
        counts = np.bincount([sample_next(LOGITS, temperature=t, rng=rng) for _ in range(n)], minlength=5)
        expected = softmax(LOGITS, t)
        # 5 standard errors of a binomial proportion
        np.testing.assert_array_less(np.abs(counts / n - expected), 5 * np.sqrt(expected * (1 - expected) / n))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": 1.0, "top_k": 0}, "top_k"),
        ({"temperature": 1.0, "top_k": 1.5}, "top_k"),
        ({"temperature": 1.0, "top_p": 0.0}, "top_p"),
        ({"temperature": 1.0, "top_p": 1.2}, "top_p"),
    ],
)
def test_sampling_bad_settings(kwargs, name):
    with pytest.raises(GenerationError) as err:
        sample_next(LOGITS, rng=np.random.default_rng(0), **kwargs)
    assert str(err.value).startswith(name) and "\n" not in str(err.value)


class ToyModel:
    """Logits that make token (last + 1) % 6 likely; token 5 is end-of-sequence. Records its calls."""

    def __init__(self):
        self.calls: list[list[int]] = []
        self.last = None

    def __call__(self, new_ids):
        self.calls.append(list(new_ids))
        self.last = new_ids[-1]
        logits = np.zeros(6)
        logits[(self.last + 1) % 6] = 4.0
        return logits


def test_greedy_generation_stops_at_eos():
    model = ToyModel()
    g = generate(model, [0, 1], max_new_tokens=10, eos_ids=[5])
    assert g.ids == [2, 3, 4, 5] and g.stop_reason == "eos"
    assert model.calls == [[0, 1], [2], [3], [4]]  # the prompt once, then one new token per step
    p_top = np.exp(4.0) / (np.exp(4.0) + 5)
    np.testing.assert_allclose(g.probs, [p_top] * 4)
    assert g.all_ids == [0, 1, 2, 3, 4, 5]


def test_generation_stops_at_limit_and_sampling_is_seeded():
    g = generate(ToyModel(), [0], max_new_tokens=3, eos_ids=[5])
    assert g.ids == [1, 2, 3] and g.stop_reason == "max_new_tokens"
    a = generate(ToyModel(), [0], max_new_tokens=20, temperature=3.0, seed=5)
    b = generate(ToyModel(), [0], max_new_tokens=20, temperature=3.0, rng=np.random.default_rng(5))
    assert a.ids == b.ids and a.probs == b.probs
    assert a.ids != list(range(1, 21))[: len(a.ids)]  # T = 3 strays from the greedy path
    t1 = generate(ToyModel(), [0], max_new_tokens=4, temperature=1.0, top_k=1, seed=9)
    assert t1.ids == [1, 2, 3, 4]  # top_k = 1 is greedy


@pytest.mark.parametrize(
    ("prompt", "kwargs", "needle"),
    [
        ([0], {"max_new_tokens": 0}, "generate.max_new_tokens"),
        ([0], {"max_new_tokens": -3}, "generate.max_new_tokens"),
        ([], {"max_new_tokens": 5}, "prompt"),
        ([0], {"max_new_tokens": 5, "temperature": -0.5}, "temperature"),
        ([0], {"max_new_tokens": 5, "temperature": 1.0, "top_p": 2.0}, "top_p"),
    ],
)
def test_generation_bad_settings(prompt, kwargs, needle):
    with pytest.raises(GenerationError) as err:
        generate(ToyModel(), prompt, **kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)

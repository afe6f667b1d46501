"""One decode step at a time, clocked: the NumPy decoder and llama.cpp as steppers that can take turns.

A stepper starts from a prompt and then `step()` decodes one more token and returns its seconds.
`interleave()` runs several in turns, a few steps each, so that two engines compared in one job
meet the same moments of the machine (a burst of someone else's work slows both, not one).

`TimedWeights` wraps the NumPy model's weights provider and clocks the provider's own work
(dequantizing each block when the weights stream; next to nothing when they are resident), so a
step splits into dequantization and the rest without touching the network's code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping

import numpy as np

from bytesup.model.forward import matmul

PROMPT_IDS_SEED = 1234  # which token ids feed the timed passes (any valid ids will do)
PROMPT_LEN = 8  # prompt tokens before the timed decode steps
# Seconds between two engines' turns. A BLAS or OpenMP worker spins for a while after its last
# call before it sleeps (OpenBLAS: 2^28 cycles, about 0.1 s here); on two cores a spinning worker
# of the engine that just ran takes a core from the one that runs next. Measured in turns of 10
# steps without the pause: llama.cpp's first two or three steps took 27-92 ms against 12-16 ms
# after, ours 24-33 ms against 15-20; with a 0.3 s pause the first step of a turn was 19-23 ms and
# the rest as after.
QUIET_S = 0.3


def prompt_ids(vocab: int, n: int, seed: int = PROMPT_IDS_SEED) -> np.ndarray:
    """n token ids drawn evenly from the vocabulary (reproducible; they need not make sense)."""
    return np.random.default_rng(seed).integers(3, vocab, size=n)


class TimedWeights:
    """A weights provider that clocks its own work; everything else is the wrapped provider's."""

    def __init__(self, inner):
        self.inner = inner
        self.seconds = 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _timed(self, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.seconds += time.perf_counter() - t0

    def block(self, i: int):
        return self._timed(self.inner.block, i)

    def embed_rows(self, ids):
        return self._timed(self.inner.embed_rows, ids)

    def head_chunks(self) -> Iterator:
        chunks = iter(self.inner.head_chunks())
        while True:
            t0 = time.perf_counter()
            item = next(chunks, None)
            self.seconds += time.perf_counter() - t0
            if item is None:
                return
            yield item


class NumpyDecoder:
    """The project's NumPy decoder as a stepper, greedy as in generation (the next input is the
    argmax, taken outside the clock). `provider_seconds`: the seconds of the last step spent in the
    weights provider (TimedWeights). Use as a context manager: the model gets its own provider back after."""

    def __init__(self, model, max_tokens: int, cache=None):
        self.model = model
        self.cache = cache if cache is not None else model.new_cache(max_tokens)
        self.timed = TimedWeights(model.weights)
        self.provider_seconds = 0.0
        self._next = 0

    def __enter__(self) -> NumpyDecoder:
        self.model.weights = self.timed
        return self

    def __exit__(self, *exc) -> None:
        self.model.weights = self.timed.inner

    def start(self, prompt) -> None:
        logits = self.model.forward([int(i) for i in prompt], self.cache)
        self._next = int(np.argmax(logits[-1]))

    def start_at(self, token: int) -> None:
        """Continue a cache that already holds its positions (e.g. filled for a context sweep)."""
        self._next = int(token)

    def step(self) -> float:
        before = self.timed.seconds
        t0 = time.perf_counter()
        logits = self.model.forward([self._next], self.cache)
        dt = time.perf_counter() - t0
        self.provider_seconds = self.timed.seconds - before
        self._next = int(np.argmax(logits[-1]))
        return dt


class ProductsOnly:
    """A resident decode step's matrix-vector products alone, as a stepper: every matrix the step
    multiplies (each block's Q K V, W_o, gate and up, W_down, then the head), in the step's order, by
    the decoder's own call (bytesup.model.forward.matmul) into outputs allocated once, with nothing
    between them. Its speed is the most a decoder that multiplies with these calls can read these
    matrices at; the decode step's time over it is the share of the step the products take."""

    def __init__(self, weights, n_layers: int):
        self.mats = []
        for i in range(n_layers):
            b = weights.block(i)
            self.mats += [b.wqkv, b.wo, b.w_gate_up, b.w_down]
        self.mats += [rows for _, rows in weights.head_chunks()]
        self.nbytes = sum(m.nbytes for m in self.mats)
        self._x = {c: np.ones((1, c), np.float32) for c in {m.shape[1] for m in self.mats}}
        self._y = [np.empty((1, m.shape[0]), np.float32) for m in self.mats]

    def step(self) -> float:
        t0 = time.perf_counter()
        for m, y in zip(self.mats, self._y):
            matmul(self._x[m.shape[1]], m, out=y)
        return time.perf_counter() - t0


def interleave(
    steppers: Mapping[str, object], n_tokens: int, warmup: int, rounds: int = 4, settle: int = 1, after_step=None,
    quiet_s: float = QUIET_S, before_round=None,
) -> dict[str, list[float]]:  # fmt: skip
    """Each stepper's seconds for `n_tokens` timed steps after `warmup` untimed ones (all steppers'
    warm-ups first), in `rounds` turns of about n_tokens / rounds steps each, in the order given.
    `after_step(name, stepper)`, when given, is called after each timed step (to read what else it clocked);
    `before_round()` before each round of turns (to measure something else at the same moments).

    With more than one stepper each turn begins after `quiet_s` seconds of nothing, for the worker
    threads of the engine that just ran to stop spinning (QUIET_S), then `settle` untimed steps
    that wake this engine's own workers and bring its data back into cache.
    """
    for s in steppers.values():
        for _ in range(warmup):
            s.step()
    settle = settle if len(steppers) > 1 else 0
    per_turn = max(1, math.ceil(n_tokens / max(rounds, 1)))
    times: dict[str, list[float]] = {name: [] for name in steppers}
    while any(len(t) < n_tokens for t in times.values()):
        if before_round is not None:
            before_round()
        for name, s in steppers.items():
            todo = min(per_turn, n_tokens - len(times[name]))
            if todo and settle:
                time.sleep(quiet_s)
                for _ in range(settle):
                    s.step()
            for _ in range(todo):
                times[name].append(s.step())
                if after_step is not None:
                    after_step(name, s)
    return times

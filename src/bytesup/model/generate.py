"""From logits to text: softmax at a temperature, top-k and top-p filtering, and the generation loop.

The model gives one score (logit) per vocabulary entry for the next token. Generation repeats:

    1. turn the logits into probabilities       p = softmax(logits / T)
    2. keep the k most likely (top-k)           and the smallest set holding p_total >= top_p
    3. pick one: the most likely (greedy, T = 0) or a random draw from what is left
    4. feed it back in and get the next logits  step([token])

until the model says end-of-sequence or the token limit is reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from bytesup.errors import BytesupError
from bytesup.model.layers import softmax


class GenerationError(BytesupError, ValueError):
    """A bad sampling or generation setting (temperature, top_k, top_p, max_new_tokens, prompt)."""


def next_token_probs(logits, temperature: float = 1.0) -> np.ndarray:
    """Step 1: p = softmax(logits / T) (bytesup.model.layers.softmax), in float64, so that p sums to 1
    as closely as a random draw from it needs."""
    if not temperature > 0:
        raise GenerationError(f"temperature = {temperature!r}: softmax needs a temperature above 0")
    z = np.asarray(logits, dtype=np.float64)
    if not np.isfinite(z).all():  # finite weights can still overflow float32 on the way (a hostile file)
        raise GenerationError(f"the logits hold {int(np.isnan(z).sum())} NaN and {int(np.isinf(z).sum())} infinite"
                              " values: the model's numbers overflowed float32; the file is damaged or wrong")  # fmt: skip
    return softmax(z, temperature)


def _check_filters(top_k: int | None, top_p: float | None) -> None:
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise GenerationError(f"top_k = {top_k!r}: use a whole number of at least 1, or leave it unset")
    if top_p is not None and not 0 < top_p <= 1:
        raise GenerationError(f"top_p = {top_p!r}: use a value in (0, 1], or leave it unset")


def filter_probs(probs: np.ndarray, *, top_k: int | None = None, top_p: float | None = None) -> np.ndarray:
    """Zero all but the top-k tokens, then all but the smallest most-likely set whose mass reaches
    top_p (the nucleus); renormalise. Ties at the cut keep the lower token id."""
    _check_filters(top_k, top_p)
    probs = np.asarray(probs, dtype=np.float64)
    order = np.argsort(-probs, kind="stable")  # most likely first
    keep = len(order)
    if top_k is not None:
        keep = min(keep, int(top_k))
    if top_p is not None:
        kept = probs[order[:keep]]
        cumulative = np.cumsum(kept) / kept.sum()  # over what top-k left, renormalised (as HF does)
        keep = min(keep, int(np.searchsorted(cumulative, top_p - 1e-12)) + 1)  # first index reaching top_p
    out = np.zeros_like(probs)
    out[order[:keep]] = probs[order[:keep]]
    return out / out.sum()


def sample_next(
    logits,
    *,
    temperature: float,
    top_k: int | None = None,
    top_p: float | None = None,
    rng: np.random.Generator,
) -> int:
    """Draw the next token id from softmax(logits / temperature) after top-k, then top-p."""
    if not temperature > 0:
        raise GenerationError(
            f"temperature = {temperature!r}: sampling needs a temperature above 0 (use 0 with generate() for greedy)"
        )
    probs = filter_probs(next_token_probs(logits, temperature), top_k=top_k, top_p=top_p)
    return int(rng.choice(len(probs), p=probs))


@dataclass
class Generation:
    """What generate() did: the new ids, each one's probability, and why it stopped."""

    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # of each chosen id: softmax(logits / T), T = 1 if greedy
    stop_reason: str = ""  # "eos" or "max_new_tokens"

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.ids


def generate(
    step: Callable[[Sequence[int]], np.ndarray],
    prompt_ids: Iterable[int],
    *,
    max_new_tokens: int,
    eos_ids: Iterable[int] = (),
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
) -> Generation:
    """Run the loop. ``step(new_ids)`` takes the ids not yet seen (the whole prompt first, then one
    token at a time) and returns the logits of the last position, as a forward pass with a KV
    cache does. temperature 0 is greedy (argmax); above 0 it samples with ``rng`` (or ``seed``)."""
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise GenerationError("the prompt has no tokens: give at least one (for example the BOS id)")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens <= 0:
        raise GenerationError(f"generate.max_new_tokens = {max_new_tokens!r}: use a whole number of at least 1")
    if temperature < 0:
        raise GenerationError(f"temperature = {temperature!r}: use 0 for greedy or a value above 0 to sample")
    _check_filters(top_k, top_p)
    if rng is None:
        rng = np.random.default_rng(seed)
    stops = {int(i) for i in eos_ids}
    out = Generation(prompt_ids=prompt)
    logits = step(prompt)
    while True:
        greedy = temperature == 0
        probs = next_token_probs(logits, 1.0 if greedy else temperature)  # step 1
        if greedy:
            token = int(np.argmax(probs))  # step 3, greedy
        else:
            token = int(rng.choice(len(probs), p=filter_probs(probs, top_k=top_k, top_p=top_p)))  # steps 2-3
        out.ids.append(token)
        out.probs.append(float(probs[token]))
        if token in stops:
            out.stop_reason = "eos"
            break
        if len(out.ids) >= max_new_tokens:
            out.stop_reason = "max_new_tokens"
            break
        logits = step([token])  # step 4
    return out

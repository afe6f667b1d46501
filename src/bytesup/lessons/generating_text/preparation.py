"""Lesson 5's step 0: the settings, checked before any heavy work, and the plan they make."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bytesup.lessons import LessonInputError
from bytesup.model.tokenizer import Tokenizer

# The config schema's defaults (workflow/schemas/config.schema.yaml), for keys a caller leaves out.
DEFAULT_GENERATE = {"max_new_tokens": 16, "temperatures": [0.5, 1.0, 2.0], "top_k": 50, "top_p": 0.95}
TOP_N = 15  # tokens shown in the next-token distribution


class GeneratingTextError(LessonInputError):
    """A setting or prompt this lesson cannot use; one line naming the config key."""


# --- 0. settings, checked before any heavy work --------------------------------------------------


@dataclass(frozen=True)
class Settings:
    max_new_tokens: int
    temperatures: tuple[float, ...]
    top_k: int | None
    top_p: float | None
    seed: int


def _whole(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def settings(generate_cfg: Mapping | None, seed) -> Settings:
    """The `generate` config block and `seed`, checked; missing keys take the schema's defaults."""
    if generate_cfg is None:
        generate_cfg = {}
    if not isinstance(generate_cfg, Mapping):
        raise GeneratingTextError(
            f"generate = {generate_cfg!r}: use a mapping with max_new_tokens, temperatures, top_k, top_p"
        )
    unknown = sorted(set(generate_cfg) - set(DEFAULT_GENERATE))
    if unknown:
        raise GeneratingTextError(f"generate: unknown keys {unknown}; known: {sorted(DEFAULT_GENERATE)}")
    g = {**DEFAULT_GENERATE, **generate_cfg}
    n = g["max_new_tokens"]
    if not _whole(n) or n < 1:
        raise GeneratingTextError(f"generate.max_new_tokens = {n!r}: use a whole number of at least 1")
    temps = g["temperatures"]
    if isinstance(temps, (str, bytes)) or not isinstance(temps, Sequence) or not temps:
        raise GeneratingTextError(f"generate.temperatures = {temps!r}: use a non-empty list of numbers above 0")
    for i, t in enumerate(temps):
        if not _number(t) or not np.isfinite(t) or t <= 0:
            raise GeneratingTextError(
                f"generate.temperatures[{i}] = {t!r}: sampling needs a temperature above 0"
                " (greedy, the limit T -> 0, is shown separately)"
            )
    k = g["top_k"]
    if k is not None and (not _whole(k) or k < 1):
        raise GeneratingTextError(f"generate.top_k = {k!r}: use a whole number of at least 1, or null for no limit")
    p = g["top_p"]
    if p is not None and (not _number(p) or not 0 < p <= 1):
        raise GeneratingTextError(f"generate.top_p = {p!r}: use a number above 0 and at most 1")
    if not _whole(seed):
        raise GeneratingTextError(f"seed = {seed!r}: use a whole number")
    return Settings(
        int(n),
        tuple(float(t) for t in temps),
        None if k is None else int(k),
        None if p is None else float(p),
        int(seed),
    )


@dataclass
class Plan:
    """Everything decided before the model is opened: settings, token ids, the chat prompt."""

    settings: Settings
    prompt: str
    prompt_ids: list[int]
    tokenizer: Tokenizer
    eos_ids: tuple[int, ...]
    context_length: int
    chat_prompt: str | None = None  # the rendered template; None when there is none
    chat_ids: list[int] | None = None
    chat_note: str = ""  # why the chat part is skipped ("" when it runs)
    has_template: bool = False  # the file carries tokenizer.chat_template


def eos_ids(tokenizer: Tokenizer, metadata: Mapping) -> tuple[int, ...]:
    """The ids that end a generation: the file's EOS, and its end-of-turn / end-of-message ids if given."""
    ids = [tokenizer.eos_id]
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        value = metadata.get(key)
        if _whole(value) and 0 <= value < len(tokenizer):
            ids.append(int(value))
    return tuple(sorted({int(i) for i in ids if i is not None}))


def _fits(what: str, n_ids: int, s: Settings, context: int, key: str) -> str | None:
    if n_ids > context:
        return f"{what}: {n_ids} tokens, longer than {key} = {context}; shorten the prompt"
    if n_ids + s.max_new_tokens > context:
        return (
            f"{what}: {n_ids} tokens + generate.max_new_tokens {s.max_new_tokens} = {n_ids + s.max_new_tokens}"
            f" exceed {key} = {context}; shorten the prompt or lower max_new_tokens"
        )
    return None

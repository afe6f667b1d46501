"""Lesson 5's steps 1 to 7: the loop through the KV cache, sampling, the next-token distribution at each
temperature, and the cache against recomputing the prefix."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence

import numpy as np

from bytesup.lessons.generating_text.preparation import TOP_N, Plan, Settings
from bytesup.model.forward import Model
from bytesup.model.generate import Generation, filter_probs, generate, next_token_probs
from bytesup.model.tokenizer import Tokenizer

# --- 1-3. the loop through the KV cache -------------------------------------------------------------


class CachedSteps:
    """The ``step`` generate() calls: new ids through ONE KV cache, the last position's logits back.

    Keeps what each call returned and how long it took: call 0 is the prefill (the whole prompt),
    every later call is one token.
    """

    def __init__(self, model: Model):
        self.model = model
        self.cache = model.new_cache()
        self.logits: list[np.ndarray] = []
        self.seconds: list[float] = []

    def __call__(self, new_ids: Sequence[int]) -> np.ndarray:
        t0 = time.perf_counter()
        last = self.model.forward(list(new_ids), self.cache)[-1]  # logits of the last new position
        self.seconds.append(time.perf_counter() - t0)
        self.logits.append(last)
        return last


def shown(text: str) -> str:
    """A token's text in quotes, its spaces visible and newlines escaped: '" Paris"', '"\\n"'."""
    return json.dumps(text, ensure_ascii=False)


def continuation_text(tok: Tokenizer, g: Generation, eos: Sequence[int]) -> str:
    """The new text, without the end-of-sequence token that stopped it."""
    ids = g.ids[:-1] if g.stop_reason == "eos" and g.ids and g.ids[-1] in eos else g.ids
    return tok.decode(ids)


def greedy_rows(tok: Tokenizer, g: Generation, logits: Sequence[np.ndarray], n_prompt: int) -> list[dict]:
    """One row per greedy step: the token chosen, its probability, and the runner-up."""
    rows = []
    for i, (tid, p_chosen, lg) in enumerate(zip(g.ids, g.probs, logits)):
        p = next_token_probs(lg)
        second = int(np.argsort(-lg, kind="stable")[1])
        rows.append(
            {
                "step": i + 1,
                "position": n_prompt + i,
                "id": tid,
                "token": shown(tok.token_text(tid)),
                "probability": p_chosen,
                "logit": float(lg[tid]),
                "runner_up_id": second,
                "runner_up": shown(tok.token_text(second)),
                "runner_up_probability": p[second],
            }
        )
    return rows


# --- 4. sampling -------------------------------------------------------------------------------------


def sample(model: Model, plan: Plan) -> tuple[list[Generation], list[dict]]:
    """One seeded continuation per temperature: Generator(seed + index), top_k then top_p."""
    s, tok = plan.settings, plan.tokenizer
    gens, rows = [], []
    for j, t in enumerate(s.temperatures):
        rng = np.random.default_rng(s.seed + j)
        g = generate(
            CachedSteps(model),
            plan.prompt_ids,
            max_new_tokens=s.max_new_tokens,
            eos_ids=plan.eos_ids,
            temperature=t,
            top_k=s.top_k,
            top_p=s.top_p,
            rng=rng,
        )
        gens.append(g)
        rows.append(
            {
                "temperature": t,
                "seed": s.seed + j,
                "top_k": s.top_k,
                "top_p": s.top_p,
                "tokens": len(g.ids),
                "stop_reason": g.stop_reason,
                "mean_probability": float(np.mean(g.probs)),
                "text": continuation_text(tok, g, plan.eos_ids),
                "ids": " ".join(map(str, g.ids)),
            }
        )
    return gens, rows


# --- 6. the next-token distribution at each temperature -----------------------------------------------


def distribution(tok: Tokenizer, logits: np.ndarray, s: Settings, n: int = TOP_N) -> tuple[list[dict], dict]:
    """The n most likely next tokens with their probability at each temperature, and per temperature
    the entropy, the top token's probability and how many tokens top_k and top_p leave to draw from."""
    top = np.argsort(-logits, kind="stable")[:n]  # the same order at every T: softmax keeps the order
    probs = {t: next_token_probs(logits, t) for t in s.temperatures}
    rows = []
    for rank, tid in enumerate(top, start=1):
        row = {"rank": rank, "id": int(tid), "token": shown(tok.token_text(int(tid))), "logit": float(logits[tid])}
        row.update({f"p_T{t:g}": probs[t][tid] for t in s.temperatures})
        rows.append(row)
    summary = {
        "next_token_top1_prob": [float(probs[t][top[0]]) for t in s.temperatures],
        "next_token_top15_mass": [float(probs[t][top].sum()) for t in s.temperatures],
        "next_token_entropy_bits": [
            float(-(probs[t][probs[t] > 0] * np.log2(probs[t][probs[t] > 0])).sum()) for t in s.temperatures
        ],
        "next_token_kept_by_filters": [
            int(np.count_nonzero(filter_probs(probs[t], top_k=s.top_k, top_p=s.top_p))) for t in s.temperatures
        ],
    }
    return rows, summary


# --- 7. the KV cache against recomputing the prefix ---------------------------------------------------


def recompute(model: Model, all_ids: Sequence[int], n_prompt: int, cached: CachedSteps) -> list[dict]:
    """At each greedy step, the whole prefix again from scratch (no cache), against the cached logits."""
    rows = []
    for i, kept in enumerate(cached.logits):
        prefix = list(all_ids[: n_prompt + i])
        t0 = time.perf_counter()
        full = model.forward(prefix)[-1]  # every position again; only the last one's logits are used
        seconds = time.perf_counter() - t0
        rows.append(
            {
                "step": i + 1,
                "prefix_tokens": len(prefix),
                "tokens_through_model_cached": len(prefix) if i == 0 else 1,
                "cached_ms": 1e3 * cached.seconds[i],
                "recompute_ms": 1e3 * seconds,
                "max_abs_diff": float(np.abs(full - kept).max()),
                "same_argmax": int(full.argmax()) == int(kept.argmax()),
            }
        )
    return rows


def timing_metrics(rows: Sequence[Mapping]) -> dict:
    """Median time per token over the one-token steps (step 1, the prefill, is left out of both)."""
    steps = rows[1:]
    if not steps:
        return {
            "kv_cache_ms_per_token": None,
            "recompute_ms_per_token": None,
            "kv_cache_speedup": None,
            "timing_steps": 0,
        }
    cached = statistics.median(r["cached_ms"] for r in steps)
    full = statistics.median(r["recompute_ms"] for r in steps)
    return {
        "kv_cache_ms_per_token": cached,
        "recompute_ms_per_token": full,
        "kv_cache_speedup": full / cached,
        "timing_steps": len(steps),
    }

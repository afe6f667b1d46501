"""Lesson 5's step 8: llama.cpp's greedy text and its speed beside ours, where it is installed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bytesup.lessons.generating_text.loop import continuation_text, shown
from bytesup.lessons.generating_text.preparation import Plan
from bytesup.model import llama_cpp_ref
from bytesup.model.generate import Generation

# --- 8. llama.cpp beside ours -------------------------------------------------------------------------

LLAMA_CPP_THREADS = 2
LLAMA_CPP_KEYS = (
    "llama_cpp_version",
    "llama_cpp_greedy_ids",
    "llama_cpp_greedy_text",
    "llama_cpp_parts_at",
    "llama_cpp_parts_at_step",
    "llama_cpp_same_tokens_all",
    "llama_cpp_top_logit",
    "llama_cpp_first_step_max_abs_logit_diff",
    "llama_cpp_first_step_mean_abs_logit_diff",
    "llama_cpp_parts_tokens",
    "llama_cpp_parts_logits",
    "llama_cpp_parts_margins",
    "llama_cpp_parts_max_abs_logit_diff",
)


def parts_at(ours: Sequence[int], theirs: Sequence[int]) -> int | None:
    """The first index where two generated id lists differ; a list that stopped earlier (end of
    sequence) parts where it stopped; None when they are the same throughout."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    return None if len(ours) == len(theirs) else min(len(ours), len(theirs))


def llama_cpp_greedy(
    model_gguf, prompt_ids: Sequence[int], max_new_tokens: int, eos: Sequence[int], threads: int = LLAMA_CPP_THREADS
) -> tuple[list[int], list[np.ndarray]]:
    """llama.cpp's own greedy loop, in this process: OUR prompt ids in, its argmax appended each step.
    Returns its ids and, per step, the logits it chose from (float32, one per vocabulary entry)."""
    from llama_cpp import Llama  # only after llama_cpp_ref.status() said it runs here

    llm = Llama(
        model_path=llama_cpp_ref.model_path(model_gguf),  # a split model: its first part by llama.cpp's name
        n_ctx=len(prompt_ids) + max_new_tokens + 8,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=True,
        verbose=False,
    )
    try:
        llm.eval([int(i) for i in prompt_ids])  # the prefill, on the same ids our tokenizer gave
        ids, logits = [], []
        while True:
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)  # the last position's logits
            token = int(np.argmax(last))  # greedy, on its own logits
            ids.append(token)
            logits.append(last)
            if token in eos or len(ids) == max_new_tokens:
                return ids, logits
            llm.eval([token])  # one token through its KV cache
    finally:
        if hasattr(llm, "close"):
            llm.close()


def llama_cpp_nulls(why: str | None) -> dict:
    return {**dict.fromkeys(LLAMA_CPP_KEYS), "llama_cpp_skipped": why}


STREAMING_SKIP = (
    "this run streams the weights (their float32 size is over forward.resident_budget_mb); llama.cpp "
    "would map the whole file into the job's memory beside them, so it is not run (as in the decode timing)"
)


def llama_cpp_side(model_gguf, plan: Plan, metrics: Mapping, tables: Mapping) -> tuple[dict, list[dict], list]:
    """llama.cpp beside our greedy run (``run``'s metrics and tables): (metrics, rows, its logits per step).

    rows, one per step of the longer run: our token, llama.cpp's, the same?, each engine's top logit,
    and while both have read the same prefix (up to and including the step where they part) the
    largest |logit difference| over the vocabulary. Where llama.cpp cannot run here, the metrics
    are null, ``llama_cpp_skipped`` holds the one-line reason, and rows and logits are empty.
    """
    if metrics.get("weights_mode") == "streaming":  # llama.cpp would map the whole file into this job
        return llama_cpp_nulls(STREAMING_SKIP), [], []
    usable, why = llama_cpp_ref.status(model_gguf)
    if not usable:
        return llama_cpp_nulls(why), [], []
    tok, s = plan.tokenizer, plan.settings
    ours_ids, ours_logits = list(metrics["greedy_ids"]), tables["greedy_logits"]
    theirs_ids, theirs_logits = llama_cpp_greedy(model_gguf, plan.prompt_ids, s.max_new_tokens, plan.eos_ids)
    part = parts_at(ours_ids, theirs_ids)
    same_prefix = len(ours_ids) if part is None else part + 1  # steps whose logits answer the same ids
    rows = []
    for i in range(max(len(ours_ids), len(theirs_ids))):
        a = ours_ids[i] if i < len(ours_ids) else None
        b = theirs_ids[i] if i < len(theirs_ids) else None
        diff = float(np.abs(ours_logits[i] - theirs_logits[i]).max()) if i < same_prefix else None
        rows.append(
            {
                "step": i + 1,
                "ours_id": a,
                "ours": None if a is None else shown(tok.token_text(a)),
                "llama_cpp_id": b,
                "llama_cpp": None if b is None else shown(tok.token_text(b)),
                "same": a == b,
                "ours_top_logit": None if a is None else float(ours_logits[i][a]),
                "llama_cpp_top_logit": None if b is None else float(theirs_logits[i][b]),
                "max_abs_logit_diff": diff,
            }
        )
    theirs_g = Generation(
        list(plan.prompt_ids), theirs_ids, stop_reason="eos" if theirs_ids[-1] in plan.eos_ids else "max_new_tokens"
    )
    m = {
        "llama_cpp_version": why,
        "llama_cpp_greedy_ids": theirs_ids,
        "llama_cpp_greedy_text": continuation_text(tok, theirs_g, plan.eos_ids),
        "llama_cpp_parts_at": part,
        # for a reader: the step (1 = the first new token) where the texts part, or, when they never
        # do, how many tokens both wrote alike; each is null in the other case and when llama.cpp did not run
        "llama_cpp_parts_at_step": None if part is None else part + 1,
        "llama_cpp_same_tokens_all": len(ours_ids) if part is None else None,
        "llama_cpp_top_logit": float(theirs_logits[0][theirs_ids[0]]),
        "llama_cpp_first_step_max_abs_logit_diff": rows[0]["max_abs_logit_diff"],
        "llama_cpp_first_step_mean_abs_logit_diff": float(np.abs(ours_logits[0] - theirs_logits[0]).mean()),
        "llama_cpp_parts_tokens": None,
        "llama_cpp_parts_logits": None,
        "llama_cpp_parts_margins": None,
        "llama_cpp_parts_max_abs_logit_diff": None,
        "llama_cpp_skipped": None,
    }
    if part is not None and part < min(len(ours_ids), len(theirs_ids)):
        # where they part: both read the same ids, and each put another token on top
        a, b = ours_ids[part], theirs_ids[part]
        lo, lt = ours_logits[part], theirs_logits[part]
        m.update(
            {
                "llama_cpp_parts_tokens": [tok.token_text(a), tok.token_text(b)],  # [ours, llama.cpp's]
                # logits of [our token, llama.cpp's token] in [ours, llama.cpp]
                "llama_cpp_parts_logits": [[float(lo[a]), float(lo[b])], [float(lt[a]), float(lt[b])]],
                # our token's lead over llama.cpp's token, in [ours, llama.cpp]: positive, then negative
                "llama_cpp_parts_margins": [float(lo[a] - lo[b]), float(lt[a] - lt[b])],
                "llama_cpp_parts_max_abs_logit_diff": rows[part]["max_abs_logit_diff"],
            }
        )
    return m, rows, theirs_logits

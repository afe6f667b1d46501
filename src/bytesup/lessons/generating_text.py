"""Lesson 5, "Generating text": from a prompt to new text, one token at a time.

What is computed, in the lesson's order, on the model the workflow fetched:
  1. the prompt -> token ids, with the tokenizer stored in the GGUF's metadata;
  2. the prefill: the whole prompt through the model once, its keys and values kept in a KV
     cache; the logits of the last position -> softmax -> the most likely token (greedy);
  3. the greedy loop: append that token, run ONE new token through the cache, repeat, until
     end-of-sequence or max_new_tokens; each chosen token's probability;
  4. sampled continuations: softmax(logits / T) for each configured temperature T, cut to the
     top_k most likely tokens and then to the top_p nucleus, one seeded draw per step
     (numpy Generator seeded with seed + the temperature's index);
  5. the same prompt as a user message through the file's own chat template (rendered in the
     sandbox of bytesup.model.chat), then a greedy answer; a file without a template skips this;
  6. the next-token distribution of step 2 at each temperature (the figure);
  7. the KV cache against recomputing the whole prefix at every greedy step: the same logits
     (largest absolute difference) and the wall-clock time per token of each;
  8. llama.cpp beside ours, where llama-cpp-python is installed and runs here (``llama_cpp_side``):
     the same prompt ids, its own greedy loop on its own logits, compared token by token; where the
     two texts part, and the two candidates' logits in both engines at that step. Otherwise its
     metrics are null and ``llama_cpp_skipped`` says why in one line (with how to install it).

The machinery is bytesup.model (tokenizer, forward pass with its KV cache, generate's softmax,
filters and loop, chat templates); this module runs it once and returns every number and table
(``run``). Settings and the prompt are checked before the model is opened (``prepare``): a bad
setting ends in one line naming its config key.

Times are wall-clock medians on whatever else the machine was doing; they teach the ratio, not
a benchmark.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bytesup.lessons import LessonInputError, figure
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model import llama_cpp_ref
from bytesup.model.arch import ARCHITECTURES
from bytesup.model.chat import TEMPLATE_KEY, ChatTemplateError, render_chat_from_metadata
from bytesup.model.forward import Model
from bytesup.model.generate import Generation, filter_probs, generate, next_token_probs
from bytesup.model.tokenizer import Tokenizer, TokenizerError, UnsupportedTokenizerError

SPEC = LessonSpec(
    id="05_generating_text",
    title="Generating text",
    kind=SERIES,
    position=5,
    source=(
        "Lesson 5 of the LLM Basics series (its text is not among the course files here;"
        " the numbers are recomputed from the model)"
    ),
    reads=("model_gguf", "metadata_json"),
    tables=(
        "greedy_steps.csv",
        "sampled_continuations.csv",
        "next_token_distribution.csv",
        "kv_cache_vs_recompute.csv",
    ),
    figures={
        "next_token_distribution.png": (
            "The next token after the prompt: probabilities of the most likely tokens at each configured"
            " temperature (low T sharpens, high T flattens)"
        ),
    },
    headlines=(
        Headline("greedy_text", "greedy continuation of the prompt", fmt="cut:120"),
        Headline("first_token_prob", "probability of the first greedy token", fmt=".3f"),
        Headline("stop_reason", "why the greedy loop stopped"),
        Headline("chat_greedy_text", "greedy answer through the file's chat template", fmt="cut:120"),
        Headline("kv_cache_max_abs_diff", "largest |logit difference|, KV cache vs recomputing the prefix", fmt=".2e"),
        Headline("kv_cache_ms_per_token", "time per token with the KV cache (median)", unit="ms", fmt=".1f"),
        Headline(
            "recompute_ms_per_token", "time per token recomputing the whole prefix (median)", unit="ms", fmt=".1f"
        ),
        Headline("kv_cache_speedup", "recompute time / KV-cache time per token", fmt=".1f"),
        Headline("llama_cpp_parts_at", "llama.cpp's greedy text parts from ours at new token (0 = first; null: never)"),
        Headline(
            "llama_cpp_first_step_max_abs_logit_diff",
            "largest |logit difference|, llama.cpp vs ours, after the prompt",
            fmt=".3f",
        ),
    ),
    config_keys=("prompt", "generate", "seed", "forward"),
    architectures=tuple(ARCHITECTURES),  # every row of the forward pass's architecture table
    runs_model=True,
)

# The config schema's defaults (workflow/schemas/config.schema.yaml), for keys a caller leaves out.
DEFAULT_GENERATE = {"max_new_tokens": 16, "temperatures": [0.5, 1.0, 2.0], "top_k": 50, "top_p": 0.95}
DEFAULT_RESIDENT_BUDGET_MB = 2000
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


def prepare(metadata: Mapping, prompt, generate_cfg: Mapping | None, seed, *, source: str = "metadata.json") -> Plan:
    """Check the settings and the prompt, tokenize it, render the chat prompt: no weights touched."""
    s = settings(generate_cfg, seed)
    if not isinstance(prompt, str) or prompt == "":
        raise GeneratingTextError(f"prompt = {prompt!r}: the prompt is empty; give some text for the model to continue")
    arch = metadata.get("general.architecture")
    refusal = SPEC.refusal(arch)
    if refusal:
        raise GeneratingTextError(refusal)
    key = f"{arch}.context_length"
    context = metadata.get(key)
    if not _whole(context) or context < 1:
        raise GeneratingTextError(f"{source}: {key} = {context!r} is missing or not a positive whole number")
    try:
        tok = Tokenizer.from_metadata(metadata, source=source)
    except (TokenizerError, UnsupportedTokenizerError) as err:
        raise GeneratingTextError(str(err)) from None
    ids = tok.encode(prompt)
    if not ids:
        raise GeneratingTextError(f"prompt = {prompt!r} gives no tokens in this file's vocabulary; use other text")
    too_long = _fits(f"prompt ({len(prompt)} characters)", len(ids), s, int(context), key)
    if too_long:
        raise GeneratingTextError(too_long)
    template = metadata.get(TEMPLATE_KEY)
    plan = Plan(
        s,
        prompt,
        ids,
        tok,
        eos_ids(tok, metadata),
        int(context),
        has_template=isinstance(template, str) and bool(template.strip()),
    )
    # the chat prompt: the prompt as a user's message, in the text the instruct model was trained on
    try:
        chat = render_chat_from_metadata(metadata, [{"role": "user", "content": prompt}], source=source)
    except ChatTemplateError as err:
        plan.chat_note = f"chat part skipped: {err}"
        return plan
    chat_ids = encode_chat(tok, chat)
    too_long = _fits("chat prompt", len(chat_ids), s, int(context), key)
    if too_long:
        plan.chat_note = f"chat part skipped: {too_long}"
        return plan
    plan.chat_prompt, plan.chat_ids = chat, chat_ids
    return plan


def encode_chat(tok: Tokenizer, chat_prompt: str) -> list[int]:
    """Token ids of a rendered chat prompt: its special tokens (<|im_start|>, ...) matched whole, and no
    second BOS when the template already wrote the BOS text itself."""
    bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else None
    return tok.encode(chat_prompt, add_special=not (bos and chat_prompt.startswith(bos)))


def open_model(model_gguf, forward_cfg: Mapping | None = None) -> Model:
    """The model, its float32 weights resident when they fit forward.resident_budget_mb (else streamed)."""
    budget = (forward_cfg or {}).get("resident_budget_mb", DEFAULT_RESIDENT_BUDGET_MB)
    if not _number(budget) or budget <= 0:
        raise GeneratingTextError(f"forward.resident_budget_mb = {budget!r}: use a number of MB above 0")
    return Model.from_gguf(model_gguf, resident_budget_bytes=int(budget * 2**20))


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


# --- the whole lesson -----------------------------------------------------------------------------------


def run(model: Model, plan: Plan) -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports, and its tables, each computed once.

    tables: "greedy" (greedy_rows), "greedy_logits" (the last position's logits at each greedy step,
    from the cache), "sampled", "distribution", "kv" (recompute's rows).
    """
    s, tok = plan.settings, plan.tokenizer
    n_prompt = len(plan.prompt_ids)

    # 1-3: prefill, then one token at a time through the cache, greedy
    steps = CachedSteps(model)
    g = generate(steps, plan.prompt_ids, max_new_tokens=s.max_new_tokens, eos_ids=plan.eos_ids, temperature=0.0)
    greedy = greedy_rows(tok, g, steps.logits, n_prompt)
    metrics: dict = {
        "prompt": plan.prompt,
        "prompt_ids": plan.prompt_ids,
        "prompt_tokens": [tok.token_text(i) for i in plan.prompt_ids],
        "n_prompt_tokens": n_prompt,
        "eos_ids": list(plan.eos_ids),
        "max_new_tokens": s.max_new_tokens,
        "temperatures": list(s.temperatures),
        "top_k": s.top_k,
        "top_p": s.top_p,
        "seed": s.seed,
        "context_length": plan.context_length,
        "weights_mode": model.mode,
        "greedy_ids": g.ids,
        "greedy_tokens": [tok.token_text(i) for i in g.ids],
        "greedy_probs": g.probs,
        "greedy_text": continuation_text(tok, g, plan.eos_ids),
        "stop_reason": g.stop_reason,
        "first_token_id": g.ids[0],
        "first_token": tok.token_text(g.ids[0]),
        "first_token_prob": g.probs[0],
        "prefill_ms": 1e3 * steps.seconds[0],
    }

    # 4: sampling at each temperature
    sampled, sampled_rows = sample(model, plan)
    metrics.update(
        {
            "sample_seeds": [r["seed"] for r in sampled_rows],
            "sampled_ids": [x.ids for x in sampled],
            "sampled_texts": [r["text"] for r in sampled_rows],
            "sampled_stop_reasons": [x.stop_reason for x in sampled],
        }
    )

    # 5: the chat template, then a greedy answer
    if plan.chat_ids is not None:
        chat_steps = CachedSteps(model)
        c = generate(chat_steps, plan.chat_ids, max_new_tokens=s.max_new_tokens, eos_ids=plan.eos_ids, temperature=0.0)
        metrics.update(
            chat_template_present=plan.has_template,
            chat_prompt=plan.chat_prompt,
            chat_prompt_ids=plan.chat_ids,
            chat_greedy_ids=c.ids,
            chat_greedy_probs=c.probs,
            chat_greedy_text=continuation_text(tok, c, plan.eos_ids),
            chat_stop_reason=c.stop_reason,
            chat_note="",
        )
    else:
        metrics.update(
            chat_template_present=plan.has_template,
            chat_prompt=None,
            chat_prompt_ids=None,
            chat_greedy_ids=None,
            chat_greedy_probs=None,
            chat_greedy_text=None,
            chat_stop_reason=None,
            chat_note=plan.chat_note,
        )

    # 6: the first step's distribution at each temperature
    dist_rows, dist = distribution(tok, steps.logits[0], s)
    metrics.update(dist)

    # 7: the same logits without the cache, and what each costs per token
    kv = recompute(model, g.all_ids, n_prompt, steps)
    metrics.update(
        {
            "kv_cache_max_abs_diff": max(r["max_abs_diff"] for r in kv),
            "kv_cache_same_argmax": all(r["same_argmax"] for r in kv),
            "kv_cache_tokens_total": sum(r["tokens_through_model_cached"] for r in kv),
            "recompute_tokens_total": sum(r["prefix_tokens"] for r in kv),
            **timing_metrics(kv),
        }
    )
    tables = {
        "greedy": greedy,
        "greedy_logits": steps.logits,
        "sampled": sampled_rows,
        "distribution": dist_rows,
        "kv": kv,
    }
    return metrics, tables


# --- 8. llama.cpp beside ours -------------------------------------------------------------------------

LLAMA_CPP_THREADS = 2
LLAMA_CPP_KEYS = (
    "llama_cpp_version",
    "llama_cpp_greedy_ids",
    "llama_cpp_greedy_text",
    "llama_cpp_parts_at",
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
        model_path=str(model_gguf),
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


def compute(
    model_gguf,
    metadata: Mapping,
    prompt,
    generate_cfg: Mapping | None = None,
    seed=0,
    forward_cfg: Mapping | None = None,
) -> tuple[dict, dict]:
    """prepare (one-line errors before any heavy work), open the model, run, close it; then llama.cpp
    beside it (tables["llama_cpp"], tables["llama_cpp_logits"]; null metrics where it cannot run)."""
    plan = prepare(metadata, prompt, generate_cfg, seed)
    with open_model(model_gguf, forward_cfg) as model:
        metrics, tables = run(model, plan)
    side, rows, logits = llama_cpp_side(model_gguf, plan, metrics, tables)
    metrics.update(side)
    tables.update(llama_cpp=rows, llama_cpp_logits=logits)
    return metrics, tables


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """The lesson's claims file holds no course numbers (see claims/05_generating_text.yaml)."""
    context = claims_mod.run_context(model, sha256, metadata)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- the figure ---------------------------------------------------------------------------------------


def plot_distribution(rows: Sequence[Mapping], temperatures: Sequence[float], title: str = ""):
    """Grouped bars on a log scale: the top tokens (most likely first) and their probability at each
    temperature; the legend says how much of the whole distribution those tokens hold."""
    fig, ax = figure()
    x = np.arange(len(rows))
    width = 0.8 / len(temperatures)
    lowest = 1.0
    for j, t in enumerate(temperatures):
        p = np.array([r[f"p_T{t:g}"] for r in rows], dtype=np.float64)
        lowest = min(lowest, float(p[p > 0].min()) if (p > 0).any() else 1.0)
        ax.bar(
            x + (j - (len(temperatures) - 1) / 2) * width,
            p,
            width,
            color=f"C{j}",
            label=f"T = {t:g}: these {len(rows)} tokens hold {p.sum():.0%}",
        )
    ax.set_xticks(x, [r["token"] for r in rows], rotation=50, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(max(lowest / 3, 1e-12), 1.5)
    ax.set_ylabel("probability of being the next token")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(axis="y", which="major", lw=0.3, alpha=0.6)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig

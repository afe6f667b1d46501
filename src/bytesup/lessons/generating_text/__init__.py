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

The lesson's parts, by concern: preparation (step 0), loop (1 to 7), reference (8: llama.cpp);
this module holds the SPEC, ``prepare``, ``run`` and the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bytesup.lessons import claims as claims_mod
from bytesup.lessons import figure, legend_below, resident_budget_bytes
from bytesup.lessons.generating_text.loop import (
    CachedSteps,
    continuation_text,
    distribution,
    greedy_rows,
    recompute,
    sample,
    timing_metrics,
)
from bytesup.lessons.generating_text.preparation import (
    GeneratingTextError,
    Plan,
    _fits,
    _whole,
    eos_ids,
    settings,
)
from bytesup.lessons.generating_text.reference import llama_cpp_side
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model.arch import ARCHITECTURES
from bytesup.model.chat import TEMPLATE_KEY, ChatTemplateError, render_chat_from_metadata
from bytesup.model.forward import Model
from bytesup.model.generate import generate
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
    key_tables=("sampled_continuations.csv",),
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
        Headline(
            "llama_cpp_parts_at_step",
            "step at which llama.cpp's greedy text first differs from ours (1 = the first new token)",
        ),
        Headline("llama_cpp_same_tokens_all", "new tokens llama.cpp wrote exactly as ours, when it never differs"),
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
    return Model.from_gguf(model_gguf, resident_budget_bytes=resident_budget_bytes(forward_cfg))


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
        # what to expect of the text: the model's size, every tensor's weights counted
        "model_parameters": sum(info.n_elements for info in model.gguf.tensors),
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
    """Grouped horizontal bars on a log scale: the top tokens (most likely first, top to bottom) and
    their probability at each temperature; the legend says how much of the whole distribution those
    tokens hold."""
    fig, ax = figure(figsize=(6.4, 2.6 + 0.4 * len(rows)))
    y = np.arange(len(rows))
    height = 0.8 / len(temperatures)
    lowest = 1.0
    for j, t in enumerate(temperatures):
        p = np.array([r[f"p_T{t:g}"] for r in rows], dtype=np.float64)
        lowest = min(lowest, float(p[p > 0].min()) if (p > 0).any() else 1.0)
        ax.barh(
            y + (j - (len(temperatures) - 1) / 2) * height,
            p,
            height,
            color=f"C{j}",
            label=f"T = {t:g}: these {len(rows)} tokens hold {p.sum():.0%}",
        )
    ax.set_yticks(y, [r["token"] for r in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(max(lowest / 3, 1e-12), 1.5)
    ax.set_xlabel("probability of being the next token")
    legend_below(fig, ax)
    ax.grid(axis="x", which="major", lw=0.3, alpha=0.6)
    if title:
        ax.set_title(title)
    return fig

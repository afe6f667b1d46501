"""Lesson 4, "The forward pass": a prompt through the whole model, from token ids to the next token.

What is computed, in the lesson's order, on the model the workflow fetched:
  1. the prompt -> token ids, with the tokenizer stored in the GGUF's metadata;
  2. one forward pass (bytesup.model.forward.transformer, llama2.c's transformer()): the first
     N - 1 prompt tokens go in together and leave their keys and values in the cache, then the
     last prompt token goes in alone with a Trace, so the trace records exactly one token's work:
     the residual stream after the embedding and after every block, the multiply-adds of every
     matmul and the weight bytes it used;
  3. final norm -> logits (the unembedding: output.weight, or token_embd when the file ties
     them) -> softmax -> the five most likely next tokens;
  4. the logit lens: the final norm and the unembedding applied to the residual after the
     embedding and after each block; the top token there, and the rank and probability of the
     model's final prediction;
  5. the cost of that token, from the metadata alone (forward.flops_per_token, the float32 and
     file bytes of the weights one decode step reads) beside what the trace counted.

The machinery is bytesup.model (tokenizer, forward pass, weights); this module runs it once and
returns every number and table (``run``). The prompt and the settings are checked before the
model is opened (``prepare``): a bad one ends in one line naming its config key or file.
Block 0 written out step by step is the notebook's part (it checks itself against
forward.attention_block and forward.ffn_block).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bytesup.lessons import LessonInputError, figure, resident_budget_bytes
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model.arch import (
    ARCHITECTURES,
    BIAS_TENSORS,
    OPTIONAL_ROLES,
    ArchMetadataError,
    ArchSpec,
    UnsupportedArchitectureError,
    recipe_summary,
    spec_from_metadata,
)
from bytesup.model.forward import (
    Model,
    flops_per_token,
    macs_per_token,
    rms_norm,
    unembed,
    weight_float32_bytes_per_token,
)
from bytesup.model.generate import next_token_probs
from bytesup.model.tokenizer import Tokenizer, TokenizerError, UnsupportedTokenizerError
from bytesup.model.trace import Trace
from bytesup.model.weights import WeightBytes

SPEC = LessonSpec(
    id="04_the_forward_pass",
    title="The forward pass",
    kind=SERIES,
    position=4,
    source=(
        "Lesson 4 of the LLM Basics series (its text is not among the course files here;"
        " the numbers are recomputed from the model)"
    ),
    reads=("model_gguf", "metadata_json"),
    tables=("prompt_tokens.csv", "next_token_top5.csv", "logit_lens.csv", "cost_per_token.csv"),
    key_tables=("next_token_top5.csv",),
    figures={
        "residual_norms.png": (
            "The residual stream's length (L2 norm, last prompt position) after the embedding and after every block"
        ),
        "logit_lens.png": (
            "The logit lens: the final norm and unembedding applied after each block; probability and rank of"
            " the model's final next token"
        ),
    },
    headlines=(
        Headline("next_token", "most likely next token", fmt="cut:40"),
        Headline("next_token_id", "its token id"),
        Headline("next_token_prob", "its probability", fmt=".3f"),
        Headline("next_token_logit", "its logit", fmt=".3f"),
        Headline("head_tensor", "unembedding matrix"),
        Headline("logit_lens_first_block_top1", "first block after which the logit lens already ranks it first"),
        Headline("residual_norm_final", "residual stream length after the last block", fmt=".1f"),
        Headline(
            "gflops_per_token",
            "FLOPs per token (decode at the prompt's length), from the metadata",
            unit="GFLOP",
            fmt=".4f",
        ),
        Headline("flops_traced_equal_metadata", "the traced pass multiplied exactly that many"),
        Headline(
            "weight_mb_per_token_file", "weight bytes read per token, as stored in the file", unit="MB", fmt=".2f"
        ),
        Headline("weight_mb_per_token_float32", "weight bytes used per token as float32", unit="MB", fmt=".2f"),
        Headline("flops_per_file_byte", "FLOPs per weight byte read (file)", fmt=".2f"),
    ),
    config_keys=("prompt", "forward"),
    architectures=tuple(ARCHITECTURES),  # every row of the forward pass's architecture table
    runs_model=True,
)

TOP_K = 5  # next tokens shown


class ForwardPassError(LessonInputError):
    """A prompt or setting this lesson cannot use; one line naming the config key or file."""


def _whole(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def shown(text: str) -> str:
    """A token's text in quotes, its spaces visible and newlines escaped: '" Paris"'."""
    return json.dumps(text, ensure_ascii=False)


# --- 0. the prompt and the settings, checked before any heavy work --------------------------------


@dataclass
class Plan:
    """Everything decided before the model is opened."""

    prompt: str
    prompt_ids: list[int]
    tokenizer: Tokenizer
    spec: ArchSpec  # from the metadata alone (tied is decided when the file's tensors are seen)
    resident_budget_bytes: int


def prepare(metadata: Mapping, prompt, forward_cfg: Mapping | None = None, *,
            source: str = "metadata.json") -> Plan:  # fmt: skip
    """Check the prompt and settings and tokenize the prompt: no weights touched."""
    if not isinstance(prompt, str) or prompt == "":
        raise ForwardPassError(f"prompt = {prompt!r}: the prompt is empty; give some text for the model to continue")
    budget = resident_budget_bytes(forward_cfg)
    refusal = SPEC.refusal(metadata.get("general.architecture"))
    if refusal:
        raise ForwardPassError(f"{SPEC.id}: {refusal} ({source}, general.architecture)")
    try:
        spec = spec_from_metadata(metadata, path=source)
        tok = Tokenizer.from_metadata(metadata, source=source)
    except (ArchMetadataError, UnsupportedArchitectureError, TokenizerError, UnsupportedTokenizerError) as err:
        raise ForwardPassError(str(err)) from None
    ids = tok.encode(prompt)
    if not ids:
        raise ForwardPassError(
            f"prompt = {prompt!r} gives no tokens in this file's vocabulary ({source}); use other text"
        )
    if len(ids) > spec.context_length:
        raise ForwardPassError(
            f"prompt: {len(ids)} tokens exceed {spec.arch}.context_length = {spec.context_length} ({source});"
            " shorten the prompt"
        )
    return Plan(prompt, [int(i) for i in ids], tok, spec, budget)


def open_model(model_gguf, plan: Plan) -> Model:
    """The model, its float32 weights resident when they fit forward.resident_budget_mb (else streamed)."""
    return Model.from_gguf(model_gguf, resident_budget_bytes=plan.resident_budget_bytes)


# --- 2. one forward pass, the last token traced -----------------------------------------------------


def traced_pass(model: Model, ids: Sequence[int]) -> tuple[np.ndarray, Trace]:
    """Logits of the position after the prompt, and the Trace of the last prompt token's pass.

    The first N - 1 tokens go in together (their keys and values stay in the cache); the last one
    goes alone, so the trace holds one token's residual stream, multiply-adds and weight bytes:
    a decode step attending to N positions.
    """
    cache = model.new_cache(max_tokens=len(ids))
    if len(ids) > 1:
        model.forward(list(ids[:-1]), cache)
    trace = Trace()
    logits = model.forward(list(ids[-1:]), cache, trace=trace)[-1]
    return logits, trace


def top_tokens(tok: Tokenizer, logits: np.ndarray, k: int = TOP_K) -> list[dict]:
    """The k most likely next tokens: id, text, logit, probability (ties: the lower id first)."""
    p = next_token_probs(logits)
    top = np.argsort(-logits, kind="stable")[:k]
    return [
        {"rank": r, "id": int(i), "token": tok.token_text(int(i)), "logit": float(logits[i]), "prob": float(p[i])}
        for r, i in enumerate(top, start=1)
    ]


# --- 4. the logit lens ------------------------------------------------------------------------------


def lens_logits(model: Model, residual: np.ndarray) -> np.ndarray:
    """The final norm and the unembedding applied to one residual vector: what the model would
    predict if the blocks after it were skipped."""
    x = rms_norm(residual[None, :], model.weights.output_norm, model.spec.rms_eps)
    return unembed(x, model.weights, model.spec)[0]


def layer_name(i: int) -> str:
    """residual[0] is after the embedding, residual[i] after block i - 1."""
    return "embedding" if i == 0 else f"block {i - 1}"


def logit_lens(model: Model, tok: Tokenizer, residuals: Sequence[np.ndarray], next_id: int) -> list[dict]:
    """One row per point of the residual stream: its length, the lens's top token and its
    probability, and the final next token's probability and rank (1 = the lens's top) there."""
    rows = []
    for i, r in enumerate(residuals):
        lg = lens_logits(model, r)
        p = next_token_probs(lg)
        top = int(np.argmax(lg))
        rows.append(
            {
                "layer": i,
                "after": layer_name(i),
                "residual_norm": float(np.linalg.norm(r.astype(np.float64))),
                "top_id": top,
                "top_token": shown(tok.token_text(top)),
                "top_prob": float(p[top]),
                "next_token_prob": float(p[next_id]),
                "next_token_rank": 1 + int(np.count_nonzero(lg > lg[next_id])),
            }
        )
    return rows


# --- 5. what one token costs -----------------------------------------------------------------------


def cost_table(spec: ArchSpec, per_tensor: Mapping, context_len: int) -> list[dict]:
    """Per step of one decode token attending to `context_len` positions: multiply-adds, FLOPs, and
    the weight bytes it reads (float32 as used, and as stored in the file), summed over the blocks.

    per_tensor: weights.weight_bytes_per_token(...).per_tensor (tensor name -> (file, float32 bytes)).
    Norms cost O(d) arithmetic and are counted as 0 FLOPs, as in forward.macs_per_token.
    """
    d, L = spec.d_model, spec.n_layers

    def block_bytes(*roles):  # the file's tensors holding the roles (phi3: Q K V in one attn_qkv)
        names = [spec.tensor_name(r, i) for i in range(L) for r in spec.file_roles(*roles)]
        return sum(per_tensor[n][0] for n in names), sum(per_tensor[n][1] for n in names)

    def files(*roles):  # "attn_q, attn_k, attn_v", or "attn_qkv"
        return ", ".join(spec.tensor_name(r, 0).split(".")[2] for r in spec.file_roles(*roles))

    head = spec.tensor_name("output")
    rows = [
        ("embedding row", "token_embd.weight, one row", 0, per_tensor["token_embd.weight[row]"]),
        ("attention norms", "attn_norm", 0, block_bytes("attn_norm")),
        (
            "Q K V projections",
            files("wq", "wk", "wv"),
            L * d * (spec.q_dim + 2 * spec.kv_dim),
            block_bytes("wq", "wk", "wv"),
        ),
        (
            "attention scores and weighted sum",
            f"keys and values of {context_len} positions (no weights)",
            L * 2 * spec.n_heads * spec.head_dim * context_len,
            (0, 0),
        ),
        ("output projection", "attn_output", L * spec.q_dim * d, block_bytes("wo")),
        ("FFN norms", "ffn_norm", 0, block_bytes("ffn_norm")),
        (
            "FFN gate, up, down",
            files("w_gate", "w_up", "w_down"),
            L * 3 * d * spec.d_ff,
            block_bytes("w_gate", "w_up", "w_down"),
        ),
    ]
    extras = [r for r in spec.roles if r in OPTIONAL_ROLES]  # gemma3's q/k and post norms, qwen2's biases
    if extras:
        files = ", ".join(spec.tensor_name(r, 0).removeprefix("blk.0.") for r in extras)
        biases = [r for r in extras if r in BIAS_TENSORS]  # qwen2's; the rest are norms (gemma3's)
        kinds = ["norms"] * (len(biases) < len(extras)) + ["biases"] * bool(biases)
        rows.append((f"{spec.arch}'s extra {' and '.join(kinds)}", files, 0, block_bytes(*extras)))
    rows += [
        ("final norm", "output_norm", 0, per_tensor[spec.tensor_name("output_norm")]),
        ("unembedding", f"{head}{' (tied)' if spec.tied else ''}", spec.vocab * d, per_tensor[head]),
    ]
    return [
        {"step": step, "weights": what, "macs": macs, "flops": 2 * macs, "float32_bytes": b[1], "file_bytes": b[0]}
        for step, what, macs, b in rows
    ]


def cost_metrics(spec: ArchSpec, bytes_per_token: WeightBytes, trace: Trace, context_len: int) -> dict:
    """The metadata's counts beside the trace's; they agree exactly (the checks say where not)."""
    flops_meta = flops_per_token(spec, context_len)
    f32_meta = weight_float32_bytes_per_token(spec)
    return {
        "context_len": context_len,
        "macs_per_token_metadata": macs_per_token(spec, context_len),
        "flops_per_token_metadata": flops_meta,
        "macs_traced": trace.macs,
        "flops_per_token_traced": 2 * trace.macs,
        "weight_bytes_per_token_float32": f32_meta,
        "weight_bytes_per_token_float32_tensors": bytes_per_token.float32_bytes,
        "weight_bytes_per_token_float32_traced": trace.weight_bytes,
        "weight_bytes_per_token_file": bytes_per_token.file_bytes,
        "weight_bytes_per_token_file_traced": trace.weight_file_bytes,
        "flops_per_file_byte": flops_meta / bytes_per_token.file_bytes,
        "flops_per_float32_byte": flops_meta / f32_meta,
        "gflops_per_token": flops_meta / 1e9,
        "weight_mb_per_token_file": bytes_per_token.file_bytes / 1e6,
        "weight_mb_per_token_float32": f32_meta / 1e6,
        "flops_traced_equal_metadata": bool(flops_meta == 2 * trace.macs),
        "costs_agree": bool(
            flops_meta == 2 * trace.macs
            and f32_meta == trace.weight_bytes == bytes_per_token.float32_bytes
            and bytes_per_token.file_bytes == trace.weight_file_bytes
        ),
    }


# --- the whole lesson --------------------------------------------------------------------------------


def run(model: Model, plan: Plan) -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports and its tables, each computed once.

    tables: "prompt_tokens", "top5", "logit_lens", "cost" (lists of rows), "logits" (the next
    token's logits), "trace" (the Trace of the last prompt token's pass).
    """
    spec, tok, ids = model.spec, plan.tokenizer, plan.prompt_ids
    n = len(ids)

    # 1. the prompt as token ids
    prompt_rows = [{"position": i, "id": t, "token": shown(tok.token_text(t))} for i, t in enumerate(ids)]

    # 2-3. the forward pass, its last token traced; the next token
    logits, trace = traced_pass(model, ids)
    top5 = top_tokens(tok, logits)
    nxt = top5[0]

    # 4. the logit lens on the residual after the embedding and after each block
    lens = logit_lens(model, tok, trace.residual, nxt["id"])
    firsts = [r["layer"] for r in lens if r["next_token_rank"] == 1]
    # the earliest point from which on the lens keeps the final token first
    settled = next((i for i in range(len(lens)) if all(r["next_token_rank"] == 1 for r in lens[i:])), None)

    # 5. the cost of that token
    per_token = model.weight_bytes_per_token()
    cost = cost_table(spec, per_token.per_tensor, n)
    metrics: dict = {
        "prompt": plan.prompt,
        "prompt_ids": ids,
        "prompt_tokens": [tok.token_text(i) for i in ids],
        "n_prompt_tokens": n,
        "weights_mode": model.mode,
        "architecture": spec.arch,
        "architecture_recipe": recipe_summary(spec.arch),
        "activation": spec.activation,
        "embed_scale": spec.embed_scale,
        "sliding_window": spec.sliding_window,
        "global_layers": [i for i in range(spec.n_layers) if not spec.is_sliding(i)],
        "n_layers": spec.n_layers,
        "d_model": spec.d_model,
        "n_heads": spec.n_heads,
        "n_kv_heads": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "d_ff": spec.d_ff,
        "vocab": spec.vocab,
        "context_length": spec.context_length,
        "rms_eps": spec.rms_eps,
        "rope_base": spec.rope_base,
        "tied": spec.tied,
        "head_tensor": spec.tensor_name("output"),
        "top5": [{k: r[k] for k in ("id", "token", "logit", "prob")} for r in top5],
        "next_token_id": nxt["id"],
        "next_token": nxt["token"],
        "next_token_logit": nxt["logit"],
        "next_token_prob": nxt["prob"],
        "logits_max": float(logits.max()),
        "logits_min": float(logits.min()),
        "residual_norms": [r["residual_norm"] for r in lens],
        "residual_norm_embedding": lens[0]["residual_norm"],
        "residual_norm_final": lens[-1]["residual_norm"],
        "residual_norm_max": max(r["residual_norm"] for r in lens),
        "residual_norm_max_after": lens[int(np.argmax([r["residual_norm"] for r in lens]))]["after"],
        "final_norm_length": float(np.linalg.norm(trace.final_norm.astype(np.float64))),
        "logit_lens_top_ids": [r["top_id"] for r in lens],
        "logit_lens_top_tokens": [tok.token_text(r["top_id"]) for r in lens],
        "logit_lens_top_probs": [r["top_prob"] for r in lens],
        "logit_lens_next_token_probs": [r["next_token_prob"] for r in lens],
        "logit_lens_next_token_ranks": [r["next_token_rank"] for r in lens],
        # residual[i] is after block i - 1: report blocks, None where only the embedding (or nothing) has it first
        "logit_lens_first_block_top1": (firsts[0] - 1) if firsts and firsts[0] > 0 else None,
        "logit_lens_settled_block": (settled - 1) if settled not in (None, 0) else None,
        **cost_metrics(spec, per_token, trace, n),
    }
    tables = {
        "prompt_tokens": prompt_rows,
        "top5": top5,
        "logit_lens": lens,
        "cost": cost,
        "logits": logits,
        "trace": trace,
    }
    return metrics, tables


def compute(model_gguf, metadata: Mapping, prompt, forward_cfg: Mapping | None = None) -> tuple[dict, dict]:
    """prepare (one-line errors before any heavy work), open the model, run, close it."""
    plan = prepare(metadata, prompt, forward_cfg)
    with open_model(model_gguf, plan) as model:
        return run(model, plan)


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """The lesson's claims file holds no course numbers (see claims/04_the_forward_pass.yaml)."""
    context = claims_mod.run_context(model, sha256, metadata)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- the figures ---------------------------------------------------------------------------------------


def plot_residual_norms(lens: Sequence[Mapping], title: str = ""):
    """The residual stream's length after the embedding (0) and after each block (1..L)."""
    fig, ax = figure()
    x = [r["layer"] for r in lens]
    y = [r["residual_norm"] for r in lens]
    ax.plot(x, y, marker="o", ms=3.5, lw=1.4, color="C0")
    shown_x = x[:: max(1, len(x) // 8)]
    ax.set_xticks(shown_x, [("emb" if i == 0 else str(i - 1)) for i in shown_x])
    ax.set_xlabel("after the embedding (emb), then block 0, 1, ...")
    ax.set_ylabel("length |x| (L2 norm, last position)")
    ax.set_ylim(0, max(y) * 1.08)
    ax.annotate(f"{y[0]:.2f}", (x[0], y[0]), textcoords="offset points", xytext=(-4, 8))
    ax.annotate(f"{y[-1]:.0f}", (x[-1], y[-1]), textcoords="offset points", xytext=(-10, 6))
    ax.grid(lw=0.3, alpha=0.6)
    if title:
        ax.set_title(title)
    return fig


def plot_logit_lens(lens: Sequence[Mapping], next_token: str, title: str = ""):
    """Two panels over the residual stream: the probability (log scale) and the rank (1 = top) of the
    model's final next token when the final norm and the unembedding read the stream early."""
    fig, (ax, ax2) = figure(2, 1, sharex=True, figsize=(6.4, 7.0))
    x = [r["layer"] for r in lens]
    p = np.array([r["next_token_prob"] for r in lens], dtype=np.float64)
    p = np.maximum(p, np.finfo(np.float64).tiny)  # a probability that underflowed to 0 sits at the bottom
    ax.plot(x, p, marker="o", ms=3.5, lw=1.4, color="C1")
    ax.set_yscale("log")
    ax.set_ylabel(f"p({shown(next_token)})")
    ax.grid(lw=0.3, alpha=0.6)
    ranks = np.array([r["next_token_rank"] for r in lens], dtype=np.float64)
    ax2.plot(x, ranks, marker="s", ms=3, lw=1.2, color="C0")
    ax2.set_yscale("log")
    ax2.invert_yaxis()
    ax2.set_ylabel("its rank (1 = top)")
    ax2.grid(lw=0.3, alpha=0.6)
    ticks = x[:: max(1, len(x) // 8)]
    ax2.set_xticks(ticks, [("emb" if i == 0 else str(i - 1)) for i in ticks])
    ax2.set_xlabel("read after the embedding (emb), then block 0, 1, ...")
    if title:
        ax.set_title(title)
    return fig

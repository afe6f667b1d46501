"""Lesson 6, "Attention and the KV cache": one block's attention by hand, what the heads look at,
and what remembering keys and values costs.

What is computed, in the lesson's order, on the real weights of the run's model:

  1. one block's attention by hand for the prompt: x (the block's input; block 0's is the
     embedding, times sqrt(d_model) on Gemma) -> RMSNorm -> Q, K, V (+ biases on qwen2) ->
     (Gemma: RMSNorm of each head's q and k) -> rope on Q and K with the block's own base ->
     scores q.k / sqrt(head_dim) -> causal mask (and the block's sliding window) -> softmax ->
     weighted sum of V -> output projection (-> post_attention_norm on Gemma) -> residual; query
     head h reads K/V head h // (n_heads / n_kv_heads) (grouped-query attention). Every switch is
     the architecture table's (bytesup.model.arch). Each step is checked against the package's
     attention_block (bytesup.model.forward) for that block;
  2. rope: the angle pair i of a head turns through at position p is p * base^(-2i/n_rot); on
     the real queries the measured turn is compared with that (pairs as the table's rope layout
     has them: adjacent on llama GGUFs, halves on NeoX-style ones), and on a llama GGUF the row
     layout (adjacent pairs) with Hugging Face's (halves) gives the same scores;
  3. attention patterns: the weights every head of every block gives to each earlier token,
     from one traced forward pass over the prompt;
  4. the KV cache's size: 2 x blocks x KV heads x head_dim x bytes per element per token of
     context, for this model, the course's specimen and Llama-3-8B, against their weights;
  5. measured: cached decode versus recomputing the whole prefix each step (time per token as
     the context grows, on a resident model), and the cached logits against a full recompute.

Arithmetic is float32 throughout, as in the forward pass. The cache here holds float32 K and V
(this NumPy decoder); llama.cpp keeps them as F16 by default, so its cache is half the size.

The lesson's parts, by concern: by_hand (steps 1 and 3), rotary (2), cache (4 and 5) and figures;
this module holds the SPEC and ``run``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from bytesup.lessons import LessonInputError, resident_budget_bytes
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.attention_kv.by_hand import (
    BLOCK,
    AttnWeights,
    attention_by_hand,
    attention_top,
    causal_mask,
    kv_head,
    package_block,
    shown_heads,
)
from bytesup.lessons.attention_kv.cache import (
    CONTEXTS,
    DECODE_STEPS,
    REPEATS,
    architecture_of,
    cache_check,
    kv_size_table,
    time_decode,
    timing_metrics,
)
from bytesup.lessons.attention_kv.rotary import hf_layout_scores, pair_angles, rope_bases, rope_table, rope_theta, wrap
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model.arch import ARCHITECTURES
from bytesup.model.configs import kv_bytes_per_token
from bytesup.model.forward import Model
from bytesup.model.tokenizer import Tokenizer

SPEC = LessonSpec(
    id="06_attention_and_the_kv_cache",
    title="Attention and the KV cache",
    kind=SERIES,
    position=6,
    source=(
        "Lesson 6 of the LLM Basics series (its text is not among the course files here; the numbers"
        " are recomputed from the model and published configurations)"
    ),
    reads=("model_gguf", "metadata_json"),
    tables=("kv_cache_size.csv", "kv_cache_timing.csv", "rope_angles.csv", "attention_top.csv"),
    key_figures=("attention_patterns.png", "kv_cache_size.png"),
    figures={
        "attention_patterns.png": (
            "Attention weights over the prompt for three heads of the first, a middle and the last block:"
            " row = the token asking, column = the token looked at; above the diagonal is the future, masked"
        ),
        "kv_cache_size.png": (
            "KV cache size (F16) against context length up to each model's limit, beside the size of its"
            " weights (dashed)"
        ),
        "kv_cache_timing.png": (
            "Time per generated token with the KV cache and without it (recomputing the whole prefix),"
            " as the context grows; measured on this machine"
        ),
    },
    headlines=(
        Headline("kv_bytes_per_token", "KV cache per token of context, this model, F16 (as llama.cpp)", "bytes", ",d"),
        Headline("kv_bytes_per_token_f32", "the same in float32, as this NumPy decoder keeps it", "bytes", ",d"),
        Headline("gqa_group_size", "query heads sharing one K/V head", "", "d"),
        Headline("kv_mb_at_context_length", "KV cache at this model's full context, F16", "MB", ".1f"),
        Headline(
            "kv_cache_equals_weights_tokens",
            "context at which the F16 cache is as big as the model file",
            "tokens",
            ",.0f",
        ),
        Headline(
            "specimen_kv_bytes_per_token", "KV cache per token, deepseek-coder-6.7b (32 KV heads), F16", "bytes", ",d"
        ),
        Headline("llama3_8b_kv_bytes_per_token", "KV cache per token, Llama-3-8B (8 KV heads), F16", "bytes", ",d"),
        Headline("kv_cache_max_abs_diff", "max |logit difference|, cached decode against full recompute", "", ".1e"),
        Headline("timing_cached_s_at_max", "time per token with the cache, longest context timed", "s", ".3g"),
        Headline(
            "timing_recompute_s_at_max", "time per token recomputing the prefix, longest context timed", "s", ".3g"
        ),
        Headline("timing_recompute_over_cached_at_max", "recompute over cached, longest context timed", "", ".1f"),
        Headline(
            "attention_first_position_share",
            "heads whose strongest link from the last token is the first token",
            "",
            "%",
        ),
        Headline(
            "hand_vs_block_max_abs_diff", "attention by hand against attention_block, max |difference|", "", ".1e"
        ),
    ),
    config_keys=("prompt", "forward"),
    architectures=tuple(ARCHITECTURES),  # attention_by_hand follows every row of the table
    runs_model=True,
    runtime=60,  # the specimen streams 7 GB per pass: a handful of passes
)


# --- the whole lesson ---------------------------------------------------------------------------


def encode_prompt(metadata: Mapping, prompt: str) -> tuple[list[int], list[str]]:
    """The prompt's token ids and each token's text."""
    tok = Tokenizer.from_metadata(metadata)
    ids = tok.encode(prompt)
    if not ids:
        raise LessonInputError(f"prompt {prompt!r} encodes to no tokens; set config key 'prompt' to some text")
    return ids, [tok.token_text(i) for i in ids]


def run(
    model_gguf: str | os.PathLike,
    metadata: Mapping,
    prompt: str,
    forward: Mapping | None = None,
    *,
    model_name: str = "this model",
    block: int = BLOCK,
    contexts: Sequence[int] = CONTEXTS,
    repeats: int = REPEATS,
    decode_steps: int = DECODE_STEPS,
) -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports, and what its cells show, each computed once.

    tables: "spec", "ids", "tokens", "weights" (block's AttnWeights), "hand" (HandAttention),
    "package" (attention_block's y, K, V), "attention" (per block, heads x N x N), "attention_top",
    "rope", "kv_size", "timing" (rows; [] when the model streams), "mode".
    """
    ids, tokens = encode_prompt(metadata, prompt)
    with Model.from_gguf(model_gguf, resident_budget_bytes=resident_budget_bytes(forward)) as model:
        spec = model.spec
        if not 0 <= block < spec.n_layers:
            raise LessonInputError(f"block {block} does not exist; the model has blocks 0..{spec.n_layers - 1}")
        check, trace, _ = cache_check(model, ids, decode_steps)
        x = np.array(trace.residual[block])  # the block's input: after the embedding for block 0
        w = AttnWeights.of(model, block)
        hand = attention_by_hand(x, w, spec, block)
        y_pkg, k_pkg, v_pkg = package_block(model, x, block)
        timing = time_decode(model, ids, contexts, repeats) if model.mode == "resident" else []
        mode = model.mode
        file_bytes = model.gguf.file_size  # all its parts, for a split model
    attention = [np.asarray(a) for a in trace.attention]

    m: dict = {
        "prompt": prompt,
        "prompt_ids": ids,
        "prompt_tokens": tokens,
        "n_prompt_tokens": len(ids),
        "architecture": spec.arch,
        "block_count": spec.n_layers,
        "embedding_length": spec.d_model,
        "head_count": spec.n_heads,
        "head_count_kv": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "rope_dimension_count": spec.n_rot,
        "rope_freq_base": spec.rope_base,
        "context_length": spec.context_length,
        "weights_mode": mode,
        # grouped-query attention
        "gqa_group_size": spec.group,
        "gqa_kv_head_of_query_head": [kv_head(h, spec) for h in range(spec.n_heads)],
    }
    # 1. by hand against the package
    last = len(ids) - 1
    m.update(
        {
            "hand_block": block,
            "hand_q_shape": list(hand.q.shape),
            "hand_k_shape": list(hand.k.shape),
            "hand_scores_last_head0": [None if not np.isfinite(s) else s for s in hand.scores[0, last]],
            "hand_weights_last_head0": hand.weights[0, last],
            "hand_weights_row_sums_max_abs_err": np.abs(hand.weights.sum(-1) - 1).max(),
            "hand_masked_weight_max": hand.weights[:, causal_mask(len(ids), hand.window)].max(initial=0.0),
            "hand_rope_base": hand.rope_base,
            "hand_window": hand.window,
            "rope_layout": spec.rope_layout,
            "hand_qk_norm": w.q_norm is not None,
            "hand_post_attention_norm": w.post_attn_norm is not None,
            "attention_scale": spec.attn_scale,
            "hand_out_last_first3": hand.out[last, :3],
            "hand_vs_block_max_abs_diff": np.abs(hand.y - y_pkg).max(),
            "hand_k_vs_cache_max_abs_diff": np.abs(hand.k_rot - k_pkg).max(),
            "hand_v_vs_cache_max_abs_diff": np.abs(hand.v - v_pkg).max(),
            "hand_weights_vs_trace_max_abs_diff": np.abs(hand.weights - attention[block]).max(),
            "block_attention_y_last_first3": y_pkg[last, :3],
        }
    )
    # 2. rope on the real queries: the turn of each pair of query head 0 at each position
    theta = rope_theta(spec, block, w.rope_factors)  # with the file's per-pair factors (Llama 3.1), if any
    layout = spec.rope_layout
    turned = wrap(pair_angles(hand.q_rot[:, 0, : spec.n_rot], layout) - pair_angles(hand.q[:, 0, : spec.n_rot], layout))
    expected = wrap(np.outer(np.arange(len(ids)), theta))
    m.update(
        {
            "rope_radians_per_token_first_pair": theta[0],
            "rope_radians_per_token_last_pair": theta[-1],
            "rope_tokens_per_turn_first_pair": 2 * math.pi / theta[0],
            "rope_tokens_per_turn_last_pair": 2 * math.pi / theta[-1],
            "rope_turn_max_abs_err": np.abs(wrap(turned - expected)).max(),
            "rope_norm_change_max_rel": np.abs(
                np.linalg.norm(hand.q_rot, axis=-1) / np.linalg.norm(hand.q, axis=-1) - 1
            ).max(),
        }
    )
    # a llama GGUF permutes Q/K rows for adjacent pairs; a NeoX-style file keeps Hugging Face's rows (nothing to undo)
    m["rope_layouts_scores_max_abs_diff"] = None
    if layout == "adjacent" and w.q_norm is None and w.bq is None:
        hf = hf_layout_scores(hand, w, spec)
        visible = ~causal_mask(len(ids), hand.window)
        m["rope_layouts_scores_max_abs_diff"] = np.abs(hf[:, visible] - hand.scores[:, visible]).max()
    # 3. what the heads look at
    top = attention_top(attention, tokens, spec)
    m["attention_first_position_share"] = float(np.mean([r["top_position"] == 0 for r in top]))
    m["attention_self_share"] = float(np.mean([r["top_position"] == last for r in top]))
    by = {(r["block"], r["head"]): r for r in top}
    m["attention_top_shown"] = [
        {
            "block": b,
            "head": h,
            "position": by[b, h]["top_position"],
            "token": by[b, h]["top_token"],
            "weight": by[b, h]["top_weight"],
        }
        for b, h in shown_heads(spec)
    ]
    # rope's bases: one per kind of layer (Gemma 3's global layers turn with the file's freq_base)
    bases = rope_bases(spec)
    global_layers = [i for i in range(spec.n_layers) if spec.layer_window(i) is None]
    m["rope_bases"] = sorted(bases)
    m["rope_base_sliding"] = spec.layer_rope_base(spec.sliding_layers.index(True)) if any(spec.sliding_layers) else None
    m["rope_base_global"] = spec.layer_rope_base(global_layers[0]) if global_layers and spec.sliding_layers else None
    m["rope_global_layers"] = global_layers if spec.sliding_layers else None
    # 4. the cache's size, layer by layer (a sliding-window layer keeps only its window)
    size = kv_size_table(spec, model_name, file_bytes)
    this, specimen, llama = size
    grew = this["kv_bytes_at_context_if_every_layer_grew_f16"]
    m.update(
        {
            "kv_bytes_per_token": this["kv_bytes_per_token_f16"],
            "kv_bytes_per_token_f32": this["kv_bytes_per_token_f32"],
            "kv_bytes_at_context_length": this["kv_bytes_at_context_f16"],
            "kv_mb_at_context_length": this["kv_bytes_at_context_f16"] / 1e6,
            "kv_sliding_window": this["sliding_window"],
            "kv_global_layers": this["global_layers"],
            "kv_sliding_layers": spec.n_layers - this["global_layers"] if this["sliding_window"] else None,
            "kv_mb_at_context_if_every_layer_grew": grew / 1e6 if grew else None,
            "kv_cache_at_context_share_of_weights": this["cache_at_context_over_weights"],
            "model_file_bytes": file_bytes,
            "kv_cache_equals_weights_tokens": this["cache_equals_weights_tokens"],
            # only when the cache never reaches the file within the model's context (sliding layers stop growing)
            "kv_cache_never_reaches_weights_share": (
                this["cache_at_context_over_weights"] if this["cache_equals_weights_tokens"] is None else None
            ),
            "specimen_kv_bytes_per_token": specimen["kv_bytes_per_token_f16"],
            "specimen_block_count": specimen["blocks"],
            "specimen_head_count_kv": specimen["kv_heads"],
            "specimen_head_dim": specimen["head_dim"],
            "specimen_over_model_kv_bytes_per_token": specimen["kv_bytes_per_token_f16"]
            / this["kv_bytes_per_token_f16"],
            "llama3_8b_kv_heads": llama["kv_heads"],
            "specimen_kv_bytes_at_context_length": specimen["kv_bytes_at_context_f16"],
            "specimen_context_length": specimen["context_length"],
            "specimen_weights_bytes": specimen["weights_bytes"],
            "specimen_cache_equals_weights_tokens": specimen["cache_equals_weights_tokens"],
            "llama3_8b_kv_bytes_per_token": llama["kv_bytes_per_token_f16"],
            "llama3_8b_kv_bytes_at_context_length": llama["kv_bytes_at_context_f16"],
            "llama3_8b_context_length": llama["context_length"],
            "llama3_8b_weights_bytes": llama["weights_bytes"],
            "llama3_8b_cache_equals_weights_tokens": llama["cache_equals_weights_tokens"],
            # without grouped-query attention (as many K/V heads as query heads) the cache would be this much larger
            "kv_bytes_per_token_without_gqa": kv_bytes_per_token(
                replace(architecture_of(spec, model_name), n_kv_heads=spec.n_heads)
            ),
        }
    )
    # 5. measured
    m.update(check)
    m.update(timing_metrics(timing, mode))
    tables = {
        "spec": spec,
        "ids": ids,
        "tokens": tokens,
        "weights": w,
        "hand": hand,
        "package": (y_pkg, k_pkg, v_pkg),
        "attention": attention,
        "attention_top": top,
        "rope": rope_table(spec, factors=w.rope_factors),
        "kv_size": size,
        "timing": timing,
        "mode": mode,
        "trace": trace,
    }
    return m, tables


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """Check the lesson's claims (published configurations) against this run's metrics."""
    context = claims_mod.run_context(model, sha256, metadata)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)

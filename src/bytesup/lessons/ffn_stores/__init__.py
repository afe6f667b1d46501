"""Lesson 3's deep dive, "What the FFN stores" (course the FFN-stores text): the FFN as a bank of key-value memories.

What is computed, in the lesson's order:
  1. the regrouping, on this model's real block-``block`` weights: W_down h is a sum of columns,
     W_down h = sum_i a_i v_i with a_i = act(gate_i . xn) (up_i . xn) and v_i = column i of
     W_down, act the model's activation (SiLU on llama, GELU-tanh on Gemma; the walk follows the
     model's recipe, bytesup.lessons.ffn_walk, so on Gemma x is the embedding row times sqrt(d_model) and
     the sum is what post_ffw_norm then rescales). The slot-by-slot sum is compared with the matvec;
  2. the slots with the largest |a_i| for the lesson's token, and how many slots it takes to
     rebuild the FFN's output;
  3. each top slot's value vector read through the unembedding (output.weight, or the token
     embedding table when the model ties them): which next tokens it promotes and suppresses;
  4. where the parameters are: this model (metadata and tensor table), and Llama-3-8B and GPT-2
     small from their published configurations (bytesup.model.param_counts);
  5. a ROME-style rank-one edit with C = I on the real W_down: k* = this token's h, and
     v* = W k* + |W k*| e_target / |e_target| (the old output plus a push along the target
     token's embedding, as long as that output). The edit maps k* to v* exactly and moves every
     other key k by (k*.k / |k*|^2)(v* - W k*); the keys tested are the h of other tokens. For
     comparison, ROME's full update with C = K K^T estimated from a separate draw of keys.

As in lesson 3, the FFN is fed the token's embedding row as the model's recipe prepares it (times
sqrt(d_model) on Gemma), without block 0's attention half first (a real forward pass runs it).
The weights are the float32 arrays the extract stage dequantized; the walk is float32 like the
model. The edit is done in float64: it is algebra on the weights, and float64 shows how exact it
is. Memory stays below peak_bytes (no FFN x FFN matrix; issue 15).

The lesson's parts, by concern: regroup (steps 1, 2 and the toy bank), vocabulary (3), parameters
(4), edit (5), memory (the blocked float64 helpers and peak_bytes) and figures; this module holds the
SPEC and ``run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bytesup.lessons import claims as claims_mod
from bytesup.lessons.ffn_stores.edit import Rome, rome, rome_table
from bytesup.lessons.ffn_stores.parameters import model_accounting, parameter_table, published_metrics
from bytesup.lessons.ffn_stores.regroup import (
    BLOCK,
    Slots,
    rebuild_curve,
    regroup_metrics,
    slot_metrics,
    slots,
    top_slot_table,
    toy_metrics,
)
from bytesup.lessons.ffn_stores.vocabulary import ffn_output_reading, value_vector_table
from bytesup.lessons.spec import COMPANION, Headline, LessonSpec
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.model.arch import ARCHITECTURES

SPEC = LessonSpec(
    id="03b_what_the_ffn_stores",
    title="What the FFN stores",
    kind=COMPANION,
    position=3.5,
    source=(
        'Lesson 3\'s deep dive, from part 5 of the series "Transformers from the Weights Up": MLPs and what the FFN stores'
    ),
    reads=("metadata_json", "tensors_index", "tensors_csv"),
    tensors=("token_embd.weight", "blk.0.ffn_*", "?blk.0.post_ffw_norm.weight", "?output.weight"),
    tables=("top_slots.csv", "value_vectors.csv", "parameters.csv", "rome_drift.csv"),
    key_tables=("top_slots.csv",),
    key_figures=("slot_coefficients.png", "rome_drift.png"),
    figures={
        "slot_coefficients.png": "Block 0 coefficients aᵢ for the token, the top ones marked, and the error of rebuilding the FFN output from the largest terms",
        "rome_drift.png": "Rank-one edit of block 0's W_down: each key's drift against its overlap with k*",
        "parameter_shares.png": "Parameter shares by part: this model, Llama-3-8B and GPT-2 small",
    },
    headlines=(
        Headline("slots_per_layer", "slots in block 0", fmt=",d"),
        Headline("regroup_rel_diff", "regrouping Σ aᵢvᵢ vs W_down·h, relative difference", fmt=".1e"),
        Headline("top_slot", "top slot for the token", fmt="d"),
        Headline("top_slot_coefficient", "its coefficient", fmt=".3f"),
        Headline("slots_for_90pct_of_output", "slots needed for 90 % of the output", fmt="d"),
        Headline("model_total", "model parameters", fmt=",d"),
        Headline("model_ffn_share", "FFN share of the model", fmt=".1%"),
        Headline("model_block_ffn_share", "FFN share of a block", fmt=".1%"),
        Headline("llama3_8b_total", "Llama-3-8B parameters", fmt=",d"),
        Headline("llama3_8b_ffn_share", "Llama-3-8B FFN share", fmt=".1%"),
        Headline("rome_target_rel_err", "rank-one edit: relative error at k*", fmt=".1e"),
        Headline("rome_relative_drift_median", "median relative drift of other keys, C = I", fmt=".3f"),
        Headline("rome_cov_relative_drift_median", "median relative drift of other keys, ROME's C", fmt=".4f"),
        Headline("rome_target_rank_before", "target token's rank before the edit", fmt=",d"),
        Headline("rome_target_rank_after", "target token's rank after the edit", fmt=",d"),
    ),
    config_keys=("token", "seed"),
    architectures=tuple(ARCHITECTURES),  # the walk follows every row of the table (ffn_walk.recipe)
    mem_mb=2000,  # peak_bytes at the specimen's block (d 4,096, FFN 11,008): 1.75 GB; measured 1.54 GB (run and notebook)
)


def metadata_map(doc: Mapping) -> Mapping:
    """The key -> value metadata, whether given the extract stage's metadata.json or the bare map.

    metadata.json (format bytesup.metadata/1) nests the keys under "metadata", beside the file's
    header facts and the keys' GGUF types.
    """
    inner = doc.get("metadata")
    if isinstance(inner, Mapping) and "general.architecture" not in doc:
        return inner
    return doc


def tensor_names(block: int = BLOCK) -> list[str]:
    """The tensors this lesson reads (output.weight only when the model has one)."""
    return ["token_embd.weight", "?output.weight"] + [
        f"blk.{block}.ffn_{p}.weight" for p in ("norm", "gate", "up", "down")
    ]


@dataclass
class Lesson:
    metrics: dict
    slots: Slots
    rome: Rome
    top_slots: list
    value_vectors: list
    parameters: list
    archs: list
    counted: list  # pc.count(...) of each architecture, this model's with its file bytes added
    rebuild_curve: dict  # m -> relative error of the output rebuilt from the m largest terms
    rome_drift: list  # rome_table(rome): one row per key the edit was tested on


def run(
    metadata: Mapping,
    tensors: Mapping,
    tensor_rows: Sequence[Mapping],
    token: str = " cat",
    target: str = " dog",
    *,
    seed: int = 0,
    n_keys: int = 2000,
    top_k: int = 10,
    n_tokens: int = 8,
    block: int = BLOCK,
    model: str = "this model",
    neighbours: Sequence[str] = (" cats", " kitten", " the", " house"),
) -> Lesson:
    """Everything the lesson computes: metrics, the arrays behind the figures, and its tables.

    Memory: see ``peak_bytes``; nothing here grows with FFN x FFN.
    """
    metadata = metadata_map(metadata)
    s = slots(metadata, tensors, token, block)
    m: dict = {"block": block, "token": token, "token_id": s.walk.token_id, "seed": seed}
    m.update(regroup_metrics(s))
    # Gemma: the slots' sum is W_down h, which post_ffw_norm then rescales dimension by dimension before
    # the residual add; the slot lists rank the terms of that sum, before the rescaling (null on a llama)
    gains = tensors.get(f"blk.{block}.post_ffw_norm.weight") if s.walk.recipe.post_ffn_norm else None
    m["post_ffn_norm_gain_min"] = float(np.min(gains)) if gains is not None else None
    m["post_ffn_norm_gain_max"] = float(np.max(gains)) if gains is not None else None
    curve = rebuild_curve(s)
    m.update(slot_metrics(s, top_k, curve))
    m.update(ffn_output_reading(s, tensors, metadata, n_tokens))
    arch, acc = model_accounting(metadata, tensor_rows, model)
    m.update({f"model_{k}": v for k, v in acc.items()})
    m.update(published_metrics())
    m.update(toy_metrics())
    ro = rome(metadata, tensors, s, target, seed=seed, n_keys=n_keys, neighbours=neighbours)
    m.update(ro.metrics)
    archs = [arch, configs.LLAMA3_8B, configs.GPT2_SMALL]
    counted = [acc, pc.count(configs.LLAMA3_8B), pc.count(configs.GPT2_SMALL)]
    return Lesson(
        metrics=m,
        slots=s,
        rome=ro,
        top_slots=top_slot_table(s, top_k),
        value_vectors=value_vector_table(s, tensors, metadata, top_k, n_tokens),
        parameters=parameter_table(archs, counted),
        archs=archs,
        counted=counted,
        rebuild_curve=curve,
        rome_drift=rome_table(ro),
    )


def compute(
    metadata: Mapping,
    tensors: Mapping,
    tensor_rows: Sequence[Mapping],
    token: str = " cat",
    target: str = " dog",
    **kwargs,
) -> dict:
    """Every number the lesson reports, as a flat dict (numpy values; see lessons.plain)."""
    return run(metadata, tensors, tensor_rows, token, target, **kwargs).metrics


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """Check the lesson's published claims against this run's metrics."""
    context = claims_mod.run_context(model, sha256, None if metadata is None else metadata_map(metadata))
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)

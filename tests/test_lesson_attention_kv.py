"""Lesson 6, attention and the KV cache: attention by hand against an independent float64 attention
(gguf-py's reader and dequantizer, complex-number rope), the KV arithmetic against the published
configurations written out, the cache against a full recompute, and the notebook end to end."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from tiny_rows import ROWS, write_row
from workflow_helpers import run_notebook

from bytesup.lessons import LessonInputError, claims, plain
from bytesup.lessons import attention_kv as lesson
from bytesup.lessons.attention_kv import by_hand, cache, figures, rotary
from bytesup.lessons.spec import parameter
from bytesup.model import configs
from bytesup.model.arch import ARCHITECTURES
from bytesup.model.forward import Model
from bytesup.model.synthetic import write_tiny_llama

NOTEBOOK = Path(__file__).resolve().parents[1] / "workflow" / "notebooks" / "06_attention_and_the_kv_cache.ipynb"
TINY_PROMPT = " the cat sat on the mat"


# --- an independent attention: gguf-py + float64, sharing no code with the package -------------------


def gguf_fields(path):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))

    def field(name, default=None):
        return reader.fields[name].contents() if name in reader.fields else default

    def tensor(name):
        t = next(t for t in reader.tensors if t.name == name)
        return dequantize(t.data, t.tensor_type).astype(np.float64).reshape(tuple(int(d) for d in reversed(t.shape)))

    return field, tensor


def reference_attention(path, ids, block=0):
    """Block 0's attention half in float64: weights (heads, N, N), output projection and y = x + out."""
    field, tensor = gguf_fields(path)
    arch = field("general.architecture")
    n_head, n_kv = field(f"{arch}.attention.head_count"), field(f"{arch}.attention.head_count_kv")
    d = field(f"{arch}.embedding_length")
    hd = d // n_head
    base = float(field(f"{arch}.rope.freq_base", 10000.0))
    eps = float(field(f"{arch}.attention.layer_norm_rms_epsilon"))
    assert block == 0
    x = tensor("token_embd.weight")[ids]
    xn = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * tensor(f"blk.{block}.attn_norm.weight")
    n = len(ids)
    q = (xn @ tensor(f"blk.{block}.attn_q.weight").T).reshape(n, n_head, hd)
    k = (xn @ tensor(f"blk.{block}.attn_k.weight").T).reshape(n, n_kv, hd)
    v = (xn @ tensor(f"blk.{block}.attn_v.weight").T).reshape(n, n_kv, hd)

    def turn(a):  # GGUF llama rows: adjacent pairs as complex numbers, pair i turned by pos * base^(-2i/hd)
        z = a[..., 0::2] + 1j * a[..., 1::2]
        z = z * np.exp(1j * np.outer(np.arange(n), base ** (-np.arange(0, hd, 2) / hd)))[:, None, :]
        out = np.empty_like(a)
        out[..., 0::2], out[..., 1::2] = z.real, z.imag
        return out

    q, k = turn(q), turn(k)
    weights = np.zeros((n_head, n, n))
    heads = np.zeros((n, n_head, hd))
    for h in range(n_head):
        g = h * n_kv // n_head
        for i in range(n):
            s = np.array([q[i, h] @ k[j, g] / math.sqrt(hd) for j in range(i + 1)])
            e = np.exp(s - s.max())
            weights[h, i, : i + 1] = e / e.sum()
            heads[i, h] = weights[h, i, : i + 1] @ v[: i + 1, g]
    out = heads.reshape(n, d) @ tensor(f"blk.{block}.attn_output.weight").T
    return {
        "weights": weights,
        "out": out,
        "y": x + out,
        "n_head": n_head,
        "n_kv": n_kv,
        "hd": hd,
        "n_layers": field(f"{arch}.block_count"),
    }


# --- tiny synthetic models ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf", n_head=4, n_head_kv=2)
    with Model.from_gguf(path) as model:
        metadata = dict(model.gguf.metadata)
    m, tables = lesson.run(
        path,
        metadata,
        TINY_PROMPT,
        {"resident_budget_mb": 100},
        model_name="tiny",
        contexts=(4, 8, 1000),
        repeats=1,
        decode_steps=3,
    )
    return path, metadata, m, tables


def test_attention_by_hand_matches_an_independent_float64_attention(tiny):
    path, _, m, tables = tiny
    ids = m["prompt_ids"]
    ref = reference_attention(path, ids)
    last = len(ids) - 1
    np.testing.assert_allclose(m["hand_weights_last_head0"], ref["weights"][0, last], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(tables["hand"].weights, ref["weights"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m["hand_out_last_first3"], ref["out"][last, :3], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m["block_attention_y_last_first3"], ref["y"][last, :3], rtol=1e-4, atol=1e-6)
    # the traced forward pass's block-0 pattern is the same
    np.testing.assert_allclose(tables["attention"][0], ref["weights"], rtol=1e-4, atol=1e-6)
    # by hand against the package: the same float32 arithmetic
    assert m["hand_vs_block_max_abs_diff"] < 1e-5
    assert m["hand_k_vs_cache_max_abs_diff"] < 1e-6 and m["hand_v_vs_cache_max_abs_diff"] < 1e-6
    assert m["hand_weights_vs_trace_max_abs_diff"] < 1e-6
    assert m["hand_masked_weight_max"] == 0.0 and m["hand_weights_row_sums_max_abs_err"] < 1e-6


def test_grouped_query_heads_and_the_top_table(tiny):
    path, _, m, tables = tiny
    assert m["gqa_group_size"] == 2 and m["gqa_kv_head_of_query_head"] == [0, 0, 1, 1]
    top = tables["attention_top"]
    assert len(top) == m["block_count"] * m["head_count"] == 2 * 4
    ref = reference_attention(path, m["prompt_ids"])
    for r in top[:4]:  # block 0, from the independent weights
        row = ref["weights"][r["head"], -1]
        assert r["top_position"] == int(np.argmax(row)) and r["top_weight"] == pytest.approx(row.max(), rel=1e-4)
        assert r["top_token"] == m["prompt_tokens"][r["top_position"]] and r["kv_head"] == r["head"] // 2
    share = np.mean([r["top_position"] == 0 for r in top])
    assert m["attention_first_position_share"] == pytest.approx(share)
    assert [(r["block"], r["head"]) for r in m["attention_top_shown"]] == [(b, h) for b in (0, 1) for h in (0, 2, 3)]


def test_rope_turns_pairs_and_both_row_layouts_agree(tiny):
    _, _, m, tables = tiny
    hd = m["head_dim"]
    assert m["rope_radians_per_token_first_pair"] == 1.0
    assert m["rope_radians_per_token_last_pair"] == pytest.approx(m["rope_freq_base"] ** (-(hd - 2) / hd))
    assert m["rope_turn_max_abs_err"] < 1e-5 and m["rope_norm_change_max_rel"] < 1e-5
    assert m["rope_layouts_scores_max_abs_diff"] < 1e-4
    rows = tables["rope"]
    assert [r["pair"] for r in rows] == [0, 1, 2, hd // 2 - 1]
    assert rows[1]["pos_3"] == pytest.approx(3 * m["rope_freq_base"] ** (-2 / hd))


def test_gguf_row_permutation_is_undone_and_halves_match_neighbours():
    """convert_hf_to_gguf.py's permute, written out: rope on halves of the HF rows == rope on pairs of the GGUF rows."""
    from bytesup.model.forward import rope, rope_angles

    rng = np.random.default_rng(0)
    n_head, hd, d, n = 3, 8, 5, 6
    w_hf = rng.standard_normal((n_head * hd, d)).astype(np.float32)
    # convert_hf_to_gguf.LlamaModel.permute
    w_gguf = w_hf.reshape(n_head, 2, hd // 2, d).swapaxes(1, 2).reshape(w_hf.shape)
    np.testing.assert_array_equal(rotary.gguf_rows_to_hf(w_gguf, n_head), w_hf)
    x = rng.standard_normal((n, d)).astype(np.float32)
    cos, sin = rope_angles(np.arange(n), hd, 10000.0)
    pairs = rope((x @ w_gguf.T).reshape(n, n_head, hd), cos, sin)
    halves = rotary.rope_halves((x @ w_hf.T).reshape(n, n_head, hd), cos, sin)
    # the same numbers, in the other order: GGUF dims (2i, 2i+1) are HF dims (i, i + hd/2)
    np.testing.assert_allclose(pairs[..., 0::2], halves[..., : hd // 2], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pairs[..., 1::2], halves[..., hd // 2 :], rtol=1e-6, atol=1e-6)


def test_the_cache_gives_the_recomputed_logits_and_timing_runs_resident(tiny):
    path, _, m, tables = tiny
    assert m["kv_cache_max_abs_diff"] < 1e-4 and m["kv_cache_max_abs_diff_all_steps"] < 1e-4
    assert m["kv_cache_same_next_token"] and len(m["kv_cache_generated_ids"]) == 3
    assert m["kv_cache_positions"] == m["n_prompt_tokens"] + 3
    assert m["kv_cache_float32_bytes_used"] == m["kv_cache_positions"] * m["kv_bytes_per_token_f32"]
    # contexts beyond the model's 128 are dropped
    assert m["timing_contexts"] == [4, 8] and m["timing_done"] and m["weights_mode"] == "resident"
    assert all(r["cached_median_s"] > 0 and r["recompute_median_s"] > 0 for r in tables["timing"])
    assert m["timing_max_context"] == 8 and m["timing_cached_s_at_max"] == tables["timing"][-1]["cached_median_s"]
    # the no-cache decoder's last logits are the full forward pass's
    with Model.from_gguf(path) as model:
        ids = [37, 56, 34, 37]
        np.testing.assert_allclose(
            cache.recompute_last_logits(model, ids), model.forward(ids)[-1], rtol=1e-5, atol=1e-5
        )


def test_a_streaming_model_is_not_timed(tiny):
    path, metadata, _, _ = tiny
    m, tables = lesson.run(
        path, metadata, TINY_PROMPT, {"resident_budget_mb": 0}, contexts=(4,), repeats=1, decode_steps=1
    )
    assert m["weights_mode"] == "streaming" and tables["timing"] == []
    assert m["timing_done"] is False and "resident" in m["timing_skipped"] and m["timing_cached_s_at_max"] is None
    assert m["hand_vs_block_max_abs_diff"] < 1e-5  # block weights were copied before the scratch was reused


def test_kv_sizes_from_the_published_configurations(tiny):
    _, _, m, tables = tiny
    assert m["specimen_kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2 == 524_288
    assert m["llama3_8b_kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131_072
    assert m["specimen_kv_bytes_at_context_length"] == 524_288 * 16_384
    assert m["llama3_8b_kv_bytes_at_context_length"] == 131_072 * 8_192
    # tiny: 2 blocks, 2 K/V heads of 32 / 4 = 8 numbers
    assert m["kv_bytes_per_token"] == 2 * 2 * 2 * 8 * 2 and m["kv_bytes_per_token_f32"] == 2 * m["kv_bytes_per_token"]
    assert m["kv_bytes_per_token_without_gqa"] == 2 * 2 * 4 * 8 * 2
    # weights: the specimen as Q8_0 (34 bytes per 32 weights, norms F32), Llama-3-8B as BF16
    matrices = 2 * 32256 * 4096 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    norms = (2 * 32 + 1) * 4096
    assert m["specimen_weights_bytes"] == matrices // 32 * 34 + 4 * norms == 7_162_576_896
    assert m["llama3_8b_weights_bytes"] == 2 * 8_030_261_248
    assert m["model_file_bytes"] == tables["kv_size"][0]["weights_bytes"]
    at_context = m["kv_bytes_per_token"] * m["context_length"]
    assert m["kv_bytes_at_context_length"] == at_context and m["kv_sliding_window"] is None
    first = -(-m["model_file_bytes"] // m["kv_bytes_per_token"])  # the first context whose cache holds the file
    assert m["kv_cache_equals_weights_tokens"] == (first if first <= m["context_length"] else None)
    assert m["specimen_cache_equals_weights_tokens"] == -(-m["specimen_weights_bytes"] // 524_288) == 13_662


def test_a_sliding_window_stops_only_the_sliding_layers():
    """Gemma 3 270M: 3 global layers keep the whole 32,768-token context, 15 sliding ones 512 positions,
    1,024 bytes a layer per token (1 K/V head of 256, F16): 108.5 MB, not 18 x 1,024 x 32,768 = 604 MB.
    A window that capped every layer (the old kv_cache_bytes(window=...)) would give 18 x 1,024 x 512."""
    layers = configs.kv_layers(18, 1, 256, 256, windows=[None if (i + 1) % 6 == 0 else 512 for i in range(18)])
    assert configs.kv_cache_bytes(layers, 32_768) == 3 * 1024 * 32_768 + 15 * 1024 * 512 == 108_527_616
    assert configs.kv_cache_bytes(layers, 100) == 18 * 1024 * 100  # below the window every layer grows
    np.testing.assert_array_equal(
        configs.kv_cache_bytes(layers, [512, 1024]), [18 * 1024 * 512, 3 * 1024 * 1024 + 15 * 1024 * 512]
    )
    assert configs.kv_cache_bytes(configs.kv_layers(2, 1, 8, 8), 50) == 2 * 32 * 50  # no window: all of it
    assert cache.cache_equals_weights_tokens(layers, 253_113_024, 32_768) is None  # never reaches the file
    assert cache.cache_equals_weights_tokens(configs.kv_layers(1, 1, 1, 1), 100, 1000) == 25  # 4 bytes a token


def test_a_tiny_gemma3s_cache_and_its_figure_count_the_windows_layer_by_layer(tmp_path):
    """The KV numbers and the KV figure of lesson 6 on a tiny Gemma 3 (6 layers, layer 5 global, window 4,
    context 128, one K/V head of 16: 64 bytes a layer per token), against the per-layer sum."""
    from bytesup.model.synthetic import write_tiny_gemma3

    path = write_tiny_gemma3(tmp_path / "g.gguf")
    with Model.from_gguf(path) as model:
        metadata = dict(model.gguf.metadata)
    m, tables = lesson.run(
        path, metadata, TINY_PROMPT, {"resident_budget_mb": 100}, contexts=(4,), repeats=1, decode_steps=1
    )
    per_layer = 2 * 1 * 16 * 2
    assert m["kv_bytes_per_token"] == 6 * per_layer and m["kv_sliding_window"] == 4 and m["kv_global_layers"] == 1
    assert m["kv_bytes_at_context_length"] == per_layer * 128 + 5 * per_layer * 4 == 9472
    assert m["kv_mb_at_context_if_every_layer_grew"] == pytest.approx(6 * per_layer * 128 / 1e6)
    assert m["rope_base_sliding"] == 10000.0 and m["rope_base_global"] == 1e6 and m["rope_global_layers"] == [5]
    assert {r["base"] for r in tables["rope"]} == {10000.0, 1e6}
    mine = tables["kv_size"][0]
    assert (mine["sliding_window"], mine["global_layers"], mine["kv_bytes_at_context_f16"]) == (4, 1, 9472)
    fig = figures.plot_kv_size(tables["kv_size"])
    line = fig.axes[0].lines[0]  # this model's curve: the cache at each context drawn
    t, drawn = line.get_xdata(), line.get_ydata()
    want = [per_layer * (n + 5 * min(n, 4)) for n in t]
    np.testing.assert_array_equal(drawn, want)
    slope = np.diff(drawn) / np.diff(t)  # per token: all 6 layers below the window, the global one past it
    assert slope.max() == 6 * per_layer and slope[-1] == per_layer
    assert t[-1] == 128 and drawn[-1] == m["kv_bytes_at_context_length"]
    plt.close(fig)


def test_claims_reproduce_the_published_facts_and_wait_for_the_specimen(tiny):
    _, metadata, m, _ = tiny
    results = lesson.evaluate_claims(m, model="tiny", metadata=metadata)
    assert {r.claim.metric for r in results} <= set(m)
    for r in results:
        assert r.status == ("specimen differs" if r.claim.requires else "reproduced"), r.claim.claim_id
    # on the specimen the same file must reproduce: 32 K/V heads, group 1, 524,288 bytes
    spec_m = {**m, "head_count_kv": 32, "gqa_group_size": 1, "kv_bytes_per_token": 524_288}
    checked = claims.check_all(claims.load_claims(lesson.SPEC.id), spec_m, {"specimen"})
    assert {r.status for r in checked} == {"reproduced"}


def test_bad_inputs_say_what_is_wrong(tiny):
    path, metadata, _, _ = tiny
    with pytest.raises(LessonInputError, match="prompt"):
        lesson.run(path, metadata, "", {"resident_budget_mb": 100})
    with pytest.raises(LessonInputError, match="forward.resident_budget_mb"):
        lesson.run(path, metadata, TINY_PROMPT, {"resident_budget_mb": "1"})
    with pytest.raises(LessonInputError, match="block 7"):
        lesson.run(path, metadata, TINY_PROMPT, {"resident_budget_mb": 100}, block=7)


# --- Gemma 3: the recipe from the architecture table (issue 13) ---------------------------------------


@pytest.mark.parametrize("block", [0, 5])
def test_gemma3_attention_by_hand_follows_its_recipe(tmp_path, block):
    """A tiny Gemma 3 (q/k norms, head size 16 != 32 / 4, NeoX rope, window 4 on blocks 0-4 with base 10,000,
    block 5 global with the file's base 1e6, post-attention norm, embedding x sqrt(d)): by hand against
    attention_block, rope measured on halves, the window hiding old keys, and the cache against a recompute."""
    from bytesup.model.synthetic import write_tiny_gemma3

    path = write_tiny_gemma3(tmp_path / "g.gguf")
    with Model.from_gguf(path) as model:
        metadata = dict(model.gguf.metadata)
    m, tables = lesson.run(
        path,
        metadata,
        TINY_PROMPT + " ran",
        {"resident_budget_mb": 100},
        model_name="tiny-gemma",
        block=block,
        contexts=(4,),
        repeats=1,
        decode_steps=3,
    )
    n = m["n_prompt_tokens"]
    assert m["architecture"] == "gemma3" and m["head_dim"] == 16 and m["rope_layout"] == "neox" and n > 4
    assert m["hand_qk_norm"] and m["hand_post_attention_norm"] and m["attention_scale"] == pytest.approx(0.25)
    assert (m["hand_window"], m["hand_rope_base"]) == ((4, 10000.0) if block == 0 else (None, 1e6))
    assert m["hand_vs_block_max_abs_diff"] < 1e-5 and m["hand_k_vs_cache_max_abs_diff"] < 1e-5
    assert m["hand_v_vs_cache_max_abs_diff"] < 1e-5 and m["hand_weights_vs_trace_max_abs_diff"] < 1e-6
    assert m["rope_turn_max_abs_err"] < 1e-4 and m["rope_layouts_scores_max_abs_diff"] is None
    assert m["rope_radians_per_token_last_pair"] == pytest.approx(m["hand_rope_base"] ** (-14 / 16))
    hand = tables["hand"]
    old = hand.weights[:, -1, : n - 4]  # keys 4 or more positions back from the last query
    assert (old.max() == 0.0) == (block == 0) and m["hand_masked_weight_max"] == 0.0
    # the hand's x is the traced stream: the embedding times sqrt(32) for block 0
    if block == 0:
        E = Model.from_gguf(path).weights.embed_rows(np.asarray(m["prompt_ids"]))
        np.testing.assert_allclose(hand.x, np.asarray(E, np.float32) * np.float32(32**0.5), rtol=1e-6)
    assert m["kv_cache_max_abs_diff"] < 1e-3 and m["kv_cache_same_next_token"]
    assert lesson.SPEC.follows("gemma3") and lesson.SPEC.architectures == tuple(ARCHITECTURES)


def test_qwen2_biases_and_neox_rope_by_hand(tmp_path):
    """qwen2's row: Q/K/V biases and NeoX rope, by hand against attention_block."""
    path = write_tiny_llama(tmp_path / "q.gguf", arch="qwen2", qkv_bias=True)
    with Model.from_gguf(path) as model:
        metadata = dict(model.gguf.metadata)
    m, tables = lesson.run(
        path,
        metadata,
        TINY_PROMPT,
        {"resident_budget_mb": 100},
        model_name="tiny-qwen2",
        contexts=(4,),
        repeats=1,
        decode_steps=2,
    )
    assert m["architecture"] == "qwen2" and m["rope_layout"] == "neox" and tables["weights"].bq is not None
    assert m["hand_vs_block_max_abs_diff"] < 1e-5 and m["hand_k_vs_cache_max_abs_diff"] < 1e-5
    assert m["rope_turn_max_abs_err"] < 1e-4 and m["rope_layouts_scores_max_abs_diff"] is None
    # without the biases the keys would differ: the bias is really added
    w = tables["weights"]
    bare = by_hand.attention_by_hand(
        tables["hand"].x,
        by_hand.AttnWeights(*(getattr(w, f) for f in ("attn_norm", "wq", "wk", "wv", "wo"))),
        tables["spec"],
    )
    assert np.abs(bare.k - tables["hand"].k).max() > 1e-3


@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_row_by_hand(tmp_path, name):
    """qwen3's q/k norms, phi3's stacks (partial rotation, short factors, attn_factor), gemma2's caps and
    window, llama 3.1's rope_freqs (tests/tiny_rows.py): by hand against attention_block and the trace,
    the rope turn against the frequencies the file says, the cache against a recompute."""
    path = write_row(name, tmp_path)
    with Model.from_gguf(path) as model:
        metadata, spec = dict(model.gguf.metadata), model.spec
    m, tables = lesson.run(path, metadata, TINY_PROMPT, {"resident_budget_mb": 100}, model_name=name, contexts=(4,),
                           repeats=1, decode_steps=2)  # fmt: skip
    assert m["architecture"] == spec.arch and m["n_prompt_tokens"] > 4
    assert m["hand_vs_block_max_abs_diff"] < 1e-5 and m["hand_k_vs_cache_max_abs_diff"] < 1e-5
    assert m["hand_weights_vs_trace_max_abs_diff"] < 1e-6 and m["rope_turn_max_abs_err"] < 1e-4
    assert m["kv_cache_max_abs_diff"] < 1e-3 and m["kv_cache_same_next_token"]
    # the last pair's radians per token, from the file: base^(-(n_rot - 2) / n_rot) / its factor
    factors = ROWS[name].get("rope_tensors", {})
    factor = (factors.get("rope_freqs.weight") or factors.get("rope_factors_short.weight") or [1.0])[-1]
    want = 10000.0 ** (-(spec.n_rot - 2) / spec.n_rot) / factor
    assert m["rope_radians_per_token_last_pair"] == pytest.approx(want, rel=1e-12)
    assert tables["rope"][-1]["radians_per_token"] == pytest.approx(want, rel=1e-12)


@pytest.mark.slow  # papermill, about 15 s each on the loaded machine
@pytest.mark.parametrize("name", ["gemma2", "llama3-rope-freqs", "phi3-long-context"])
def test_notebook_on_every_other_row(tmp_path, name):
    """The notebook's steps by hand (rope with the file's factors, gemma2's capped scores) pass their
    own checks against the lesson's numbers and the package's block."""
    from workflow_helpers import run_lesson_notebook

    got, _ = run_lesson_notebook(lesson.SPEC, write_row(name, tmp_path), tmp_path, model=name, prompt=TINY_PROMPT)
    assert got["architecture"] == ROWS[name]["arch"] and got["hand_vs_block_max_abs_diff"] < 1e-5


@pytest.mark.slow  # loads Gemma 3 270M (about 1 GB of float32 weights) and runs it
def test_gemma3_270m_block0_attention_by_hand(gemma_gguf):
    """The real Gemma block 0: a sliding layer (window from the file, rope base 10,000), head size 256, q/k norms."""
    with Model.from_gguf(gemma_gguf) as model:
        metadata = dict(model.gguf.metadata)
    m, tables = lesson.run(
        gemma_gguf,
        metadata,
        "The capital of France is",
        {"resident_budget_mb": 4000},
        model_name="gemma3-270m",
        contexts=(8,),
        repeats=1,
        decode_steps=2,
    )
    assert (m["head_dim"], m["head_count"], m["head_count_kv"], m["rope_layout"]) == (256, 4, 1, "neox")
    assert m["hand_window"] == 512 and m["hand_rope_base"] == 10000.0 and m["hand_qk_norm"]
    assert m["hand_vs_block_max_abs_diff"] < 1e-3 * float(np.abs(tables["package"][0]).max())
    assert m["hand_weights_vs_trace_max_abs_diff"] < 1e-5 and m["rope_turn_max_abs_err"] < 1e-3
    assert m["kv_cache_same_next_token"] and m["kv_bytes_per_token"] == 2 * 18 * 1 * 256 * 2


def test_figures_draw_the_runs_numbers(tiny):
    """The figures' drawn data, not only their PNG bytes: each heatmap is its head's attention weights
    (the future masked), the KV curves are the cache's per-layer sum at each context with each model's
    weights as a dashed line, and the timing lines are the measured medians."""
    tables = tiny[3]
    spec, attention = tables["spec"], tables["attention"]
    fig = figures.plot_attention(attention, tables["tokens"], spec, "t")
    blocks = sorted({b for b, _ in by_hand.shown_heads(spec)})
    heads = sorted({h for _, h in by_hand.shown_heads(spec)})
    n = len(tables["tokens"])
    for ax, (b, h) in zip(fig.axes, zip(blocks, heads)):
        drawn = ax.images[0].get_array()
        np.testing.assert_allclose(drawn.data[~drawn.mask], np.asarray(attention[b][h])[~by_hand.causal_mask(n)])
        assert drawn.mask.sum() == n * (n - 1) // 2  # the future above the diagonal, left blank
    plt.close(fig)
    size = tables["kv_size"]
    fig = figures.plot_kv_size(size, "t")
    ax = fig.axes[0]
    curves = [line for line in ax.lines if line.get_linestyle() == "-"]
    weights = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(curves) == len(weights) == len(size)
    for line, row in zip(curves, size):
        np.testing.assert_array_equal(line.get_ydata(), configs.kv_cache_bytes(row["kv_layers"], line.get_xdata()))
        assert line.get_xdata()[-1] == row["context_length"]
    assert [line.get_ydata()[0] for line in weights] == [row["weights_bytes"] for row in size]
    plt.close(fig)
    timing = tables["timing"]
    fig = figures.plot_timing(timing, "t")
    medians = [list(c.lines[0].get_ydata()) for c in fig.axes[0].containers]
    assert medians == [[r["recompute_median_s"] for r in timing], [r["cached_median_s"] for r in timing]]
    plt.close(fig)
    fig = figures.plot_timing([], "t")
    assert "not timed" in fig.axes[0].texts[0].get_text()
    plt.close(fig)


# --- the notebook -------------------------------------------------------------------------------------


def test_notebook_does_each_step_in_its_cells():
    code = "\n".join(
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"
    )
    for step in (
        "xn = rms_norm(x, w.attn_norm, spec.rms_eps)",
        "Q = xn @ w.wq.T",
        "K = xn @ w.wk.T",
        "V = xn @ w.wv.T",
        "q_rot, k_rot = rope(q, cos, sin, spec.rope_layout), rope(k, cos, sin, spec.rope_layout)",
        "scores[future] = -np.inf",
        "q, k = rms_norm(q, w.q_norm, spec.rms_eps), rms_norm(k, w.k_norm, spec.rms_eps)",
        "out = rms_norm(out, w.post_attn_norm, spec.rms_eps)",
        "weights = softmax(scores)",
        "softmax(s) @ v[:, kvh]",
        "@ w.wo.T",
        "y = x + out",
        "per_layer = 2 * spec.n_kv_heads * spec.head_dim * f16",
        "per_token = spec.n_layers * per_layer",
        "T if spec.layer_window(i) is None else min(T, spec.layer_window(i))",
    ):
        assert step in code, step
    assert "matplotlib.use" not in code


@pytest.mark.slow
def test_notebook_on_the_default_model(default_gguf, tmp_path):
    """papermill from workflow/notebooks/ of a project whose extract stage ran on SmolLM2-135M; the metrics
    against gguf-py + float64 and the published arithmetic."""
    pytest.importorskip("papermill")
    from bytesup.gguf.extract import extract

    (tmp_path / "Snakefile").write_text("# project root marker\n")
    extract(default_gguf, tmp_path / "results" / "smollm2-135m" / "gguf", [])
    nb_dir = tmp_path / "workflow" / "notebooks"
    nb_dir.mkdir(parents=True)
    out = tmp_path / "out"
    outputs = {parameter(name): out / name for name in lesson.SPEC.files}
    run_notebook(NOTEBOOK, tmp_path / "executed.ipynb", cwd=nb_dir, model_gguf=default_gguf, **outputs)
    assert sorted(p.name for p in out.iterdir()) == sorted(lesson.SPEC.files)
    m = json.loads((out / "metrics.json").read_text())

    assert m["prompt"] == "The capital of France is" and m["weights_mode"] == "resident"
    ref = reference_attention(default_gguf, m["prompt_ids"])
    assert (ref["n_layers"], ref["n_head"], ref["n_kv"], ref["hd"]) == (30, 9, 3, 64)
    assert m["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2 == 23_040 and m["kv_bytes_per_token_f32"] == 46_080
    assert m["gqa_group_size"] == 3 and m["gqa_kv_head_of_query_head"] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert m["kv_bytes_at_context_length"] == 23_040 * 8192
    assert m["specimen_kv_bytes_per_token"] == 524_288 and m["llama3_8b_kv_bytes_per_token"] == 131_072
    last = len(m["prompt_ids"]) - 1
    np.testing.assert_allclose(m["hand_weights_last_head0"], ref["weights"][0, last], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(m["block_attention_y_last_first3"], ref["y"][last, :3], rtol=1e-3, atol=1e-5)
    assert m["hand_vs_block_max_abs_diff"] < 1e-5 and m["kv_cache_max_abs_diff"] < 1e-3
    assert m["kv_cache_same_next_token"] is True
    with (out / "attention_top.csv").open() as f:
        top = list(csv.DictReader(f))
    assert len(top) == 30 * 9
    for r in top[:9]:  # block 0 from the independent weights
        row = ref["weights"][int(r["head"]), last]
        assert int(r["top_position"]) == int(np.argmax(row))
        assert float(r["top_weight"]) == pytest.approx(row.max(), rel=1e-3)
    shown = {(r["block"], r["head"]): r for r in m["attention_top_shown"]}
    assert set(shown) == {(b, h) for b in (0, 15, 29) for h in (0, 4, 8)}
    assert shown[0, 0]["token"] == m["prompt_tokens"][int(np.argmax(ref["weights"][0, last]))]
    assert m["timing_contexts"] == [8, 32, 64, 128] and len(m["timing_recompute_median_s"]) == 4
    with (out / "claims.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(claims.COLUMNS)
    assert {r["status"] for r in rows} == {"reproduced", "specimen differs"}
    with (out / "kv_cache_size.csv").open() as f:
        assert [r["model"] for r in csv.DictReader(f)] == ["smollm2-135m", "deepseek-coder-6.7b", "Llama-3-8B"]
    for png in lesson.SPEC.figures:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plain(m) == m  # written as plain JSON numbers

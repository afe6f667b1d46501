"""The architecture table (bytesup.model.arch): what each row makes of a file's metadata."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bytesup.gguf.file import GGUFFile
from bytesup.model.arch import (
    ARCHITECTURES,
    ArchMetadataError,
    UnsupportedArchitectureError,
    expected_tensors,
    recipe_summary,
    spec_from_metadata,
)
from bytesup.model.configs import DEEPSEEK_CODER_6_7B, llama_tensor_shapes
from bytesup.model.forward import ACTIVATIONS, activation, gelu_tanh, rope


def gemma_meta(**extra):
    """The Gemma 3 270M file's model keys (its metadata, tokenizer left out)."""
    meta = {
        "general.architecture": "gemma3", "gemma3.context_length": 32768, "gemma3.embedding_length": 640,
        "gemma3.block_count": 18, "gemma3.feed_forward_length": 2048, "gemma3.attention.head_count": 4,
        "gemma3.attention.layer_norm_rms_epsilon": 1e-6, "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 256, "gemma3.rope.freq_base": 1e6, "gemma3.attention.sliding_window": 512,
        "gemma3.attention.head_count_kv": 1, "gemma3.vocab_size": 262144,
    }  # fmt: skip
    meta.update(extra)
    return meta


def test_gemma3_row_reads_head_size_window_and_rope_bases_from_metadata():
    spec = spec_from_metadata(gemma_meta())
    assert (spec.head_dim, spec.q_dim, spec.kv_dim, spec.n_rot) == (256, 1024, 256, 256)  # not 640 / 4
    assert spec.attn_scale == 1 / 16
    assert spec.embed_scale == pytest.approx(math.sqrt(640))
    assert (spec.activation, spec.rope_layout, spec.tied) == ("gelu_tanh", "neox", True)
    assert [i for i in range(18) if not spec.is_sliding(i)] == [5, 11, 17]  # every 6th layer is global
    assert (spec.layer_window(0), spec.layer_window(5)) == (512, None)
    assert (spec.layer_rope_base(0), spec.layer_rope_base(5)) == (10000.0, 1e6)
    assert spec.has("q_norm") and spec.has("post_ffn_norm") and not spec.has("bq")
    # the file may say which layers slide, and the local rope base
    pattern = [True, False] * 9
    spec = spec_from_metadata(gemma_meta(**{"gemma3.attention.sliding_window_pattern": pattern,
                                            "gemma3.rope.freq_base_swa": 5000.0}))  # fmt: skip
    assert spec.sliding_layers == tuple(pattern) and spec.layer_rope_base(0) == 5000.0
    spec = spec_from_metadata(gemma_meta(**{"gemma3.attention.sliding_window_pattern": 3}))
    assert [i for i in range(18) if not spec.is_sliding(i)] == [2, 5, 8, 11, 14, 17]


def test_gemma3_bad_metadata_is_one_line_naming_the_key():
    meta = gemma_meta()
    del meta["gemma3.attention.sliding_window"]  # llama.cpp: no window key, no sliding layers
    spec = spec_from_metadata(meta)
    assert spec.sliding_layers == () and spec.layer_rope_base(0) == 1e6 and spec.layer_window(0) is None
    with pytest.raises(ArchMetadataError, match=r"'gemma3\.attention\.sliding_window' is 0; it must be positive"):
        spec_from_metadata(gemma_meta(**{"gemma3.attention.sliding_window": 0}))
    with pytest.raises(ArchMetadataError, match=r"sliding_window_pattern' must hold one bool per block \(18\)"):
        spec_from_metadata(gemma_meta(**{"gemma3.attention.sliding_window_pattern": [True, False]}))
    with pytest.raises(ArchMetadataError, match=r"value_length = 128 differs from the head size 256"):
        spec_from_metadata(gemma_meta(**{"gemma3.attention.value_length": 128}))


def test_llama_row_has_no_extras():
    meta = {k.replace("gemma3", "llama"): v for k, v in gemma_meta().items() if "sliding" not in k}
    meta["general.architecture"] = "llama"
    spec = spec_from_metadata(meta)
    assert (spec.activation, spec.rope_layout, spec.embed_scale, spec.tied) == ("silu", "adjacent", 1.0, False)
    assert spec.sliding_layers == () and spec.layer_window(5) is None and spec.layer_rope_base(0) == 1e6
    assert spec.roles == ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")
    with pytest.raises(KeyError, match="llama blocks have no 'q_norm' tensor"):
        spec.tensor_name("q_norm", 0)


def test_qwen2_row_has_qkv_biases():
    meta = {k.replace("gemma3", "qwen2"): v for k, v in gemma_meta().items() if "sliding" not in k}
    meta["general.architecture"] = "qwen2"
    spec = spec_from_metadata(meta)
    assert ARCHITECTURES["qwen2"].biases == ("wq", "wk", "wv")
    assert (spec.tensor_name("bq", 3), spec.role_shape("bk")) == ("blk.3.attn_q.bias", (256,))
    assert spec.rope_layout == "neox" and not spec.has("q_norm")


def test_expected_tensors_of_llama_equal_the_published_config_layout():
    a = DEEPSEEK_CODER_6_7B
    meta = {"general.architecture": "llama", "llama.embedding_length": a.d_model, "llama.block_count": a.n_layers,
            "llama.feed_forward_length": a.d_ff, "llama.attention.head_count": a.n_heads,
            "llama.attention.head_count_kv": a.n_kv_heads, "llama.context_length": a.context_length,
            "llama.attention.layer_norm_rms_epsilon": 1e-6, "llama.vocab_size": a.vocab}  # fmt: skip
    assert expected_tensors(meta) == llama_tensor_shapes(a)


def test_expected_tensors_of_gemma3_per_block():
    shapes = dict(expected_tensors(gemma_meta()))
    assert len(shapes) == 2 + 18 * 13  # token_embd, output_norm, 13 per block; no output.weight (tied)
    assert shapes["blk.0.attn_q.weight"] == (1024, 640) and shapes["blk.0.attn_output.weight"] == (640, 1024)
    assert shapes["blk.17.attn_k_norm.weight"] == (256,) and shapes["blk.2.post_ffw_norm.weight"] == (640,)
    assert "output.weight" not in shapes and shapes["token_embd.weight"] == (262144, 640)


def test_recipe_summary_says_each_rows_steps():
    assert recipe_summary("llama").startswith("llama: RMSNorm before attention and FFN; rope on adjacent pairs")
    assert "SwiGLU FFN (SiLU gate)" in recipe_summary("llama")
    gemma = recipe_summary("gemma3")
    for words in ("embedding x sqrt(d_model)", "per-head RMSNorm of Q and K", "NeoX halves", "GELU-tanh",
                  "every 6th layer global", "tied output head"):  # fmt: skip
        assert words in gemma
    assert "biases on Q, K, V" in recipe_summary("qwen2")
    with pytest.raises(UnsupportedArchitectureError, match="^mamba: architecture not in the table"):
        recipe_summary("mamba")
    assert "\n" not in gemma


def test_activations_by_name():
    z = np.array([-3.0, -1.0, 0.0, 0.5, 2.0], np.float32)
    assert set(ACTIVATIONS) == {"silu", "gelu_tanh"} == {a.activation for a in ARCHITECTURES.values()}
    np.testing.assert_allclose(activation("silu")(z), z / (1 + np.exp(-z)), rtol=1e-6)
    # GELU-tanh against torch's gelu(approximate="tanh") values at these points
    expected = [-0.00363743, -0.15880799, 0.0, 0.34571400, 1.95459771]
    np.testing.assert_allclose(gelu_tanh(z), expected, rtol=1e-6, atol=1e-6)
    assert gelu_tanh(z).dtype == np.float32
    with pytest.raises(ValueError, match="activation 'relu2' is not known"):
        activation("relu2")


def test_neox_rope_pairs_i_with_i_plus_half():
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 8)
    cos, sin = np.zeros((1, 4), np.float32), np.ones((1, 4), np.float32)  # a quarter turn
    # (x_i, x_{i+4}) -> (-x_{i+4}, x_i)
    np.testing.assert_array_equal(rope(x, cos, sin, "neox")[0, 0], [-4, -5, -6, -7, 0, 1, 2, 3])
    np.testing.assert_array_equal(rope(x, cos, sin, "adjacent")[0, 0], [-1, 0, -3, 2, -5, 4, -7, 6])
    with pytest.raises(ValueError, match="rope layout 'gptj' is not known"):
        rope(x, cos, sin, "gptj")


def test_gemma_file_holds_exactly_the_tensors_the_table_expects(gemma_gguf):
    with GGUFFile(gemma_gguf) as f:  # metadata and tensor table only: quick
        predicted = expected_tensors(f.metadata)
        assert sorted(predicted) == sorted((n, f.tensor(n).shape) for n in f.tensor_names)

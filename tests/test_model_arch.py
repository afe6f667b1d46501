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


def meta_of(arch: str, **extra):
    """gemma_meta()'s sizes under another architecture's keys (no window, no Gemma keys)."""
    meta = {k.replace("gemma3", arch): v for k, v in gemma_meta().items() if "sliding" not in k}
    meta["general.architecture"] = arch
    meta.update(extra)
    return meta


def test_qwen3_row_has_qk_norms_and_no_biases():
    spec = spec_from_metadata(meta_of("qwen3"))
    assert spec.has("q_norm") and spec.has("k_norm") and not spec.has("bq") and spec.rope_layout == "neox"
    assert (spec.head_dim, spec.tensor_name("k_norm", 2), spec.role_shape("q_norm")) == (
        256, "blk.2.attn_k_norm.weight", (256,))  # fmt: skip
    assert (spec.attn_softcap, spec.final_softcap, spec.sliding_layers) == (0.0, 0.0, ())


def test_phi3_row_stacks_qkv_and_gate_up_and_takes_its_head_size_from_the_widths():
    # Phi-4-mini's shape: d 3072, 24 heads of 128, rope on 96 of them
    meta = meta_of("phi3", **{"phi3.embedding_length": 3072, "phi3.attention.head_count": 24,
                              "phi3.attention.head_count_kv": 8, "phi3.rope.dimension_count": 96})  # fmt: skip
    del meta["phi3.attention.key_length"], meta["phi3.attention.value_length"]
    spec = spec_from_metadata(meta)
    assert (spec.head_dim, spec.n_rot, spec.q_dim, spec.kv_dim) == (128, 96, 3072, 1024)  # not 96 from the rope key
    assert spec.roles == ("attn_norm", "wqkv", "wo", "ffn_norm", "w_gate_up", "w_down")
    assert spec.has("wq") and spec.has("w_gate") and spec.file_roles("wq", "wk", "wv", "w_down") == ("wqkv", "w_down")
    assert spec.stacked_rows("wk") == ("wqkv", slice(3072, 4096)) and spec.stacked_rows("w_up") == (
        "w_gate_up", slice(2048, 4096))  # fmt: skip
    assert spec.stacked_rows("attn_norm") == ("attn_norm", slice(None))
    shapes = dict(spec.tensor_shapes())
    assert shapes["blk.0.attn_qkv.weight"] == (3072 + 2 * 1024, 3072) and shapes["blk.0.ffn_up.weight"] == (4096, 3072)
    assert "blk.0.ffn_gate.weight" not in shapes and "blk.0.attn_q.weight" not in shapes
    with pytest.raises(KeyError, match=r"phi3 files hold 'w_gate' as rows of 'blk\.3\.ffn_up\.weight'"):
        spec.tensor_name("w_gate", 3)
    # three tensors in the file: three roles again; the gate still shares ffn_up
    names = [n.replace("attn_qkv", "attn_q") for n, _ in spec.tensor_shapes()]
    names += [n.replace("attn_q", t) for n in names if ".attn_q." in n for t in ("attn_k", "attn_v")]
    three = spec_from_metadata(meta, names, check_tensors=False)
    assert not three.fused_qkv and three.roles[1:4] == ("wq", "wk", "wv") and three.fused_gate_up


def test_gemma2_row_caps_windows_and_query_scale():
    meta = meta_of("gemma2", **{"gemma2.block_count": 26, "gemma2.embedding_length": 2304,
                                "gemma2.attention.head_count": 8})  # fmt: skip  # Gemma 2 2B
    spec = spec_from_metadata(meta)
    assert (spec.attn_softcap, spec.final_softcap, spec.sliding_window) == (50.0, 30.0, 4096)  # llama.cpp's defaults
    assert [i for i in range(26) if not spec.is_sliding(i)] == list(range(1, 26, 2))  # odd layers are global
    assert spec.layer_rope(0) == spec.layer_rope(1) == (1e6, 1.0) and spec.attn_scale == 1 / 16
    spec = spec_from_metadata({**meta, "gemma2.attn_logit_softcapping": 20.0, "gemma2.final_logit_softcapping": 5.0,
                               "gemma2.attention.sliding_window": 8})  # fmt: skip
    assert (spec.attn_softcap, spec.final_softcap, spec.sliding_window) == (20.0, 5.0, 8)
    # the 27B: 46 blocks, d 4608, 32 heads of 128; llama.cpp scales its queries by 1/sqrt(4608 / 32)
    big = {**meta, "gemma2.block_count": 46, "gemma2.embedding_length": 4608, "gemma2.attention.head_count": 32,
           "gemma2.attention.key_length": 128, "gemma2.attention.value_length": 128}  # fmt: skip
    assert spec_from_metadata(big).attn_scale == 1 / 12
    # Gemma 3 27B the same way (62 blocks, d 5376, 32 heads of 128: 1/sqrt(168)); the 270M by its head size
    g27 = gemma_meta(**{"gemma3.block_count": 62, "gemma3.embedding_length": 5376, "gemma3.attention.head_count": 32,
                        "gemma3.attention.key_length": 128, "gemma3.attention.value_length": 128})  # fmt: skip
    assert spec_from_metadata(g27).attn_scale == pytest.approx(1 / math.sqrt(168))
    assert spec_from_metadata(gemma_meta()).query_pre_attn_scalar == 0


def test_rope_scaling_as_llama_cpp_reads_it():
    llama = meta_of("llama")
    assert spec_from_metadata(llama).rope_freq_scale == 1.0
    linear = {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}
    assert spec_from_metadata({**llama, **linear}).rope_freq_scale == 0.25
    # deepseek-coder's files from older converters: the factor under rope.scale_linear, no type (linear)
    assert spec_from_metadata({**llama, "llama.rope.scale_linear": 4.0}).rope_freq_scale == 0.25
    assert spec_from_metadata({**llama, **linear, "llama.rope.scaling.type": "none"}).rope_freq_scale == 1.0
    with pytest.raises(UnsupportedArchitectureError, match=r"^llama: rope scaling 'yarn' \(llama\.rope\.scaling\.type\)"
                       r" is not followed by the forward pass \(it follows none, linear\)$"):  # fmt: skip
        spec_from_metadata({**llama, "llama.rope.scaling.type": "yarn"})
    with pytest.raises(ArchMetadataError, match=r"'llama\.rope\.scaling\.factor' is -2\.0; it must be positive"):
        spec_from_metadata({**llama, "llama.rope.scaling.factor": -2.0})
    # Gemma 3 4B and up: linear scaling on the global layers only, the sliding ones unscaled
    spec = spec_from_metadata(gemma_meta(**{"gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8.0}))
    assert (spec.layer_rope(0), spec.layer_rope(5)) == ((10000.0, 1.0), (1e6, 0.125))
    assert spec_from_metadata(gemma_meta(**{"gemma3.final_logit_softcapping": 30.0})).final_softcap == 30.0


def test_a_llama_file_with_a_window_slides_every_layer():
    spec = spec_from_metadata(meta_of("llama", **{"llama.attention.sliding_window": 4096}))
    assert spec.sliding_window == 4096 and spec.sliding_layers == (True,) * 18
    assert spec.layer_rope(0) == (1e6, 1.0)  # no local rope base: the file's
    assert spec_from_metadata(meta_of("llama")).sliding_layers == ()


def test_every_row_has_a_recipe_line():
    for arch in ARCHITECTURES:
        line = recipe_summary(arch)
        assert line.startswith(f"{arch}: ") and "\n" not in line
    assert "Q K V stored as one matrix (attn_qkv)" in recipe_summary("phi3")
    assert "gate and up stored as one matrix (ffn_up)" in recipe_summary("phi3")
    gemma2 = recipe_summary("gemma2")
    assert "attention scores soft-capped" in gemma2 and "logits soft-capped (cap 30" in gemma2
    assert "every 2th layer global" not in gemma2 and "every other layer global" in gemma2
    assert "rope frequencies divided by rope_freqs.weight when the file has it" in recipe_summary("llama")


def test_a_tensor_outside_the_row_is_named_before_any_missing_one():
    """A Mixtral says llama but holds a router and experts instead of ffn_gate/up/down: the first
    tensor the row does not use is named (not the 'missing ffn_gate' that follows from it)."""
    meta = meta_of("llama")
    names = [n for n, _ in spec_from_metadata(meta).tensor_shapes() if ".ffn_gate." not in n and ".ffn_up." not in n]
    moe = [f"blk.{i}.{t}.weight" for i in range(18) for t in ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps")]
    with pytest.raises(ArchMetadataError, match=r"^m\.gguf: tensor 'blk\.0\.ffn_gate_inp\.weight' is not part of the"
                       r" llama recipe \(bytesup\.model\.arch\): the forward pass would ignore it, so it refuses"):  # fmt: skip
        spec_from_metadata(meta, names + moe, path="m.gguf")
    long = "blk.0." + "x" * 300 + ".weight"  # a hostile name is cut, its length given
    with pytest.raises(ArchMetadataError, match=r"'blk\.0\.x+'\.\.\. \(313 characters\) is not part"):
        spec_from_metadata(meta, names + [long])
    assert spec_from_metadata(meta, names + moe, check_tensors=False).arch == "llama"


@pytest.mark.parametrize(
    "arch, key, value",
    [("llama", "llama.rope.freq_base", 0.0), ("phi3", "phi3.rope.scaling.attn_factor", 0.0),
     ("gemma2", "gemma2.attention.sliding_window", 0), ("gemma2", "gemma2.rope.freq_base_swa", float("nan")),
     ("gemma2", "gemma2.final_logit_softcapping", -1.0)],
)  # fmt: skip
def test_rope_window_and_cap_values_that_would_break_the_pass_are_refused(arch, key, value):
    with pytest.raises(ArchMetadataError, match=rf"metadata key '{key}' is (0|0\.0|nan|-1\.0); it must be positive"):
        spec_from_metadata(meta_of(arch, **{key: value}))
    assert spec_from_metadata(meta_of("gemma2", **{"gemma2.final_logit_softcapping": 0.0})).final_softcap == 0.0

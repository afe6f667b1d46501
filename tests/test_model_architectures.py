"""Every row of the architecture table against transformers loading the same tiny synthetic GGUF.

Each case writes a tiny file of one architecture (bytesup.model.synthetic.write_tiny: random
weights, the row's own tensors) and runs it through the NumPy forward pass and through
transformers (torch, CPU, float32), which dequantizes the GGUF itself with gguf-py and computes
the block its own way. What transformers' GGUF loader does not read from a file it is told as a
config value, the same value the file holds: the head size of Qwen3 (its loader drops
key_length), Phi-3's partial rotation and long-context rope factors, Gemma 2's soft caps and
query scale, llama 3's rope scaling (written into the file as rope_freqs.weight, as
convert_hf_to_gguf.py writes it), a Mistral's window.

The files are tests/tiny_rows.py's, and a few more. Measured: every logit of every position
within 1.2e-6 to 3.2e-6 of transformers' (5.5e-6 on gemma3, whose largest logit is 15.5; the
others' are 3.3 to 4.0), and the greedy tokens identical. The tolerance, 1e-4, is what issue 20
asks; each fact a case checks moves the logits by far more than that when it is left out
(Phi-3's attn_factor alone: 0.73; the last tests here show others). Gemma 3's query scale is told
too (transformers' default query_pre_attn_scalar is 256, the tiny file's heads are 16).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from reference_llama import reference_pass
from tiny_rows import LLAMA3, PHI3_ATTN_FACTOR, PHI3_LONG, PHI3_ORIG, PHI3_SHORT, ROWS

from bytesup.errors import BytesupError
from bytesup.model.arch import ArchMetadataError
from bytesup.model.forward import ForwardInputError, Model, layer_rope_angles
from bytesup.model.generate import generate
from bytesup.model.synthetic import write_tiny

IDS = [1, 5, 9, 12, 20, 33, 41, 7, 3, 60, 11, 25]  # 12 positions: past the tiny files' windows of 4
N_GREEDY = 8
LOGIT_ATOL = 1e-4

# case -> (write_tiny arguments, transformers config values the GGUF loader cannot read)
CASES = {
    "qwen2": ({"arch": "qwen2"}, {}),  # its Q K V biases as the writer makes 1-D tensors: about 1
    "gemma3": (  # write_tiny_gemma3's file: 6 blocks, block 5 global, heads of 16, window 4
        {"arch": "gemma3", "n_layers": 6, "n_head_kv": 1, "head_dim": 16, "rope_base": 1e6,
         "extra_metadata": {"gemma3.attention.sliding_window": 4}},
        {"query_pre_attn_scalar": 16, "attn_implementation": "eager"},
    ),
    "qwen3": (ROWS["qwen3"], {"head_dim": 16}),
    "phi3": (ROWS["phi3"], {}),
    "phi3-long-context": (  # Phi-4-mini's partial rotation and Phi-3.5's long-context rope
        ROWS["phi3-long-context"],
        {"rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": PHI3_SHORT,
                             "long_factor": PHI3_LONG, "original_max_position_embeddings": PHI3_ORIG,
                             "partial_rotary_factor": 12 / 16},
         "original_max_position_embeddings": PHI3_ORIG},
    ),
    "gemma2": (
        ROWS["gemma2"],
        {"query_pre_attn_scalar": 64, "attn_logit_softcapping": 1.5, "final_logit_softcapping": 4.0,
         "attn_implementation": "eager"},
    ),
    "llama3-rope-freqs": (ROWS["llama3-rope-freqs"],
                          {"rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, **LLAMA3}}),
    "llama-linear-rope": (  # deepseek-coder's rope: positions divided by 4
        {"arch": "llama", "extra_metadata": {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}},
        {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}},
    ),
    "mistral-window": (  # a llama file with a window: its weights as transformers' Mistral, window 4
        {"arch": "llama", "extra_metadata": {"llama.attention.sliding_window": 4}},
        {"mistral_sliding_window": 4},
    ),
}  # fmt: skip


def transformers_model(path, mistral_sliding_window=None, **config):
    """transformers' causal LM for a GGUF, float32 on the CPU, offline; `config` overrides. With
    mistral_sliding_window, the llama it loads becomes its MistralForCausalLM of that window, the
    same weights (its GGUF loader cannot make a Mistral from this gguf-py: no 'mistral' model type)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(2)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, **config
    )
    if mistral_sliding_window:
        c = model.config
        mistral = transformers.MistralForCausalLM(transformers.MistralConfig(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
            num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads, max_position_embeddings=c.max_position_embeddings,
            rms_norm_eps=c.rms_norm_eps, rope_parameters=c.rope_parameters, tie_word_embeddings=False,
            sliding_window=mistral_sliding_window, attn_implementation="eager"))  # fmt: skip
        mistral.load_state_dict(model.state_dict())
        model = mistral.to(torch.float32)
    return torch, model.eval()


def greedy(model: Model, ids: list[int], n: int) -> list[int]:
    """n tokens by argmax through the KV cache (bytesup.model.generate's loop)."""
    cache = model.new_cache()
    return generate(lambda new: model.forward(new, cache)[-1], ids, max_new_tokens=n).ids


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    """(name, spec, our logits, transformers' logits, our greedy ids, transformers' greedy ids)."""
    write, config = CASES[request.param]
    path = write_tiny(tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf", **write)
    with Model.from_gguf(path) as model:
        ours, our_ids, spec = model.forward(IDS), greedy(model, IDS, N_GREEDY), model.spec
    torch, hf = transformers_model(path, **config)
    with torch.no_grad():
        theirs = hf(torch.tensor([IDS])).logits[0].numpy()
        out = hf.generate(torch.tensor([IDS]), max_new_tokens=N_GREEDY, do_sample=False, num_beams=1,
                          attention_mask=torch.ones(1, len(IDS), dtype=torch.long))  # fmt: skip
    return request.param, spec, ours, theirs, our_ids, out[0, len(IDS) :].tolist()


def test_logits_match_transformers_over_the_whole_vocabulary(case):
    name, spec, ours, theirs, _, _ = case
    assert ours.shape == theirs.shape == (len(IDS), spec.vocab)
    diff = float(np.abs(ours - theirs).max())
    assert diff <= LOGIT_ATOL, f"{name}: max |logit difference| {diff:.2e} over {ours.size} logits"


def test_greedy_tokens_match_transformers(case):
    name, _, _, _, ours, theirs = case
    assert ours == theirs, f"{name}: ours {ours}, transformers {theirs}"


def test_each_case_exercises_its_rows_facts(case):
    """The cases read what they are meant to: a test of the windows has windows, and so on."""
    name, spec, *_ = case
    facts = {
        "qwen2": spec.has("bq") and spec.rope_layout == "neox",
        "gemma3": spec.sliding_layers == (True,) * 5 + (False,) and spec.layer_rope(0) == (10000.0, 1.0),
        "qwen3": spec.has("q_norm") and not spec.has("bq") and spec.head_dim == 16,
        "phi3": spec.fused_qkv and spec.fused_gate_up and spec.roles[1] == "wqkv",
        "phi3-long-context": (spec.rope_factors, spec.context_length) == ("rope_factors_short.weight", PHI3_ORIG)
        and spec.rope_attn_factor == pytest.approx(PHI3_ATTN_FACTOR)
        and (spec.n_rot, spec.head_dim) == (12, 16),
        "gemma2": (spec.attn_softcap, spec.final_softcap, spec.sliding_layers) == (1.5, 4.0, (True, False) * 2),
        "llama3-rope-freqs": spec.rope_factors == "rope_freqs.weight",
        "llama-linear-rope": spec.rope_freq_scale == 0.25,
        "mistral-window": spec.sliding_window == 4 and all(spec.sliding_layers),
    }
    assert facts[name]


# -- what each fact changes, and what is refused --------------------------------------------------


def logits_of(path, ids=IDS) -> np.ndarray:
    with Model.from_gguf(path) as model:
        return model.forward(ids)


def test_phi3_with_q_k_v_as_three_tensors_equals_the_stacked_file(tmp_path):
    """llama.cpp reads Phi-3's Q K V from one attn_qkv or from three tensors; both are split into
    the same rows (one type for all four, so both files hold the same numbers)."""
    q8 = {f"blk.*.attn_{t}.weight": "Q8_0" for t in ("q", "k", "v", "qkv")}
    fused = write_tiny(tmp_path / "fused.gguf", "phi3", types=q8)
    three = write_tiny(tmp_path / "three.gguf", "phi3", types=q8, fused_qkv=False)
    with Model.from_gguf(fused) as a, Model.from_gguf(three) as b:
        assert (a.spec.fused_qkv, b.spec.fused_qkv) == (True, False)
        assert a.spec.tensor_name("wqkv", 1) == "blk.1.attn_qkv.weight" and b.spec.tensor_name("wk", 1) == (
            "blk.1.attn_k.weight"
        )
        np.testing.assert_array_equal(a.weights.block(1).wk, b.weights.block(1).wk)  # rows q_dim .. q_dim + kv_dim
        np.testing.assert_array_equal(a.weights.block(1).w_up, b.weights.block(1).w_up)  # ffn_up's second half
        np.testing.assert_array_equal(a.forward(IDS), b.forward(IDS))
    with pytest.raises(KeyError, match=r"phi3 files hold 'wk' as rows of 'blk\.0\.attn_qkv\.weight'"):
        Model.from_gguf(fused).spec.tensor_name("wk", 0)


def test_phi3_long_context_file_stops_at_the_original_context(tmp_path):
    write, _ = CASES["phi3-long-context"]
    with Model.from_gguf(write_tiny(tmp_path / "long.gguf", **write)) as model:
        with pytest.raises(ForwardInputError, match=r"exceed phi3\.rope\.scaling\.original_context_length = 64"):
            model.forward(list(range(65)))
        # without its attn_factor the scores change: the file's factor is applied
        assert model.spec.rope_attn_factor > 1.1


def test_rope_freqs_of_8_on_the_low_frequency_half_change_the_logits_as_they_should(tmp_path):
    """Issue 20: a tiny llama with and without rope_freqs.weight (factors 1, 1, 8, 8 on its four
    pairs). Position 0 turns by nothing either way; every later one differs, and both files match
    the independent float64 llama (tests/reference_llama.py), which divides each pair's frequency."""
    factors = [1.0, 1.0, 8.0, 8.0]
    plain = write_tiny(tmp_path / "plain.gguf", "llama")
    scaled = write_tiny(tmp_path / "scaled.gguf", "llama", rope_tensors={"rope_freqs.weight": factors})
    a, b = logits_of(plain), logits_of(scaled)
    np.testing.assert_array_equal(a[0], b[0])
    assert (np.abs(a[1:] - b[1:]).max(axis=-1) > 1e-3).all()
    for path, got in ((plain, a), (scaled, b)):
        want = reference_pass(path, IDS)["logits"]
        assert np.abs(got - want).max() / np.abs(want).max() < 1.5e-6  # test_model_forward's REFERENCE_REL
    # the angles themselves: pairs 0 and 1 as without, pairs 2 and 3 turn 8 times slower
    with Model.from_gguf(scaled) as model:
        spec, f = model.spec, model.weights.rope_factors
        np.testing.assert_array_equal(f, factors)
        base_cos, _ = layer_rope_angles(spec, 0, np.arange(5))
        cos, _ = layer_rope_angles(spec, 0, np.arange(5), f)
        np.testing.assert_array_equal(cos[:, :2], base_cos[:, :2])
        want = np.cos(np.outer(np.arange(5), 10000.0 ** (-np.arange(2, 4) / 4) / 8))
        np.testing.assert_allclose(cos[:, 2:], want, rtol=0, atol=1e-7)


def test_gemma2_caps_bite(tmp_path):
    """The same tiny Gemma 2 with its caps of 1.5 and 4, and with caps too large to matter: far apart."""
    write, _ = CASES["gemma2"]
    loose = {**write["extra_metadata"], "gemma2.attn_logit_softcapping": 1e6, "gemma2.final_logit_softcapping": 1e6}
    capped = logits_of(write_tiny(tmp_path / "capped.gguf", **write))
    uncapped = logits_of(write_tiny(tmp_path / "loose.gguf", **{**write, "extra_metadata": loose}))
    assert np.abs(capped).max() < 4.0 < np.abs(uncapped).max()
    assert np.abs(capped - uncapped).max() > 1.0


def test_a_tensor_the_row_does_not_use_is_refused_naming_it(tmp_path):
    """A llama file with Phi-3's long rope factors: the pass would ignore them, so it refuses."""
    path = write_tiny(tmp_path / "odd.gguf", "llama", rope_tensors={"rope_factors_long.weight": [1.0] * 4})
    with pytest.raises(ArchMetadataError) as err:
        Model.from_gguf(path)
    assert str(err.value) == (
        f"{path}: tensor 'rope_factors_long.weight' is not part of the llama recipe (bytesup.model.arch):"
        " the forward pass would ignore it, so it refuses the file"
    )


@pytest.mark.parametrize("bad", [0.0, -2.0, float("nan")])
def test_rope_factors_that_are_not_positive_numbers_are_refused(tmp_path, bad):
    path = write_tiny(tmp_path / "bad.gguf", "llama", rope_tensors={"rope_freqs.weight": [1.0, 1.0, bad, 8.0]})
    if math.isnan(bad):  # a NaN is any tensor's NaN: the one finite check names it (bytesup.gguf.numbers)
        with pytest.raises(BytesupError, match=r"tensor 'rope_freqs\.weight': holds 1 NaN weights .* element 2\)"):
            Model.from_gguf(path)
        return
    with pytest.raises(ArchMetadataError, match=r"tensor 'rope_freqs\.weight' holds .* at pair 2; rope frequency"):
        Model.from_gguf(path)


def test_a_llama_file_with_a_window_attends_within_it(tmp_path):
    """Mistral 7B v0.1's llama.attention.sliding_window: the first 4 positions see every key either
    way; past them, the windowed file differs from the same file without the key."""
    windowed = logits_of(write_tiny(tmp_path / "w.gguf", "llama", extra_metadata={"llama.attention.sliding_window": 4}))
    plain = logits_of(write_tiny(tmp_path / "p.gguf", "llama"))
    np.testing.assert_array_equal(windowed[:4], plain[:4])
    assert (np.abs(windowed[4:] - plain[4:]).max(axis=-1) > 1e-4).all()

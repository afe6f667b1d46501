"""bytesup.model.forward_torch against the NumPy forward pass (bytesup.model.forward).

The torch twin runs here on device 'cpu' (CI has no GPU): its logits must equal the NumPy
model's within 1e-4 on tiny synthetic llamas (GQA, multi-head, multi-query; tied and untied;
partial rope; prefill then decode through the KV cache, across a cache growth) and on the real
default model for the prompt "The capital of France is". Skipped when torch is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: the torch forward pass needs it")

from bytesup.model import forward as fnp
from bytesup.model import forward_torch as ft
from bytesup.model import layers
from bytesup.model.forward import ForwardInputError, Model
from bytesup.model.forward_torch import TorchModel, TorchUnavailable
from bytesup.model.synthetic import write_tiny_gemma3, write_tiny_llama
from bytesup.model.tokenizer import Tokenizer

ATOL = 1e-4  # float32 against float32: different summation orders, nothing else


def both(path, **kw):
    """The NumPy model (resident) and its torch twin on 'cpu'; the caller closes the first."""
    model = Model.from_gguf(path, mode="resident", **kw)
    return model, TorchModel.from_model(model, "cpu")


def run_side_by_side(model, twin, prompt, decode_ids):
    """Prefill `prompt`, then decode each id with the cache; max |difference| per pass."""
    c_np, c_t = model.new_cache(), twin.new_cache()
    diffs = []
    for ids in [prompt] + [[i] for i in decode_ids]:
        a = model.forward(ids, c_np)
        b = twin.forward(ids, c_t)
        assert isinstance(b, torch.Tensor) and b.dtype == torch.float32 and tuple(b.shape) == a.shape
        np.testing.assert_allclose(b.numpy(), a, rtol=0, atol=ATOL)
        diffs.append(float(np.abs(b.numpy() - a).max()))
    assert c_t.n == c_np.n == len(prompt) + len(decode_ids)
    return diffs


# -- tiny synthetic llamas --------------------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("n_head_kv", [2, 1, 4], ids=["gqa", "mqa", "mha"])
def test_tiny_prefill_then_decode_equals_numpy(tmp_path, tied, n_head_kv):
    path = write_tiny_llama(tmp_path / "tiny.gguf", n_head=4, n_head_kv=n_head_kv, tied=tied, n_layers=3)
    model, twin = both(path)
    with model:
        assert twin.spec.tied == tied and twin.spec.group == 4 // n_head_kv
        diffs = run_side_by_side(model, twin, [1, 5, 7, 9, 3, 11], [4, 8, 2])
    assert max(diffs) < ATOL


def test_tiny_partial_rope_equals_numpy(tmp_path):
    """rope.dimension_count < head size: only the first n_rot dimensions of each head turn."""
    path = write_tiny_llama(
        tmp_path / "rot.gguf", extra_metadata={"llama.attention.key_length": 8, "llama.rope.dimension_count": 4}
    )
    model, twin = both(path)
    with model:
        assert (twin.spec.head_dim, twin.spec.n_rot) == (8, 4)
        run_side_by_side(model, twin, [3, 4, 5], [6, 7])


def test_cache_growth_and_positions_past_64(tmp_path):
    """A 70-token prefill then decode: the cache grows past its first 64 positions (copying what
    it holds) and rope angles at positions 70+ still agree."""
    path = write_tiny_llama(tmp_path / "long.gguf", n_ctx=128)
    model, twin = both(path)
    with model:
        vocab = model.spec.vocab
        prompt = [int(i) for i in np.random.default_rng(0).integers(3, vocab, 60)]
        c_np, c_t = model.new_cache(), twin.new_cache()
        np.testing.assert_allclose(twin.forward_numpy(prompt, c_t), model.forward(prompt, c_np), rtol=0, atol=ATOL)
        assert c_t._capacity == 64
        for i in range(10):
            np.testing.assert_allclose(
                twin.forward_numpy([i + 3], c_t), model.forward([i + 3], c_np), rtol=0, atol=ATOL
            )
        assert c_t._capacity == 128 and c_t.n == 70
        for layer in range(model.spec.n_layers):  # the cached keys and values themselves
            np.testing.assert_allclose(c_t.k[layer][:, :70].numpy(), c_np.k[layer][:, :70], rtol=0, atol=1e-5)
            np.testing.assert_allclose(c_t.v[layer][:, :70].numpy(), c_np.v[layer][:, :70], rtol=0, atol=1e-5)
        assert c_t.nbytes == c_np.nbytes


def test_without_a_cache_is_positions_from_zero(tiny_gguf):
    model, twin = both(tiny_gguf)
    with model:
        ids = [2, 9, 4, 7]
        np.testing.assert_allclose(twin.forward_numpy(ids), model.forward(ids), rtol=0, atol=ATOL)
        # token ids given as a torch tensor are taken too
        np.testing.assert_allclose(twin.forward_numpy(torch.tensor(ids)), model.forward(ids), rtol=0, atol=ATOL)


def test_weights_are_the_numpy_models_arrays_moved_once(tiny_gguf, tiny_gguf_tied):
    """No second dequantizer: on 'cpu' every tensor IS the resident provider's array (same memory)."""
    for path in (tiny_gguf, tiny_gguf_tied):
        model, twin = both(path)
        with model:
            res, tw = model.weights, twin.weights
            assert np.shares_memory(tw.token_embd.numpy(), res.token_embd)
            assert (tw.head is tw.token_embd) == model.spec.tied
            for b_np, b_t in zip(res.blocks, tw.blocks):
                for name in ("attn_norm", "wqkv", "wo", "ffn_norm", "w_gate_up", "w_down"):
                    assert np.shares_memory(getattr(b_t, name).numpy(), getattr(b_np, name))
            from bytesup.model.weights import float32_bytes

            assert tw.nbytes == float32_bytes(model.spec)  # what residency costs, a tied head once
            assert twin.weight_float32_bytes_per_token() == model.weight_bytes_per_token().float32_bytes


def test_from_gguf_equals_from_model(tiny_gguf):
    twin = TorchModel.from_gguf(tiny_gguf, "cpu")
    with Model.from_gguf(tiny_gguf) as model:
        np.testing.assert_allclose(twin.forward_numpy([1, 2, 3]), model.forward([1, 2, 3]), rtol=0, atol=ATOL)


def test_tiny_gemma3_prefill_then_decode_past_the_window_equals_numpy(tmp_path):
    """The gemma3 row in torch: embedding scale, q/k norms, NeoX rope with two bases, a window of
    4 positions on blocks 0-4 (block 5 global), post norms, GELU-tanh; decoding past the window."""
    model, twin = both(write_tiny_gemma3(tmp_path / "g.gguf"))
    with model:
        assert twin.spec.arch == "gemma3" and twin.weights.block(0).q_norm is not None
        diffs = run_side_by_side(model, twin, [2, 280, 294, 307, 309, 291], [312, 288, 313, 301, 316, 287])
    assert max(diffs) < ATOL


# -- the steps, one by one --------------------------------------------------------------------


def test_steps_equal_forward_py_steps():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 8)).astype(np.float32)
    for n_rot in (8, 4):
        cos, sin = fnp.rope_angles(np.arange(7, 12), n_rot, 10000.0)
        tc, ts = ft.rope_angles(7, 5, n_rot, 10000.0, "cpu")
        np.testing.assert_array_equal(tc.numpy(), cos)
        np.testing.assert_array_equal(ts.numpy(), sin)
        for layout in ("adjacent", "neox"):
            np.testing.assert_allclose(
                ft.rope(torch.from_numpy(x), tc, ts, layout).numpy(), fnp.rope(x, cos, sin, layout), rtol=0, atol=1e-6
            )
    with pytest.raises(ValueError, match="rope layout 'gptj' is not known"):
        ft.rope(torch.from_numpy(x), tc, ts, "gptj")


def test_the_one_rms_norm_softmax_and_activations_take_torch_tensors():
    """bytesup.model.layers' functions, given torch tensors, compute in torch (a tensor comes back, on
    the tensor's device) what they compute on the NumPy arrays, and against torch's own functions."""
    rng = np.random.default_rng(1)
    g = rng.standard_normal((3, 16)).astype(np.float32) * 3
    for name, torch_own in (
        ("silu", torch.nn.functional.silu),
        ("gelu_tanh", lambda z: torch.nn.functional.gelu(z, approximate="tanh")),
    ):
        got = fnp.activation(name)(torch.from_numpy(g))
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), fnp.activation(name)(g), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got.numpy(), torch_own(torch.from_numpy(g)).numpy(), rtol=1e-6, atol=1e-6)
    h = rng.standard_normal((4, 32)).astype(np.float32)
    w = rng.standard_normal(32).astype(np.float32)
    got = layers.rms_norm(torch.from_numpy(h), torch.from_numpy(w), 1e-5)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), layers.rms_norm(h, w, 1e-5), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="must match the last axis"):
        layers.rms_norm(torch.from_numpy(h), torch.from_numpy(w[:8]), 1e-5)
    s = rng.standard_normal((2, 3, 7)).astype(np.float32) * 4
    s[0, 1, 4:] = -np.inf  # masked scores
    got = layers.softmax(torch.from_numpy(s))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and torch.all(got[0, 1, 4:] == 0)
    np.testing.assert_allclose(got.numpy(), layers.softmax(s), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.numpy(), torch.softmax(torch.from_numpy(s), dim=-1).numpy(), rtol=1e-6, atol=1e-7)


def test_attention_is_causal_and_grouped(tiny_gguf):
    """Queries at positions 2..5 against 6 keys: the same weights as forward.attention, with the
    future masked to exactly 0 (a changed future value changes nothing)."""
    with Model.from_gguf(tiny_gguf) as model:
        spec = model.spec
    rng = np.random.default_rng(2)
    q = rng.standard_normal((4, spec.n_heads, spec.head_dim)).astype(np.float32)
    k = rng.standard_normal((spec.n_kv_heads, 6, spec.head_dim)).astype(np.float32)
    v = rng.standard_normal((spec.n_kv_heads, 6, spec.head_dim)).astype(np.float32)
    got = ft.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), 2, spec).numpy()
    np.testing.assert_allclose(got, fnp.attention(q, k, v, 2, spec)[0], rtol=0, atol=1e-6)
    v2 = v.copy()
    v2[:, 5] += 100.0  # only the last query (position 5) sees key 5
    got2 = ft.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v2), 2, spec).numpy()
    np.testing.assert_array_equal(got2[:3], got[:3])
    assert np.abs(got2[3] - got[3]).max() > 1.0
    # a window of 2: the query at position 5 sees keys 4 and 5 only, as forward.attention
    got3 = ft.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), 2, spec, window=2).numpy()
    np.testing.assert_allclose(got3, fnp.attention(q, k, v, 2, spec, window=2)[0], rtol=0, atol=1e-6)
    v3 = v.copy()
    v3[:, :3] += 100.0  # keys 0..2 are outside every window of 2 for positions 4 and 5
    got4 = ft.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v3), 2, spec, window=2).numpy()
    np.testing.assert_array_equal(got4[2:], got3[2:])
    assert np.abs(got4[0] - got3[0]).max() > 1.0


# -- refusals, one line each --------------------------------------------------------------------


def test_a_streaming_model_is_refused_in_one_line(tiny_gguf):
    with Model.from_gguf(tiny_gguf, mode="streaming") as model, pytest.raises(TorchUnavailable) as err:
        TorchModel.from_model(model, "cpu")
    assert "\n" not in str(err.value) and "mode='resident'" in str(err.value) and str(tiny_gguf) in str(err.value)


def test_bad_ids_and_foreign_caches_are_the_numpy_models_errors(tiny_gguf, tmp_path):
    model, twin = both(tiny_gguf)
    with model:
        vocab = model.spec.vocab
        with pytest.raises(ForwardInputError, match=f"token id {vocab} at index 1 is outside"):
            twin.forward([1, vocab])
        with pytest.raises(ForwardInputError, match="no token ids"):
            twin.forward([])
        cache = twin.new_cache(max_tokens=2)
        with pytest.raises(ForwardInputError, match="exceed the KV cache's max_tokens = 2"):
            twin.forward([1, 2, 3], cache)
        with pytest.raises(ForwardInputError, match="must be between 1 and"):
            twin.new_cache(max_tokens=10**9)
    other_model, other = both(write_tiny_llama(tmp_path / "other.gguf", n_layers=3))
    with other_model, pytest.raises(ForwardInputError, match="different model"):
        twin.forward([1], other.new_cache())


# -- the real default model ---------------------------------------------------------------------


@pytest.mark.slow
def test_default_model_capital_of_france_equals_numpy(default_gguf):
    """SmolLM2-135M (Q4_1, tied, 9 heads over 3 K/V heads, 30 blocks): prefill of the prompt,
    then three greedy decode steps; every logit within 1e-4 of the NumPy forward pass."""
    ids = Tokenizer.from_gguf(default_gguf).encode("The capital of France is")
    assert len(ids) >= 4
    model, twin = both(default_gguf)
    with model:
        assert twin.spec.tied and twin.spec.group == 3
        c_np, c_t = model.new_cache(), twin.new_cache()
        a = model.forward(ids, c_np)
        b = twin.forward_numpy(ids, c_t)
        np.testing.assert_allclose(b, a, rtol=0, atol=ATOL)
        assert int(b[-1].argmax()) == int(a[-1].argmax())
        nxt = int(a[-1].argmax())
        for _ in range(3):
            a = model.forward([nxt], c_np)
            b = twin.forward_numpy([nxt], c_t)
            np.testing.assert_allclose(b, a, rtol=0, atol=ATOL)
            assert int(b[-1].argmax()) == int(a[-1].argmax())
            nxt = int(a[-1].argmax())


@pytest.mark.slow
def test_gemma3_270m_prefill_then_decode_equals_numpy(gemma_gguf):
    """The real Gemma 3 270M (18 blocks, key_length 256, 262,144-row tied head) in torch on CPU against
    the NumPy pass: prefill of a prompt, then three decode steps; every logit within 1e-3."""
    ids = Tokenizer.from_gguf(gemma_gguf).encode("The capital of France is")
    model, twin = both(gemma_gguf)
    with model:
        assert twin.spec.arch == "gemma3" and twin.spec.head_dim == 256 and twin.spec.tied
        c_np, c_t = model.new_cache(), twin.new_cache()
        for step in [ids, [100], [200], [300]]:
            np.testing.assert_allclose(twin.forward_numpy(step, c_t), model.forward(step, c_np), rtol=0, atol=1e-3)

"""The NumPy forward pass (bytesup.model) against an independent float64 llama written here.

The reference below shares no code with the package: tensors come from gguf-py's GGUFReader and
gguf.quants.dequantize, and it has its own RMSNorm, rope (complex numbers), attention (a loop
over heads and positions) and softmax, all in float64.

Tolerances are a few times the float32 pass's measured error against it (REFERENCE_REL), so a
one-line slip fails: without the RMSNorm epsilon (1e-5 in these files) the logits move by 2e-5 to
5e-5 of their largest value, against a clean error of at most 4.8e-7.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from reference_llama import reference_pass

from bytesup.model.arch import (
    ArchMetadataError,
    UnsupportedArchitectureError,
    spec_from_metadata,
    supported,
)
from bytesup.model.forward import (
    ForwardInputError,
    Model,
    flops_per_token,
    macs_per_token,
    rope,
    rope_angles,
    weight_float32_bytes_per_token,
)
from bytesup.model.layers import rms_norm
from bytesup.model.synthetic import raw_gguf, write_tiny_llama
from bytesup.model.trace import Trace
from bytesup.model.weights import choose_mode, float32_bytes

TINY_CASES = {
    "untied-gqa2": {"n_head": 4, "n_head_kv": 2, "n_layers": 2},
    "tied-3blocks": {"n_head": 4, "n_head_kv": 2, "n_layers": 3, "tied": True},
    "mqa-kv1": {"n_head": 4, "n_head_kv": 1, "n_layers": 2, "seed": 3},
    "mha-kv4": {"n_head": 4, "n_head_kv": 4, "n_layers": 2, "tied": True, "seed": 5},
    "wide-heads": {"n_embd": 64, "n_ff": 128, "n_head": 2, "n_head_kv": 1, "n_layers": 2, "seed": 7},
}
IDS = [1, 20, 45, 30, 7, 61, 12, 3, 9]
# The float32 pass against the float64 reference, max |difference| / max |reference|: measured 1.7e-7
# (qwen2) to 4.8e-7 (mha-kv4) on the logits, up to 5.0e-7 on the residual stream and the final norm.
REFERENCE_REL = 1.5e-6


def rel_err(got, want) -> float:
    """max |got - want| / max |want|: the error against the reference, relative to its size."""
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


@pytest.fixture(params=sorted(TINY_CASES))
def tiny_case(request, tmp_path):
    return write_tiny_llama(tmp_path / f"{request.param}.gguf", **TINY_CASES[request.param])


def test_logits_match_independent_float64_llama(tiny_case):
    expected = reference_pass(tiny_case, IDS)["logits"]
    with Model.from_gguf(tiny_case) as model:
        got = model.forward(IDS)
    assert got.dtype == np.float32 and got.shape == (len(IDS), model.spec.vocab)
    assert rel_err(got, expected) < REFERENCE_REL


def test_tiny_qwen2_logits_match_independent_float64_qwen2(tmp_path):
    """The qwen2 row: llama's block plus Q, K, V biases, rope on halves; against the float64 reference."""
    path = write_tiny_llama(tmp_path / "qwen2.gguf", arch="qwen2", qkv_bias=True, n_layers=2, tied=True)
    expected = reference_pass(path, IDS)["logits"]
    with Model.from_gguf(path) as model:
        assert model.spec.rope_layout == "neox" and model.weights.block(1).bqkv.shape == (32 + 2 * 16,)
        got = model.forward(IDS)
    assert rel_err(got, expected) < REFERENCE_REL
    # a qwen2 file without its biases is refused in one line naming the first missing one
    with pytest.raises(ArchMetadataError, match=r"tensor 'blk\.0\.attn_q\.bias' is missing"):
        Model.from_gguf(write_tiny_llama(tmp_path / "nobias.gguf", arch="qwen2", n_layers=2, tied=True))


def test_tied_model_unembeds_with_token_embd(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf", tied=True)
    with Model.from_gguf(path) as model:
        assert model.spec.tied
        assert model.weights.head is model.weights.token_embd  # one array, not two


def test_kv_cache_decode_equals_full_recompute(tiny_case):
    with Model.from_gguf(tiny_case) as model:
        full = model.forward(IDS)
        cache = model.new_cache()
        steps = [model.forward(IDS[:4], cache)]
        for token in IDS[4:]:
            steps.append(model.forward([token], cache))
        assert cache.n == len(IDS)
    assert np.abs(np.concatenate(steps) - full).max() <= 1e-5


def test_kv_cache_grows_and_refuses_past_max_tokens(tiny_gguf):
    with Model.from_gguf(tiny_gguf) as model:
        cache = model.new_cache(max_tokens=70)
        ids = list(np.arange(69) % model.spec.vocab)
        model.forward(ids[:50], cache)
        model.forward(ids[50:], cache)  # grows from 64 to 70 positions
        assert cache.k[0].shape[1] == 70 and cache.n == 69
        model.forward([5], cache)
        with pytest.raises(ForwardInputError, match="max_tokens = 70"):
            model.forward([5], cache)


def test_streaming_and_resident_agree(tiny_case):
    """The same weights either way, in the same row-major layout: the same logits, bit for bit, the head
    in one product or in chunks of rows."""
    with Model.from_gguf(tiny_case, mode="resident") as resident, Model.from_gguf(tiny_case, mode="streaming") as st:
        assert (resident.mode, st.mode) == ("resident", "streaming")
        assert resident.weights.block(0).wqkv.flags.c_contiguous and st.weights.block(0).wqkv.flags.c_contiguous
        np.testing.assert_array_equal(st.weights.block(1).wqkv, resident.weights.block(1).wqkv)
        st.weights.head_chunk_rows = resident.weights.head_chunk_rows = 7  # several chunks, the last short
        a, b = st.forward(IDS), resident.forward(IDS)
        np.testing.assert_array_equal(a, b)
        c1, c2 = resident.new_cache(), st.new_cache()
        resident.forward(IDS[:3], c1), st.forward(IDS[:3], c2)
        np.testing.assert_array_equal(st.forward([IDS[3]], c2), resident.forward([IDS[3]], c1))


def test_resident_matrices_hold_the_streamed_numbers(tmp_path):
    """Every resident matrix, stacked or not, and the head hold the numbers the streaming provider
    dequantizes, row-major as the file stores its rows."""
    path = write_tiny_llama(tmp_path / "mix.gguf", n_embd=64, n_ff=96, n_head=4, n_head_kv=2, n_layers=2)
    with Model.from_gguf(path, mode="resident") as resident, Model.from_gguf(path, mode="streaming") as st:
        res = resident.weights
        assert res.head.flags.c_contiguous
        np.testing.assert_array_equal(res.head, resident.gguf.load(res.spec.tensor_name("output")))
        for i in range(res.spec.n_layers):
            mine, theirs = res.block(i), st.weights.block(i)
            for name in ("wqkv", "wo", "w_gate_up", "w_down"):
                assert getattr(mine, name).flags.c_contiguous, name
                np.testing.assert_array_equal(getattr(mine, name), getattr(theirs, name), err_msg=name)


# Logits of the two layouts, max |difference| / max |logit|: the same products summed in another order
# (BLAS walking down columns, not along rows), measured 1.1e-7 to 7.0e-7 on the tiny models, prefill and decode.
LAYOUT_REL = 1e-6


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "phi3"])
def test_long_runs_layout_holds_the_same_numbers_column_major_where_a_matrix_is_tall(tmp_path, arch, monkeypatch):
    """layout="long-runs": every matrix with at least as many rows as columns (Q K V, W_o, gate|up, the head;
    a tied head is token_embd) column-major, the rest row-major, each holding exactly the numbers of the
    row-major layout (dequantized a few rows at a time: a 1-row chunk here); the pass gives the same
    logits within the float32 rounding of another summation order."""
    from bytesup.model import weights
    from bytesup.model.synthetic import write_tiny

    monkeypatch.setattr(weights, "ROW_CHUNK_BYTES", 1)  # one row a chunk: every chunk boundary is crossed
    path = write_tiny(tmp_path / f"{arch}.gguf", arch)
    with (
        Model.from_gguf(path, mode="resident") as rows,
        Model.from_gguf(path, mode="resident", layout="long-runs") as lr,
    ):
        assert (rows.layout, lr.layout) == ("rows", "long-runs")
        pairs = [(rows.weights.head, lr.weights.head), (rows.weights.token_embd, lr.weights.token_embd)]
        for i in range(rows.spec.n_layers):
            pairs += [(getattr(rows.weights.block(i), n), getattr(lr.weights.block(i), n))
                      for n in ("wqkv", "wo", "w_gate_up", "w_down")]  # fmt: skip
        for a, b in pairs:
            np.testing.assert_array_equal(a, b)
            assert a.flags.c_contiguous
            tall = a.shape[0] >= a.shape[1] and (b is lr.weights.head or b is not lr.weights.token_embd)
            assert b.flags.f_contiguous if tall else b.flags.c_contiguous, (a.shape, tall)
        assert rel_err(lr.forward(IDS), rows.forward(IDS)) < LAYOUT_REL
        c1, c2 = rows.new_cache(), lr.new_cache()
        rows.forward(IDS[:4], c1), lr.forward(IDS[:4], c2)
        assert rel_err(lr.forward([IDS[4]], c2), rows.forward([IDS[4]], c1)) < LAYOUT_REL


def test_a_layout_is_one_of_the_known_and_only_for_resident_weights(tiny_gguf):
    with pytest.raises(ValueError, match="layout 'cols' is not known .*rows, long-runs"):
        Model.from_gguf(tiny_gguf, mode="resident", layout="cols")
    with pytest.raises(ValueError, match="layout 'long-runs' is for resident weights"):
        Model.from_gguf(tiny_gguf, mode="streaming", layout="long-runs")


def test_a_non_finite_weight_is_one_line_in_a_column_major_matrix_too(tmp_path):
    """The chunked way into a column-major matrix checks each chunk as it comes: a NaN in row 3 of attn_q
    is named in the very words the row-major way uses, its element and byte included."""
    from bytesup.gguf.file import GGUFFile, NonFiniteWeightsError

    path = write_tiny_llama(tmp_path / "nan.gguf", n_layers=1, types={"blk.0.attn_q.weight": "F32"})
    with GGUFFile(path) as f:
        info = f.tensor("blk.0.attn_q.weight")
        assert info.type_name == "F32"
        at = info.offset + 4 * (3 * info.shape[1] + 5)  # row 3, column 5
    data = bytearray(path.read_bytes())
    data[at : at + 4] = np.float32(np.nan).tobytes()
    path.write_bytes(bytes(data))
    lines = []
    for layout in ("rows", "long-runs"):
        with pytest.raises(NonFiniteWeightsError, match="'blk.0.attn_q.weight': holds 1 NaN") as err:
            Model.from_gguf(path, mode="resident", layout=layout)
        lines.append(str(err.value))
    assert lines[0] == lines[1] and "\n" not in lines[0] and f"byte {at}" in lines[0]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "phi3"])
def test_resident_weights_sit_in_one_map_in_reading_order(tmp_path, arch):
    """Every resident array, the architecture's optional roles included, comes from the one Arena (none
    from its fallback), cache-line aligned, in the order a step reads them: embedding, blocks, head."""
    import mmap

    from bytesup.model.synthetic import write_tiny

    with Model.from_gguf(write_tiny(tmp_path / f"{arch}.gguf", arch), mode="resident") as model:
        w = model.weights
        mapping = w.token_embd.base
        while not isinstance(mapping, mmap.mmap):
            mapping = mapping.obj if isinstance(mapping, memoryview) else mapping.base
        start = np.frombuffer(mapping, np.uint8).ctypes.data
        assert start % 4096 == 0 and (w.token_embd.ctypes.data - start) < (2 << 20)
        assert w.token_embd.ctypes.data % (2 << 20) == 0
        for b in w.blocks:
            for a in b.arrays():
                assert a.ctypes.data % 64 == 0 and 0 <= a.ctypes.data - start < len(mapping), arch
        firsts = [w.token_embd] + [x for b in w.blocks for x in (b.attn_norm, b.wqkv, b.wo, b.w_gate_up, b.w_down)]
        firsts += [] if w.head is w.token_embd else [w.head]
        where = [x.ctypes.data for x in firsts]
        assert where == sorted(where), arch


def _thp_setting() -> str | None:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else None


@pytest.mark.skipif(_thp_setting() not in ("always", "madvise"), reason="no transparent huge pages here")
def test_the_arena_is_backed_by_huge_pages_where_the_machine_has_them():
    """An Arena's arrays, once written, sit on 2 MiB pages (/proc/self/smaps: AnonHugePages of its map):
    a shared anonymous map would be shmem, which madvise cannot give huge pages under shmem_enabled=never."""
    from bytesup.model.weights import HUGE_PAGE, Arena

    arena = Arena(4 * HUGE_PAGE)
    a = arena.empty((4 * HUGE_PAGE // 4,))
    a[...] = 1.0
    start = a.ctypes.data
    huge_kb, inside = 0, False
    for line in open("/proc/self/smaps"):
        first = line.split()[0]
        if "-" in first and all(c in "0123456789abcdef-" for c in first):
            lo, hi = (int(x, 16) for x in first.split("-"))
            inside = lo <= start < hi
        elif inside and line.startswith("AnonHugePages:"):
            huge_kb = int(line.split()[1])
    assert huge_kb >= HUGE_PAGE // 1024, f"the arena's map has {huge_kb} kB on huge pages"


def test_rope_in_place_is_rope_into_a_new_array():
    """rope(x, out=x) turns x itself (as attention_block does on the stacked Q K V), with the same numbers
    as a new array; with a partial rope the dimensions past n_rot stay as they were."""
    rng = np.random.default_rng(4)
    for n_rot, layout in ((8, "adjacent"), (8, "neox"), (4, "adjacent"), (4, "neox")):
        x = rng.standard_normal((3, 5, 8)).astype(np.float32)
        before = x.copy()
        cos, sin = rope_angles(np.arange(2, 5), n_rot, 500.0)
        want = rope(x, cos, sin, layout)
        assert np.array_equal(x, before)  # without out, x is left alone
        same = rope(x, cos, sin, layout, out=x)
        assert same is x and np.array_equal(x, want)
        assert (x[..., :n_rot] != before[..., :n_rot]).any(axis=-1).all()  # every head of every token turned
        np.testing.assert_array_equal(x[..., n_rot:], before[..., n_rot:])


def test_mode_follows_the_budget(tiny_gguf):
    with Model.from_gguf(tiny_gguf) as model:
        need = float32_bytes(model.spec)
        assert choose_mode(model.spec, need) == "resident"
        assert choose_mode(model.spec, need - 1) == "streaming"
    with Model.from_gguf(tiny_gguf, resident_budget_bytes=1000) as model:
        assert model.mode == "streaming"
    # the tiny model: vocab 66, width 32, FFN 64, q 32, kv 16, 2 blocks, untied
    block = 2 * 32 + 32 * (32 + 2 * 16) + 32 * 32 + 3 * 32 * 64
    assert need == 4 * (66 * 32 + 2 * block + 32 + 66 * 32)


def test_adjacent_rope_on_gguf_rows_is_rotate_half_on_hf_rows():
    """Why the layout is "adjacent pairs": convert_hf_to_gguf.py permutes each head's Q/K rows
    (reshape(heads, 2, hd/2, d).swapaxes(1, 2)), so ggml's NORM rope on pairs (2i, 2i+1) gives
    what Hugging Face's rotate_half gives on pairs (i, i + hd/2) of the original rows."""
    rng = np.random.default_rng(1)
    heads, hd, d, base = 3, 8, 16, 10000.0
    w_hf = rng.standard_normal((heads * hd, d)).astype(np.float32)
    w_gguf = w_hf.reshape(heads, 2, hd // 2, d).swapaxes(1, 2).reshape(w_hf.shape)  # convert_hf_to_gguf.permute
    x = rng.standard_normal((5, d)).astype(np.float32)
    positions = np.arange(7, 12)
    cos, sin = rope_angles(positions, hd, base)
    ours = rope((x @ w_gguf.T).reshape(5, heads, hd), cos, sin)
    # transformers: q * cos + rotate_half(q) * sin, angles repeated over both halves
    q = (x @ w_hf.T).reshape(5, heads, hd)
    c, s_ = np.concatenate([cos, cos], -1)[:, None], np.concatenate([sin, sin], -1)[:, None]
    hf = q * c + np.concatenate([-q[..., hd // 2 :], q[..., : hd // 2]], -1) * s_
    hf_in_gguf_order = hf.reshape(5, heads, 2, hd // 2).swapaxes(2, 3).reshape(5, heads, hd)
    np.testing.assert_allclose(ours, hf_in_gguf_order, rtol=1e-5, atol=1e-5)


def test_rms_norm_normalizes_each_row_and_each_head_alone():
    """The one rms_norm on (tokens, d) and (tokens, heads, head_dim): each last-axis vector exactly as
    if it were normalized alone, and that against the float64 formula."""
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((5, 48)).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    x[2] *= 100  # one token far larger: a norm over the whole matrix would shrink the others
    rows = rms_norm(x, g, 1e-5)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5) * g
    np.testing.assert_allclose(rows, want, rtol=1e-6, atol=0)
    heads = rms_norm(x.reshape(5, 6, 8), g[:8], 1e-5)
    for t in range(5):
        np.testing.assert_array_equal(rows[t], rms_norm(x[t], g, 1e-5))
        for h in range(6):
            np.testing.assert_array_equal(heads[t, h], rms_norm(x[t, 8 * h : 8 * h + 8], g[:8], 1e-5))


def test_trace_counts_match_the_analytic_costs(tiny_gguf):
    with Model.from_gguf(tiny_gguf) as model:
        spec = model.spec
        cache = model.new_cache()
        model.forward(IDS[:5], cache)
        trace = Trace(keep_attention=True)
        model.forward([IDS[5]], cache, trace=trace)  # decode at position 5: 6 keys
        assert trace.macs == macs_per_token(spec, 6)
        assert flops_per_token(spec, 6) == 2 * trace.macs
        assert trace.weight_bytes == weight_float32_bytes_per_token(spec)
        per_token = model.weight_bytes_per_token()
        assert trace.weight_bytes == per_token.float32_bytes
        assert trace.weight_file_bytes == per_token.file_bytes
        assert len(trace.residual) == spec.n_layers + 1 and trace.residual[0].shape == (spec.d_model,)
        assert [a.shape for a in trace.attention] == [(spec.n_heads, 1, 6)] * spec.n_layers
        np.testing.assert_allclose(trace.attention[0].sum(-1), 1, rtol=1e-6)

        full = Trace(all_positions=True, keep_attention=True)
        model.forward(IDS[:4], trace=full)
        a = full.attention[1]  # heads x queries x keys, causal: nothing above the diagonal
        assert a.shape == (spec.n_heads, 4, 4) and np.all(a[:, np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]] == 0)
        assert full.residual[-1].shape == (4, spec.d_model) and full.final_norm.shape == (4, spec.d_model)
        # a prefill multiplies the masked scores too: N x N per head, not the causal triangle
        assert full.macs == 4 * (macs_per_token(spec, 0)) + spec.n_layers * 2 * spec.n_heads * 4 * 4 * spec.head_dim


def test_trace_residuals_are_the_reference_hidden_state(tiny_case):
    """The residual stream the trace kept after the embedding and after every block, and the final
    norm, against the float64 reference's own (every position; then a decode step's last token)."""
    ref = reference_pass(tiny_case, IDS)
    with Model.from_gguf(tiny_case) as model:
        full = Trace(all_positions=True)
        model.forward(IDS, trace=full)
        cache = model.new_cache()
        model.forward(IDS[:-1], cache)
        last = Trace()
        model.forward(IDS[-1:], cache, trace=last)
    assert len(full.residual) == len(ref["hidden"]) == model.spec.n_layers + 1
    for mine, theirs in zip(full.residual, ref["hidden"]):
        assert mine.shape == theirs.shape and rel_err(mine, theirs) < REFERENCE_REL
    assert rel_err(full.final_norm, ref["final_norm"]) < REFERENCE_REL
    for mine, theirs in zip(last.residual, ref["stream"]):
        assert mine.shape == theirs.shape and rel_err(mine, theirs) < REFERENCE_REL
    assert rel_err(last.final_norm, ref["final_norm"][-1]) < REFERENCE_REL


# -- errors a user can cause: one line each --------------------------------------------------


def one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_unsupported_architecture_is_one_line_naming_it(tmp_path):
    path = tmp_path / "mamba.gguf"
    path.write_bytes(raw_gguf([("general.architecture", "STRING", "mamba"),
                               ("mamba.block_count", "UINT32", 26)]))  # fmt: skip
    with pytest.raises(UnsupportedArchitectureError) as err:
        Model.from_gguf(path)
    text = one_line(err)
    rows = "gemma2, gemma3, llama, phi3, qwen2, qwen3"
    assert text == f"{path}: mamba: architecture not supported by the forward pass (supported: {rows})"
    reason = supported({"general.architecture": "mamba"})
    assert reason == f"mamba: architecture not supported by the forward pass (supported: {rows})"
    with pytest.raises(UnsupportedArchitectureError, match="lessons 4 and 5 need it$"):
        spec_from_metadata({"general.architecture": "mamba"}, needed_by="lessons 4 and 5")


def test_missing_metadata_key_and_tensor_are_named(tiny_gguf):
    from bytesup.gguf.file import GGUFFile

    with GGUFFile(tiny_gguf) as f:
        meta, names = dict(f.metadata), f.tensor_names
    assert supported(meta, names) is None
    del meta["llama.attention.layer_norm_rms_epsilon"]
    with pytest.raises(ArchMetadataError) as err:
        spec_from_metadata(meta, names)
    assert "'llama.attention.layer_norm_rms_epsilon' is missing" in one_line(err)
    assert "layer_norm_rms_epsilon" in supported(meta, names)
    with GGUFFile(tiny_gguf) as f:
        meta = dict(f.metadata)
    with pytest.raises(ArchMetadataError, match=r"tensor 'blk\.1\.ffn_up\.weight' is missing"):
        spec_from_metadata(meta, [n for n in names if n != "blk.1.ffn_up.weight"])


def test_spec_reads_the_head_size_rule(tiny_gguf):
    from bytesup.gguf.file import GGUFFile

    with GGUFFile(tiny_gguf) as f:
        meta, names = dict(f.metadata), f.tensor_names
    spec = spec_from_metadata(meta, names)
    assert (spec.head_dim, spec.n_rot, spec.group, spec.rope_base, spec.tied) == (8, 8, 2, 10000.0, False)
    meta["llama.attention.key_length"] = 16  # key_length wins over embedding_length / head_count
    assert spec_from_metadata(meta, names).head_dim == 16
    del meta["llama.rope.freq_base"]
    assert spec_from_metadata(meta, names).rope_base == 10000.0  # the table's default


@pytest.mark.parametrize(
    "ids, message",
    [
        ([], "no token ids given"),
        ([1, 66], r"token id 66 at index 1 is outside the vocabulary 0\.\.65 \(llama\.vocab_size\)"),
        ([-1], "token id -1 at index 0"),
        ([[1, 2]], "flat list"),
        ([1.5], "integers"),
        (list(range(60)) * 3, r"0 cached \+ 180 new tokens exceed llama\.context_length = 128"),
    ],
)
def test_bad_ids_are_one_line_errors(tiny_gguf, ids, message):
    with Model.from_gguf(tiny_gguf) as model:
        with pytest.raises(ForwardInputError, match=message) as err:
            model.forward(ids)
        one_line(err)


def test_too_long_counts_the_cache(tiny_gguf):
    with Model.from_gguf(tiny_gguf) as model:
        cache = model.new_cache()
        model.forward(list(range(60)) * 2, cache)
        with pytest.raises(ForwardInputError, match=r"120 cached \+ 9 new tokens exceed llama\.context_length"):
            model.forward(IDS, cache)


def test_closed_model_and_bad_mode_are_one_line_errors(tiny_gguf):
    with Model.from_gguf(tiny_gguf) as model:
        pass
    with pytest.raises(ValueError, match="model is closed"):
        model.forward([1])
    with pytest.raises(ValueError, match="'resident' or 'streaming', not 'gpu'"):
        Model.from_gguf(tiny_gguf, mode="gpu")


# -- memory: streaming keeps one block of float32 -------------------------------------------

# Peak RSS from /proc's VmHWM: resource.getrusage's ru_maxrss survives fork and exec on Linux,
# so a child of a 300 MB pytest would start with a 300 MB "peak".
PEAK_SCRIPT = textwrap.dedent("""
    import json, sys
    from bytesup.model.forward import Model
    from bytesup.model.weights import float32_bytes

    def peak():
        status = open("/proc/self/status").read()
        return int(status.split("VmHWM:")[1].split()[0]) * 1024

    model = Model.from_gguf(sys.argv[1], mode=sys.argv[2])
    before = peak()
    cache = model.new_cache()
    model.forward([1, 2, 3, 4], cache)
    logits = model.forward([5], cache)
    print(json.dumps({"before": before, "peak": peak(), "float32": float32_bytes(model.spec),
                      "block": model.weights.block(0).float32_bytes, "top": int(logits[0].argmax())}))
    """)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_streaming_peak_memory_stays_near_one_block(tmp_path):
    path = write_tiny_llama(tmp_path / "big.gguf", n_vocab=8192, n_embd=1024, n_ff=4096, n_layers=8, n_head=8,
                            n_head_kv=4, n_ctx=256, types={"*norm*": "F32", "*": "Q8_0"})  # fmt: skip

    def measure(mode):
        run = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(path), mode], capture_output=True, text=True,
                             check=True)  # fmt: skip
        return json.loads(run.stdout)

    streaming, resident = measure("streaming"), measure("resident")
    print({"streaming": streaming, "resident": resident})  # shown with -s: the measured peaks
    assert streaming["top"] == resident["top"]
    assert streaming["float32"] > 550e6  # what residency costs
    assert resident["peak"] > streaming["float32"]
    # the pass added about one block of float32, one head chunk (here the whole 32 MB head) and
    # the pages of the tensor being dequantized; not the 570 MB of float32 weights
    head = 8192 * 1024 * 4
    assert streaming["peak"] - streaming["before"] < streaming["block"] + head + 40e6, streaming
    assert streaming["peak"] < 0.35 * streaming["float32"], streaming


# -- the real default model ------------------------------------------------------------------

PROMPT_IDS = [504, 3575, 282, 4649, 314, 7042, 30, 378]  # "The capital of France is Paris. The"


@pytest.fixture(scope="module")
def default_model(default_gguf):
    with Model.from_gguf(default_gguf) as model:
        yield model


def test_default_model_spec(default_model):
    s = default_model.spec
    assert (s.arch, s.n_layers, s.d_model, s.d_ff, s.n_heads, s.n_kv_heads, s.head_dim) == ("llama", 30, 576, 1536, 9,
                                                                                            3, 64)  # fmt: skip
    assert (s.vocab, s.context_length, s.rope_base, s.tied, default_model.mode) == (49152, 8192, 100000.0, True,
                                                                                     "resident")  # fmt: skip
    assert float32_bytes(s) == 4 * (49152 * 576 + 30 * (2 * 576 + 576 * 960 + 576 * 576 + 3 * 576 * 1536) + 576)


def test_default_model_kv_cache_equals_full_recompute(default_model):
    full = default_model.forward(PROMPT_IDS)
    cache = default_model.new_cache()
    steps = [default_model.forward(PROMPT_IDS[:5], cache)] + [default_model.forward([t], cache) for t in PROMPT_IDS[5:]]
    diff = np.abs(np.concatenate(steps) - full).max()
    # Not bit-equal: BLAS sums a one-row matvec and a many-row matmul in different orders, and
    # 30 blocks compound that. Measured 5.1e-5 on logits of size ~17 (3e-6 relative).
    assert diff <= 1e-4, diff
    assert diff / np.abs(full).max() <= 1e-5
    assert int(full[4].argmax()) == 7042  # " Paris"


def test_default_model_streaming_agrees_with_resident(default_gguf, default_model):
    with Model.from_gguf(default_gguf, mode="streaming") as streaming:
        np.testing.assert_array_equal(streaming.forward(PROMPT_IDS[:5]), default_model.forward(PROMPT_IDS[:5]))

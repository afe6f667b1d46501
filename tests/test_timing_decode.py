"""Whole-model decode and prefill timing (bytesup.timing.decode and its parts: steps, context, peers,
streamed) on tiny synthetic models: the bytes a token reads, the read ceiling and the fraction follow
from the measurements as stated, the float32 copy holds the project's own dequantized weights, the KV
bytes follow the shapes, and an architecture the forward pass does not follow is a 'skipped' record,
not a failed job. Nothing here asserts a speed."""

from __future__ import annotations

import csv
import json
import struct

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from bytesup.gguf.file import GGUFFile
from bytesup.model import llama_cpp_ref
from bytesup.model.arch import spec_from_metadata
from bytesup.model.configs import DEEPSEEK_CODER_6_7B
from bytesup.model.forward import Model
from bytesup.model.synthetic import write_tiny_gemma3, write_tiny_llama
from bytesup.timing import context, decode, peers, steps, streamed
from bytesup.timing.decode import DECODE_KEYS, PREFILL_COLUMNS, decode_summary, run_decode, write_decode_results
from bytesup.timing.memory import READ_KERNELS

QUICK = {
    "repeats": 3,
    "warmup": 1,
    "decode_tokens": 4,
    "prefill_sizes": [1, 4, 16],
    "stream_bytes": 4 << 20,
    "decode_contexts": [0, 16, 512],
}
SMALL_Q8 = (64, 256)  # the Q8_0 product's matrix in these tests (the job's: the specimen's 11008 x 4096)


def float32_bytes_per_token(path) -> int:
    """Every tensor read once as float32, but one row of the embedding (gguf-py's reader, not ours)."""
    reader = GGUFReader(path)
    total, tied = 0, True
    for t in reader.tensors:
        n = int(np.prod(t.shape))
        if t.name == "token_embd.weight":
            total += 4 * int(t.shape[0])  # one row: GGUF lists the row length first
        else:
            total += 4 * n
        tied &= t.name != "output.weight"
    if tied:
        total += 4 * sum(int(np.prod(t.shape)) for t in reader.tensors if t.name == "token_embd.weight")
    return total


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("decode") / "m.gguf", n_layers=3)


@pytest.fixture(scope="module")
def measured(tiny, tmp_path_factory):
    return run_decode(tiny, QUICK, threads=1, scratch_dir=tmp_path_factory.mktemp("scratch"), q8_0_shape=SMALL_Q8)


# --- the one decode summary -----------------------------------------------------------------


def test_decode_summary_counts_decimal_gigabytes_and_the_read_ceiling():
    ceiling = {"gbps": 8.0, "kernel": "gemv", "rel_iqr": 0.02}
    s = decode_summary([0.4, 0.5, 0.6], 2_000_000_000, ceiling, noisy_spread=0.5)
    assert set(s) == set(DECODE_KEYS)
    assert s["decode_tokens_per_s"] == pytest.approx(2.0)  # 1 / median seconds
    assert s["decode_gbps"] == pytest.approx(4.0)  # 2e9 bytes x 2 tokens/s = 4 GB/s (GiB would give 3.73)
    assert s["decode_ceiling_tokens_per_s"] == pytest.approx(4.0)  # 8e9 B/s / 2e9 B per token
    assert s["decode_fraction_of_read_ceiling"] == pytest.approx(0.5)
    assert (s["decode_read_ceiling_kernel"], s["decode_tokens"]) == ("gemv", 3)
    assert s["decode_rel_iqr"] == pytest.approx((0.55 - 0.45) / 0.5) and s["decode_noisy"] is False


def test_decode_reads_every_weight_once_against_the_read_ceiling(tiny, measured):
    s = measured["summary"]
    assert s["status"] == "measured" and s["weights"].startswith("resident")
    assert s["decode_bytes_per_token"] == s["decode_float32_bytes_per_token"] == float32_bytes_per_token(tiny)
    assert s["decode_tokens_per_s"] == pytest.approx(1 / s["decode_median_s"]) and s["decode_tokens"] == 4
    assert s["decode_gbps"] == pytest.approx(s["decode_bytes_per_token"] * s["decode_tokens_per_s"] / 1e9)
    # the read ceiling: every kernel measured before each of the 4 rounds of turns (4 steps, 1 a turn),
    # each at its median across the rounds, the best of those
    kernels = s["memory_kernels"]
    assert [(r["turn"], r["kernel"]) for r in kernels] == [
        (t, k) for t in range(4) for k in ("copy", "triad", "sum", "dot", "gemv", "gemv_columns")
    ]
    median = {k: float(np.median([r["gbps"] for r in kernels if r["kernel"] == k])) for k in READ_KERNELS}
    best = max(median, key=median.get)
    assert s["decode_read_ceiling_gbps"] == median[best] and s["decode_read_ceiling_kernel"] == best
    assert s["read_ceiling"]["by_kernel_gbps"] == median and s["read_ceiling"]["turns"] == 4
    assert s["stream_copy_gbps"] == median["copy"]
    assert s["decode_ceiling_tokens_per_s"] == pytest.approx(median[best] * 1e9 / s["decode_bytes_per_token"])
    assert s["decode_fraction_of_read_ceiling"] == pytest.approx(s["decode_gbps"] / median[best])
    # the products alone: every matrix a step multiplies (the blocks' and the head, here tied to token_embd)
    p, reader = s["decode_products"], GGUFReader(tiny)
    matrices = {t.name: 4 * int(np.prod(t.shape)) for t in reader.tensors if len(t.shape) == 2}
    head = matrices.get("output.weight", matrices["token_embd.weight"])
    assert p["bytes"] == sum(v for k, v in matrices.items() if k.startswith("blk.")) + head
    assert p["gbps"] == pytest.approx(p["bytes"] / p["median_s"] / 1e9)
    assert p["fraction_of_read_ceiling"] == pytest.approx(p["gbps"] / s["decode_read_ceiling_gbps"])
    assert p["share_of_step"] == pytest.approx(p["median_s"] / s["decode_median_s"])
    f32 = s["llama_cpp_f32"]
    if "skipped" in f32:
        assert p["over_llama_cpp_f32"] is None
    else:  # llama.cpp's median step over the products'
        assert p["over_llama_cpp_f32"] == pytest.approx(1 / f32["decode_tokens_per_s"] / p["median_s"])
    first = s["targets"][0]
    assert (first["name"], first["target"]) == ("decode_fraction_of_read_ceiling", 0.7)
    assert first["met"] == (s["decode_fraction_of_read_ceiling"] >= 0.7)
    assert [r["n"] for r in measured["prefill"] if r["engine"] == "bytesup"] == [1, 4, 16]
    for row in measured["prefill"]:
        assert row["tokens_per_s"] == pytest.approx(row["n"] / row["median_s"])
    assert 0 <= s["other_processes_cpu_fraction"] and isinstance(s["machine_shared"], bool)
    json.dumps(s, allow_nan=False)


def test_the_decode_is_timed_in_the_layout_a_trial_chose(measured):
    """Both resident layouts take a trial in turns; the faster median is chosen, and the decode's own
    figures are that layout's steps in the timed turns, the other's timed beside them."""
    s = measured["summary"]
    layout = s["decode_layout"]
    trial = layout["trial_median_s"]
    assert set(trial) == set(layout["median_s"]) == {"rows", "long-runs"}
    assert layout["chosen"] == min(trial, key=trial.get)
    assert s["decode_median_s"] == layout["median_s"][layout["chosen"]]


class Scripted:
    """A stepper whose steps take the seconds it is given, in turn."""

    def __init__(self, seconds):
        self.seconds = list(seconds)

    def step(self):
        return self.seconds.pop(0) if len(self.seconds) > 1 else self.seconds[0]


def test_choose_layout_takes_the_faster_trial_median(monkeypatch):
    monkeypatch.setattr(steps.time, "sleep", lambda s: None)
    # warm-ups and settling steps slow for "long-runs", then its trial steps faster than rows'
    slow_then_fast = Scripted([9.0] * 3 + [1.0])
    chosen = decode.choose_layout({"rows": Scripted([2.0]), "long-runs": slow_then_fast}, warmup=1)
    assert chosen["chosen"] == "long-runs" and chosen["trial_median_s"] == {"rows": 2.0, "long-runs": 1.0}
    assert decode.choose_layout({"rows": Scripted([2.0])}, warmup=1) == {"chosen": "rows"}  # streamed: one layout


def test_a_goal_the_products_alone_miss_is_noted_as_out_of_reach_with_their_figure():
    summary = {"decode_fraction_of_read_ceiling": 0.66, "decode_noisy": False, "decode_over_llama_cpp_f32": 0.71,
               "llama_cpp_f32": {}, "decode_products": {"fraction_of_read_ceiling": 0.78, "over_llama_cpp_f32": 0.874}}  # fmt: skip
    fraction, peer = decode.decode_targets(summary, applies=True)
    assert fraction["met"] is False and "note" not in fraction  # the products reach 0.78: the gap is ours
    assert peer["met"] is False
    assert peer["note"] == (
        "out of reach for these BLAS calls here: the step's products alone, nothing between them, "
        "reach 0.874 of llama.cpp's step"
    )
    summary["decode_products"] = {"fraction_of_read_ceiling": 0.695, "over_llama_cpp_f32": 0.9}
    fraction, peer = decode.decode_targets(summary, applies=True)
    assert fraction["note"].endswith("reach 0.695 of the read ceiling") and "note" not in peer
    summary["llama_cpp_f32"] = {"skipped": "llama-cpp-python is not installed"}
    assert decode.decode_targets(summary, applies=True)[1]["note"] == "llama-cpp-python is not installed"
    streamed = decode.decode_targets(summary, applies=False)[0]
    assert streamed["met"] is None and streamed["note"].startswith("the weights stream")


def test_llama_cpp_runs_the_file_and_the_float32_copy_or_says_why_not(tiny, measured):
    s = measured["summary"]
    usable, why = llama_cpp_ref.status(tiny)
    if usable:
        lc = s["llama_cpp"]
        assert lc["decode_bytes_per_token"] == s["decode_file_bytes_per_token"]
        assert lc["decode_fraction_of_read_ceiling"] == pytest.approx(
            lc["decode_tokens_per_s"] / lc["decode_ceiling_tokens_per_s"]
        )
    else:
        assert s["llama_cpp"] == {"skipped": why}  # not installed, or a file llama.cpp refuses
    f32, peer = s["llama_cpp_f32"], s["targets"][1]
    assert peer["name"] == "decode_over_llama_cpp_f32" and peer["target"] == 0.9
    if "skipped" in f32:
        assert "\n" not in f32["skipped"] and s["decode_over_llama_cpp_f32"] is None and peer["met"] is None
    else:
        assert f32["decode_bytes_per_token"] == s["decode_float32_bytes_per_token"]
        assert f32["file_bytes"] == sum(4 * t.n_elements for t in GGUFFile(tiny).tensors)
        assert s["decode_over_llama_cpp_f32"] == pytest.approx(f32["ours_tokens_per_s"] / f32["decode_tokens_per_s"])
        assert f32["ours_tokens_per_s"] == pytest.approx(s["decode_tokens_per_s"])  # the same timed steps
        assert peer["met"] == (s["decode_over_llama_cpp_f32"] >= 0.9)


def test_streaming_weights_count_the_files_bytes_and_split_the_step(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf")
    s = run_decode(path, QUICK, threads=1, resident_budget_bytes=0, q8_0_shape=SMALL_Q8)["summary"]
    assert s["weights"].startswith("streamed")
    assert s["decode_bytes_per_token"] == s["decode_file_bytes_per_token"] < s["decode_float32_bytes_per_token"]
    assert s["decode_tokens"] == 3 and s["targets"][0]["met"] is None  # the 70 % goal is for resident weights
    assert s["llama_cpp_f32"]["skipped"].startswith("the weights stream")
    assert s["decode_by_context"] == [] and s["decode_context_notes"]
    assert s["decode_products"]["skipped"].startswith("the weights stream")
    split = s["streamed"]
    assert split["tokens"] == 3 and split["step_median_s"] == pytest.approx(s["decode_median_s"])
    assert 0 < split["dequant_median_s"] <= split["step_median_s"]
    assert split["bound"] == ("dequantization" if split["dequant_share"] >= 0.5 else "the products and the rest")


def test_another_architecture_is_a_skipped_record(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf")
    data = path.read_bytes().replace(b"llama", b"gemma", 1)  # general.architecture's value, same length
    other = tmp_path / "g.gguf"
    other.write_bytes(data)
    result = run_decode(other, QUICK, threads=1)
    assert result["summary"]["status"] == "skipped"
    assert "gemma" in result["summary"]["skipped"] and "\n" not in result["summary"]["skipped"]
    write_decode_results(result, tmp_path / "d.json", tmp_path / "p.csv")
    assert json.loads((tmp_path / "d.json").read_text())["status"] == "skipped"
    assert next(csv.reader((tmp_path / "p.csv").open())) == PREFILL_COLUMNS


def test_a_tensor_nothing_can_dequantize_is_a_skipped_record(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf", types={"blk.1.ffn_up.weight": "F16"})
    data = bytearray(path.read_bytes())
    name = b"blk.1.ffn_up.weight"
    at = data.index(name) + len(name)  # then: n_dims u32, 2 dims u64, type u32
    struct.pack_into("<I", data, at + 4 + 16, 25)  # F16 -> I16: same size, nothing dequantizes it
    path.write_bytes(bytes(data))
    s = run_decode(path, QUICK, threads=1)["summary"]
    assert s["status"] == "skipped" and "blk.1.ffn_up.weight" in s["skipped"] and "I16" in s["skipped"]


# --- decode across context ------------------------------------------------------------------


def test_kv_bytes_follow_the_shapes_and_the_sliding_window(tmp_path):
    with GGUFFile(write_tiny_llama(tmp_path / "m.gguf", n_layers=3)) as f:
        spec = spec_from_metadata(f.metadata, f.tensor_names)
    per = 2 * spec.n_kv_heads * spec.head_dim * 4  # K and V, float32, one block
    assert context.kv_bytes_read(spec, 100) == 3 * 100 * per
    with GGUFFile(write_tiny_gemma3(tmp_path / "g.gguf")) as f:
        g = spec_from_metadata(f.metadata, f.tensor_names)
    windows = [g.layer_window(i) for i in range(g.n_layers)]
    assert None in windows and any(w for w in windows)  # global and sliding layers
    positions = 50
    want = sum(positions if w is None else min(positions, w) for w in windows) * 2 * g.n_kv_heads * g.head_dim * 4
    assert context.kv_bytes_read(g, positions) == want
    # the specimen at 8,192 positions, float16 as llama.cpp keeps it: 32 blocks x 2 x 4096 x 2 bytes each
    assert context.kv_bytes_read(DEEPSEEK_CODER_6_7B, 8192, "F16") == 8192 * 32 * 2 * 4096 * 2


def test_contexts_are_capped_at_the_context_length_and_the_cache_budget(tmp_path):
    with GGUFFile(write_tiny_llama(tmp_path / "m.gguf", n_ctx=128)) as f:
        spec = spec_from_metadata(f.metadata, f.tensor_names)
    got, notes = context.contexts_for(spec, 5, [0, 16, 512, 2048])
    assert got == [0, 16, 123] and len(notes) == 2 and all("capped at 123" in n for n in notes)
    got, notes = context.contexts_for(spec, 5, [0, 16, 100], kv_budget=context.kv_bytes_read(spec, 21))
    assert got == [0, 16] and "over the sweep's" in notes[0]


def test_context_sweep_fills_the_cache_and_counts_kv_beside_the_weights(tiny, measured):
    s = measured["summary"]
    rows = s["decode_by_context"]
    assert [r["context"] for r in rows] == [0, 16, 124]  # 512 capped: 128 positions less 1 warm-up and 3 steps
    assert list(s["decode_tokens_per_s_by_context"]) == ["0", "16", "124"]
    with Model.from_gguf(tiny) as model:
        spec = model.spec
    for r in rows:
        assert r["weight_bytes_per_token"] == s["decode_bytes_per_token"]
        # timed steps read context + warm-up + 1 ... positions: the mean of their KV bytes
        reads = [context.kv_bytes_read(spec, r["context"] + 1 + i + 1) for i in range(r["steps"])]
        assert r["kv_bytes_per_token"] == round(sum(reads) / len(reads))
        assert r["bytes_per_token"] == r["weight_bytes_per_token"] + r["kv_bytes_per_token"]
        assert r["kv_share_of_bytes"] == pytest.approx(r["kv_bytes_per_token"] / r["bytes_per_token"])
        assert r["tokens_per_s"] == pytest.approx(1 / r["median_s"])
        assert r["gbps"] == pytest.approx(r["bytes_per_token"] * r["tokens_per_s"] / 1e9)
    assert rows[0]["kv_share_of_bytes"] < rows[-1]["kv_share_of_bytes"]


def test_fill_cache_puts_positions_that_the_next_step_attends_to(tiny):
    with Model.from_gguf(tiny) as model:
        cache = model.new_cache(40)
        context.fill_cache(cache, model.spec, 30, seed=1)
        assert cache.n == 30
        filled = model.forward([5], cache)  # a decode step on top of them, at position 30
        assert cache.n == 31 and np.isfinite(filled).all()
        again = model.new_cache(40)
        context.fill_cache(again, model.spec, 30, seed=1)
        np.testing.assert_array_equal(model.forward([5], again), filled)  # the seed decides the cache
        other = model.new_cache(40)
        context.fill_cache(other, model.spec, 30, seed=2)
        assert not np.allclose(model.forward([5], other), filled)  # the step read what was filled


# --- steps, peers, the streamed split and the Q8_0 product ----------------------------------


class Counter:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def step(self):
        self.log.append(self.name)
        return 1.0


def test_interleave_warms_up_then_takes_turns(monkeypatch):
    log = []
    monkeypatch.setattr(steps.time, "sleep", lambda s: log.append(f"({s})"))
    times = steps.interleave({"a": Counter(log, "a"), "b": Counter(log, "b")}, n_tokens=5, warmup=1, rounds=2)
    assert times == {"a": [1.0] * 5, "b": [1.0] * 5}
    # warm-ups, then turns of ceil(5/2) = 3 timed steps, each after a quiet pause (the other engine's
    # workers stop spinning) and one untimed step that settles the machine
    q = f"({steps.QUIET_S})"
    assert "".join(log) == "ab" + f"{q}aaaa{q}bbbb" + f"{q}aaa{q}bbb"
    log.clear()
    assert steps.interleave({"a": Counter(log, "a")}, n_tokens=3, warmup=2, rounds=2) == {"a": [1.0] * 3}
    assert "".join(log) == "a" * 5  # alone: nothing to settle
    log.clear()  # something measured at the same moments: before each round of turns, after the warm-ups
    steps.interleave({"a": Counter(log, "a"), "b": Counter(log, "b")}, 4, 1, 2, before_round=lambda: log.append("M"))
    assert "".join(log) == "ab" + f"M{q}aaa{q}bbb" + f"M{q}aaa{q}bbb"


def test_float32_copy_holds_the_projects_dequantized_weights_and_the_metadata(tiny, tmp_path):
    dst = tmp_path / "f32.gguf"
    written = peers.write_float32_copy(tiny, dst)
    with GGUFFile(tiny) as src, GGUFFile(dst) as out:
        assert written["tensors"] == len(src.tensors) == len(out.tensors)
        assert written["bytes"] == sum(4 * t.n_elements for t in src.tensors)
        for a, b in zip(src.tensors, out.tensors):
            assert (b.name, b.shape, b.type_name) == (a.name, a.shape, "F32")
            np.testing.assert_array_equal(out.load(b.name), src.load(a.name))  # bit for bit
        assert out.metadata["general.file_type"] == 0
        for key, value in src.metadata.items():
            if key not in ("general.file_type", "general.alignment"):
                assert out.metadata[key] == value and out.metadata_types[key] == src.metadata_types[key]


def test_float32_copy_is_refused_in_one_line_over_the_budget_or_the_disk(tmp_path):
    why = peers.float32_copy_refusal(27_000_000_000, 2000 << 20, tmp_path)
    assert why.startswith("the float32 copy (27.00 GB) is over the resident budget") and "\n" not in why
    assert peers.float32_copy_refusal(1000, 2000 << 20, tmp_path) is None
    why = peers.float32_copy_refusal(1 << 62, 1 << 63, tmp_path)
    assert "does not fit" in why and str(tmp_path) in why
    with pytest.raises(peers.TimingError, match="array of arrays"):  # the job turns it into a one-line skip
        peers._value_type("ARRAY[ARRAY]")
    assert peers._value_type("ARRAY[STRING]") == (peers.GGUFValueType.ARRAY, peers.GGUFValueType.STRING)


def test_streamed_split_clocks_the_weights_provider(tiny):
    prompt = [int(i) for i in steps.prompt_ids(64, 4)]
    split = streamed.streamed_split(tiny, prompt, n_tokens=3, warmup=1, noisy=0.5)
    assert split["tokens"] == 3 and 0 < split["dequant_median_s"] <= split["step_median_s"]
    assert split["rest_median_s"] == pytest.approx(split["step_median_s"] - split["dequant_median_s"])
    assert split["dequant_gbps"] == pytest.approx(split["file_bytes_per_token"] / split["dequant_median_s"] / 1e9)


def test_split_summary_names_what_bounds_the_step():
    s = streamed.split_summary([1.0, 1.0, 1.0], [0.8, 0.8, 0.8], 1_000_000_000, 4_000_000_000, 0.1)
    assert s["bound"] == "dequantization" and s["dequant_share"] == pytest.approx(0.8)
    assert s["dequant_gbps"] == pytest.approx(1.25) and s["rest_float32_gbps"] == pytest.approx(20.0)
    assert streamed.split_summary([1.0] * 3, [0.2] * 3, 1, 4, 0.1)["bound"] == "the products and the rest"


def test_q8_0_resident_form_multiplies_as_the_format_dequantizes():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 128), dtype=np.float32)
    raw = gguf_quantize(w, streamed.GGML_Q8_0)
    q, d = streamed.q8_0_resident(raw, w.shape)
    assert q.dtype == np.int8 and d.dtype == np.float32 and d.shape == (8, 4)
    x = rng.standard_normal(128, dtype=np.float32)
    want = gguf_dequantize(raw, streamed.GGML_Q8_0) @ x
    np.testing.assert_allclose(streamed.q8_0_reference(q, d, x), want, rtol=1e-5, atol=1e-5)
    y = np.empty(8, np.float32)
    product = streamed.Q8_0Product(8, 128, threads=2)
    try:
        np.testing.assert_allclose(product(q, d, x, y), want, rtol=1e-5, atol=1e-5)
    finally:
        product.close()


def test_q8_0_product_counts_the_resident_bytes():
    r = streamed.q8_0_product(SMALL_Q8, threads=2, repeats=3, warmup=1, noisy=0.5, seed=0)
    rows, cols = SMALL_Q8
    assert r["bytes_per_call"] == int(rows * cols * 1.125 + 4 * (rows + cols))
    assert r["gbps"] == pytest.approx(r["bytes_per_call"] / r["median_s"] / 1e9)
    assert 0 < r["int8_to_float32_median_s"] and r["int8_to_float32_share"] == pytest.approx(
        r["int8_to_float32_median_s"] / r["median_s"]
    )


def test_products_only_multiplies_every_matrix_of_a_step_in_order(tiny):
    with Model.from_gguf(tiny, mode="resident") as model:
        products = steps.ProductsOnly(model.weights, model.spec.n_layers)
        w = model.weights
        order = [m for b in w.blocks for m in (b.wqkv, b.wo, b.w_gate_up, b.w_down)] + [w.head]
        assert [m.ctypes.data for m in products.mats] == [m.ctypes.data for m in order]  # views, no copies
        assert products.nbytes == sum(m.nbytes for m in order) and products.step() > 0
        for m, y in zip(products.mats, products._y, strict=True):
            np.testing.assert_allclose(y[0], m.sum(axis=1), rtol=1e-5, atol=1e-6)  # each times a vector of ones

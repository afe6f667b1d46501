"""Lesson 7 (the hardware fit): weights under F16/Q8_0/Q4_K_M, KV cache, devices, the fit table, claims and
the notebook.

The Q4_K_M recipe is checked against real files: the tensor types of a Gemma 3 270M Q4_K_M GGUF listed in
/work/shared/notes/gemma3.md (which exercises the fallbacks and the tied head), and the size of TheBloke's
deepseek-coder-6.7b-instruct Q4_K_M file. Byte totals are checked against sums written out by hand.
Timing inputs are synthetic, so nothing asserts a speed of this machine.
"""

import csv
import json
import math
from pathlib import Path

import pytest
from workflow_helpers import run_notebook

from bytesup.gguf.extract import extract
from bytesup.lessons import LessonInputError, plain, read_metadata
from bytesup.lessons import hardware_fit as lesson
from bytesup.lessons.hardware_fit import catalog, figures, fit_table, storage
from bytesup.lessons.spec import parameter
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.timing import machine

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "workflow" / "notebooks" / "07_the_hardware_fit.ipynb"
GiB = 2**30


# --- the Q4_K_M recipe ---------------------------------------------------------------------------------


def gemma3_270m_tensors():
    """Gemma 3 270M's tensor table as gemma3.md describes it: d 640, FFN 2048, 18 blocks, 4 query heads and
    1 KV head of 256, vocabulary 262,144, tied head, q/k norms and post-norms in every block."""
    d, ff, heads, kv, hd, vocab = 640, 2048, 4, 1, 256, 262144
    out = [("token_embd.weight", (vocab, d))]
    for i in range(18):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (d,)),
            (b + "attn_q.weight", (heads * hd, d)),
            (b + "attn_k.weight", (kv * hd, d)),
            (b + "attn_v.weight", (kv * hd, d)),
            (b + "attn_q_norm.weight", (hd,)),
            (b + "attn_k_norm.weight", (hd,)),
            (b + "attn_output.weight", (d, heads * hd)),
            (b + "post_attention_norm.weight", (d,)),
            (b + "ffn_norm.weight", (d,)),
            (b + "ffn_gate.weight", (ff, d)),
            (b + "ffn_up.weight", (ff, d)),
            (b + "ffn_down.weight", (d, ff)),
            (b + "post_ffw_norm.weight", (d,)),
        ]
    out.append(("output_norm.weight", (d,)))
    return out


def test_q4_k_m_recipe_matches_a_real_gemma3_file():
    tensors = gemma3_270m_tensors()
    types = storage.q4_k_m_types(tensors, 4, 1)
    counts = {t: types.count(t) for t in set(types)}
    # gemma3.md: "F32 x109, Q8_0 x10 (token_embd among them), Q5_0 x81, Q4_K x27, Q6_K x9";
    # "Block 0: ffn_gate/ffn_up Q5_0, ffn_down Q6_K"
    assert counts == {"F32": 109, "Q8_0": 10, "Q5_0": 81, "Q4_K": 27, "Q6_K": 9}
    kind = dict(zip([n for n, _ in tensors], types))
    assert kind["token_embd.weight"] == "Q8_0"  # tied head, 640 not a multiple of 256
    assert (kind["blk.0.ffn_gate.weight"], kind["blk.0.ffn_up.weight"], kind["blk.0.ffn_down.weight"]) == (
        "Q5_0",
        "Q5_0",
        "Q6_K",
    )


def test_use_more_bits_layers():
    assert [i for i in range(32) if storage.use_more_bits(i, 32)] == [
        0,
        1,
        2,
        3,
        6,
        9,
        12,
        15,
        18,
        21,
        24,
        27,
        28,
        29,
        30,
        31,
    ]
    assert sum(storage.use_more_bits(i, 18) for i in range(18)) == 9


def test_llama3_8b_q4_k_m_by_hand():
    # 16 of 32 blocks get Q6_K for attn_v and ffn_down; Q4_K = 144 bytes / 256, Q6_K = 210 bytes / 256
    def q4(n):
        return n // 256 * 144

    def q6(n):
        return n // 256 * 210

    d, ff, kv, v = 4096, 14336, 1024, 128256
    block_q4 = q4(d * d) * 2 + q4(kv * d) + q4(ff * d) * 2  # q, o, k, gate, up
    want = q4(v * d) + q6(v * d) + 32 * block_q4 + 16 * (q6(kv * d) + q6(d * ff)) + 16 * (q4(kv * d) + q4(d * ff))
    want += (2 * 32 + 1) * d * 4  # norms, F32
    m = catalog.published_model(catalog.PUBLISHED_MODELS[1], "Q4_K_M")
    assert m["weights_bytes"] == want == 4_912_898_048
    assert m["tensor_types"] == "F32x65 Q4_Kx193 Q6_Kx33"
    # read per token: the embedding table only one row
    assert m["read_per_token_bytes"] == want - q4(v * d) + q4(v * d) // v


def test_70b_attn_v_gets_q5_k_and_405b_does_not():
    t70 = {n: t for n, _, t in storage.storage_types(configs.LLAMA3_70B, "Q4_K_M")}
    assert {t70[f"blk.{i}.attn_v.weight"] for i in range(80)} == {"Q5_K", "Q6_K"}
    assert {t70[f"blk.{i}.ffn_down.weight"] for i in range(80)} == {"Q4_K", "Q6_K"}
    t405 = {n: t for n, _, t in storage.storage_types(configs.LLAMA31_405B, "Q4_K_M")}
    assert {t405[f"blk.{i}.attn_v.weight"] for i in range(126)} == {"Q4_K", "Q6_K"}


def test_specimen_sizes_against_its_published_files():
    spec = catalog.PUBLISHED_MODELS[0]
    q8 = catalog.published_model(spec, "Q8_0")["weights_bytes"]
    q4km = catalog.published_model(spec, "Q4_K_M")["weights_bytes"]
    f16 = catalog.published_model(spec, "F16")["weights_bytes"]
    params = pc.count(configs.DEEPSEEK_CODER_6_7B)["total"]
    norms = (2 * 32 + 1) * 4096
    assert f16 == (params - norms) * 2 + norms * 4
    assert q8 == (params - norms) // 32 * 34 + norms * 4 == 7_162_576_896
    # TheBloke's files: Q8_0 7,163,879,648 bytes, Q4_K_M 4,083,015,904 bytes: the same header in both
    assert 7_163_879_648 - q8 == 4_083_015_904 - q4km == 1_302_752


def test_storage_refuses_unknown():
    with pytest.raises(ValueError, match="Q5_K_M"):
        storage.storage_types(configs.LLAMA3_8B, "Q5_K_M")


# --- KV cache, devices and the fit ------------------------------------------------------------------------


def tiny_inputs(tied=True, arch="llama"):
    meta = {
        "general.architecture": arch,
        "general.file_type": 7,
        f"{arch}.embedding_length": 64,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.block_count": 2,
        f"{arch}.context_length": 2048,
    }
    rows = [
        {"name": "token_embd.weight", "type": "Q8_0", "shape": "1000x64", "bytes": 1000 * 68, "elements": 64000},
        {"name": "blk.0.attn_q.weight", "type": "Q8_0", "shape": "64x64", "bytes": 64 * 68, "elements": 4096},
        {"name": "output_norm.weight", "type": "F32", "shape": "64", "bytes": 256, "elements": 64},
    ]
    if not tied:
        rows.append(
            {"name": "output.weight", "type": "Q8_0", "shape": "1000x64", "bytes": 1000 * 68, "elements": 64000}
        )
    return meta, rows


def summary(memory=8 * GiB, copy=20.0):
    return {
        "status": "measured",
        "stream_copy_gbps": copy,
        "machine": {"memory_bytes": memory, "cpu_model": "Test CPU"},
    }


def test_this_model_from_its_own_table():
    meta, rows = tiny_inputs(tied=True)
    m = catalog.this_model(meta, rows, "tiny")
    # tied: the token's row to embed it, then the whole table again as the output head
    assert m["read_per_token_bytes"] == m["weights_bytes"] + 68 == 68000 + 64 * 68 + 256 + 68
    assert m["kv_bytes_per_token"] == 2 * 2 * (16 + 16) * 2 and m["quant"] == "Q8_0" and m["max_context"] == 2048
    meta, rows = tiny_inputs(tied=False)
    m = catalog.this_model(meta, rows, "tiny")
    assert m["read_per_token_bytes"] == m["weights_bytes"] - 68000 + 68  # untied: one row of token_embd


def test_any_architecture_uses_its_own_table_and_kv_lengths():
    meta, rows = tiny_inputs(arch="gemma3")
    meta.update({"gemma3.attention.key_length": 256, "gemma3.attention.value_length": 256, "general.file_type": 15})
    meta.update({"gemma3.block_count": 6, "gemma3.attention.sliding_window": 512})  # layer 5 global, 0-4 sliding
    rows.append({"name": "blk.0.attn_q_norm.weight", "type": "F32", "shape": "256", "bytes": 1024, "elements": 256})
    m = catalog.this_model(meta, rows, "g")
    assert m["weights_bytes"] == sum(r["bytes"] for r in rows) and m["architecture"] == "gemma3"
    per_layer = 2 * (256 + 256) * 2  # 2 K/V heads of 256, F16
    assert m["kv_bytes_per_token"] == 6 * per_layer and m["quant"] == "Q4_K_M"
    assert (m["sliding_window"], m["kv_global_layers"]) == (512, 1)
    # the fit table counts the cache layer by layer: 2,048 tokens (the model's maximum) on the global layer,
    # the window's 512 on each of the five sliding ones; the ceiling reads that cache with the weights
    fit = fit_table.fit_rows([m], [catalog.Device("d", "d", 8 * GiB, 100.0, "")])
    r = fit_table.find_row(fit, "model", "32k", "d")
    assert r["context_tokens"] == 2048 and r["sliding_window"] == 512
    assert r["kv_cache_bytes"] == per_layer * (2048 + 5 * 512)
    assert r["ceiling_tps"] == pytest.approx(100e9 / (m["read_per_token_bytes"] + per_layer * (2048 + 5 * 512)))
    # a gemma3 file without a window key: every layer keeps every position, as llama.cpp reads it
    no_window = catalog.this_model({k: v for k, v in meta.items() if k != "gemma3.attention.sliding_window"}, rows)
    assert (no_window["sliding_window"], no_window["kv_global_layers"]) == (None, 6)
    del meta["gemma3.block_count"]
    with pytest.raises(LessonInputError, match="gemma3.block_count"):
        catalog.this_model(meta, rows)
    with pytest.raises(LessonInputError, match="tensors.csv"):
        catalog.this_model(meta, [])


def test_fit_rows_by_hand():
    meta, rows = tiny_inputs(tied=False)
    metrics, t = lesson.run(meta, rows, timing_summary=summary(), gpu_summary={"status": "skipped"}, model="tiny")
    fit = t["fit"]
    devices = [d.key for d in t["devices"]]
    assert devices == ["this_machine", "laptop_16gb", "dgx_spark", "h100_sxm", "h200"]
    assert len(fit) == 13 * 3 * 5
    # Llama-3-8B Q8_0 at 128k: capped at 8,192 tokens
    r = fit_table.find_row(fit, "llama3_8b_q8_0", "128k", "this_machine")
    kv = 2 * 32 * 8 * 128 * 2 * 8192
    weights = metrics["llama3_8b_q8_0_weights_bytes"]
    assert (r["context_tokens"], r["context_capped"], r["kv_cache_bytes"]) == (8192, True, kv)
    assert r["total_bytes"] == weights + kv and r["fits"] == (weights + kv <= 8 * GiB)
    assert r["left_bytes"] == 8 * GiB - weights - kv
    assert r["ceiling_tps"] == pytest.approx(20e9 / (metrics["llama3_8b_q8_0_read_per_token_bytes"] + kv), rel=1e-12)
    # Llama-3.1-405B is published with 128k context: not capped
    r = fit_table.find_row(fit, "llama31_405b_q4_k_m", "128k", "h200")
    assert (r["context_tokens"], r["context_capped"], r["fits"]) == (131072, False, False)
    # this model, capped at its 2,048-token context, and the counts
    assert metrics["model_4k_fits_this_machine"] is True
    assert metrics["model_4k_ceiling_dgx_spark_tps"] == pytest.approx(
        273e9 / (metrics["model_read_per_token_bytes"] + metrics["model_kv_bytes_per_token"] * 2048), rel=1e-12
    )
    at4k = [x for x in fit if x["device"] == "this_machine" and x["context"] == "4k" and x["model_key"] != "model"]
    assert metrics["fits_this_machine_4k_count"] == sum(x["total_bytes"] <= 8 * GiB for x in at4k)
    assert metrics["gpu_status"] == "no GPU on this run"


def test_model_context_is_capped_at_its_own_maximum():
    meta, rows = tiny_inputs()
    _, t = lesson.run(meta, rows, timing_summary=summary())
    r = fit_table.find_row(t["fit"], "model", "4k", "this_machine")
    assert (r["context_tokens"], r["context_capped"]) == (2048, True)


def test_without_timing_this_machine_is_unknown_and_a_measured_gpu_is_listed():
    meta, rows = tiny_inputs()
    gpu = {"status": "measured", "stream_copy_gbps": 3000.0, "machine": {"name": "Test GPU", "memory_bytes": 40 * GiB}}
    metrics, t = lesson.run(meta, rows, timing_summary=None, gpu_summary=gpu)
    assert [d.key for d in t["devices"]][:2] == ["this_machine", "gpu"]
    mine = [r for r in t["fit"] if r["device"] == "this_machine"]
    assert {r["fits"] for r in mine} == {None} and {r["ceiling_tps"] for r in mine} == {None}
    assert metrics["fits_this_machine_4k_count"] is None and metrics["gpu_status"] == "measured"
    r = fit_table.find_row(t["fit"], "llama3_70b_q4_k_m", "4k", "gpu")
    assert r["fits"] is False and r["device_memory_bytes"] == 40 * GiB


def test_claims_reproduce_on_any_model():
    meta, rows = tiny_inputs()
    metrics = lesson.compute(meta, rows, timing_summary=summary())
    results = lesson.evaluate_claims(metrics, model="tiny", metadata=meta)
    assert len(results) == 4 and {r.status for r in results} == {"reproduced"}
    assert {r.claim.metric for r in results} <= set(metrics)
    assert metrics["dgx_spark_bandwidth_gbps"] == 273.0 and metrics["dgx_spark_memory_bytes"] == 128 * GiB


def test_figure_is_a_png(tmp_path):
    from bytesup.lessons import save_figure

    meta, rows = tiny_inputs()
    _, t = lesson.run(meta, rows, timing_summary=summary())
    path = save_figure(figures.plot_what_fits_where(t["fit"], "4k", title="t"), tmp_path / "f.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- the notebook -------------------------------------------------------------------------------------------


@pytest.mark.slow  # the default model: CI (make test-slow)
def test_notebook_on_the_default_model(tmp_path, default_gguf):
    """papermill from workflow/notebooks/ of a project with a finished extract and CPU timing (no GPU file):
    every output where its parameter says, the metrics checked against gguf-py's tensor table and by hand."""
    pytest.importorskip("papermill")
    from gguf import GGUFReader

    (tmp_path / "Snakefile").write_text("# project root marker\n")
    base = tmp_path / "results" / "smollm2-135m" / "gguf"
    extract(default_gguf, base, ["output_norm.weight"])
    cpu = tmp_path / "results" / "timing" / "smollm2-135m" / "cpu"
    cpu.mkdir(parents=True)
    memory = machine.memory_bytes()
    (cpu / "summary.json").write_text(json.dumps(summary(memory=memory, copy=12.5)))
    nb_dir = tmp_path / "workflow" / "notebooks"
    nb_dir.mkdir(parents=True)
    out = tmp_path / "out"
    outputs = {parameter(name): out / f"x_{name}" for name in lesson.SPEC.files}
    run_notebook(NOTEBOOK, tmp_path / "executed.ipynb", cwd=nb_dir, **outputs)
    assert sorted(p.name for p in out.iterdir()) == sorted(f"x_{name}" for name in lesson.SPEC.files)
    got = json.loads((out / "x_metrics.json").read_text())

    # independently: gguf-py's own tensor table and the metadata's sizes
    reader = GGUFReader(str(default_gguf))
    weights = sum(int(t.n_bytes) for t in reader.tensors)
    assert got["model_weights_bytes"] == weights
    # SmolLM2 is tied: the token's embedding row, then the whole table again as the output head
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert got["model_read_per_token_bytes"] == weights + int(embd.n_bytes) // int(embd.shape[1])
    kv = 30 * 3 * 64 * 2 * 2  # blocks x KV heads x (key + value length) x F16
    assert got["model_kv_bytes_per_token"] == kv and got["model_quant"] == "Q4_1" and got["model_max_context"] == 8192
    total = weights + kv * 4096
    assert got["model_4k_total_bytes"] == total and got["model_4k_left_this_machine_bytes"] == memory - total
    assert got["model_4k_fits_this_machine"] is True
    read = got["model_read_per_token_bytes"] + kv * 4096  # a token reads the weights once and the whole cache
    assert got["model_4k_ceiling_this_machine_tps"] == pytest.approx(12.5e9 / read, rel=1e-12)
    assert got["deepseek_coder_6_7b_q8_0_weights_bytes"] == 7_162_576_896
    spec_total = 7_162_576_896 + 2 * 32 * 32 * 128 * 2 * 4096
    assert got["deepseek_coder_6_7b_q8_0_4k_fits_this_machine"] == (spec_total <= memory)
    assert got["this_machine_memory_bytes"] == memory and got["gpu_status"].startswith("no GPU on this run")
    assert got["is_specimen"] is False and got["model"] == "smollm2-135m"
    want = plain(
        lesson.compute(
            read_metadata(base / "metadata.json"),
            pc.read_tensor_table(base / "tensors.csv"),
            timing_summary=summary(memory=memory, copy=12.5),
            model="smollm2-135m",
        )
    )
    for key, value in want.items():
        assert got[key] == (pytest.approx(value, rel=1e-12) if isinstance(value, float) else value), key

    with (out / "x_fit_table.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(fit_table.FIT_COLUMNS) and len(rows) == 13 * 3 * 5
    mine = next(r for r in rows if r["model_key"] == "model" and r["context"] == "4k" and r["device"] == "this_machine")
    assert int(mine["total_bytes"]) == total and mine["fits"] == "True"
    with (out / "x_claims.csv").open(encoding="utf-8") as f:
        assert {r["status"] for r in csv.DictReader(f)} == {"reproduced"}
    with (out / "x_devices.csv").open(encoding="utf-8") as f:
        assert [r["device"] for r in csv.DictReader(f)] == [
            "this_machine",
            "laptop_16gb",
            "dgx_spark",
            "h100_sxm",
            "h200",
        ]
    assert (out / "x_what_fits_where.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code = "\n".join(
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"
    )
    for step in (
        "type_bytes(kind, math.prod(shape))",
        "storage.q4_k_m_types(",
        "2 * spec8.n_layers * spec8.n_kv_heads",
        "ceiling = 273e9 / read",
    ):
        assert step in code, step
    assert math.isfinite(got["deepseek_coder_6_7b_q8_0_4k_ceiling_dgx_spark_tps"])

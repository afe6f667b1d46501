"""Lesson 3 on a small deterministic synthetic model, checked against an independent float64 version."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from bytesup.lessons import LessonInputError, TensorFiles, claims, metadata_values, plain, read_metadata, write_metrics
from bytesup.lessons import ffn_by_hand as lesson
from bytesup.lessons.ffn_by_hand import across, cost, figures
from bytesup.lessons.ffn_walk import recipe
from bytesup.timing.results import read_timing

N_EMBD, N_FF, VOCAB = 32, 80, ["<|endoftext|>", "a", "Ġthe", "Ġcat", "Ġdog", "cat"]
REQUIRED = [
    "token_id",
    "x_rms",
    "x_length",
    "gate_first",
    "gate_first_naive",
    "gate_negative_fraction",
    "silu_abs_below_0_1_fraction",
    "silu_abs_below_0_01_fraction",
    "out_length",
    "cosine_x_y",
    "angle_deg",
]


def synthetic(arch="llama", seed=7):
    rng = np.random.default_rng(seed)
    meta = {
        "general.architecture": arch,
        "general.name": "tiny test model",
        f"{arch}.embedding_length": N_EMBD,
        f"{arch}.feed_forward_length": N_FF,
        f"{arch}.block_count": 2,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": VOCAB,
    }
    f32 = np.float32
    tensors = {
        "token_embd.weight": (rng.standard_normal((len(VOCAB), N_EMBD)) * 0.1).astype(f32),
        "blk.0.ffn_norm.weight": rng.uniform(0.5, 1.5, N_EMBD).astype(f32),
        "blk.0.ffn_gate.weight": (rng.standard_normal((N_FF, N_EMBD)) * 0.3).astype(f32),
        "blk.0.ffn_up.weight": (rng.standard_normal((N_FF, N_EMBD)) * 0.3).astype(f32),
        "blk.0.ffn_down.weight": (rng.standard_normal((N_EMBD, N_FF)) * 0.2).astype(f32),
    }
    return meta, tensors


def write_inputs(folder: Path, meta, tensors):
    """The extract stage's layout: metadata.json, extract.json, tensors/<name>.npy."""
    (folder / "tensors").mkdir(parents=True)
    doc = {"format": "bytesup.metadata/1", "gguf": {}, "metadata": meta, "types": {}}
    (folder / "metadata.json").write_text(json.dumps(doc))
    index = {"tensors": {}}
    for name, arr in tensors.items():
        np.save(folder / "tensors" / f"{name}.npy", arr)
        index["tensors"][name] = {"file": f"tensors/{name}.npy", "type": "F32", "shape": list(arr.shape)}
    (folder / "extract.json").write_text(json.dumps(index))


def reference(meta, tensors, row):
    """Independent float64 version of the walk, written without bytesup."""
    t = {k: np.asarray(v, dtype=np.float64) for k, v in tensors.items()}
    arch = meta["general.architecture"]
    eps = float(meta[f"{arch}.attention.layer_norm_rms_epsilon"])
    x = t["token_embd.weight"][row]
    xn = x / np.sqrt(np.mean(x**2) + eps) * t["blk.0.ffn_norm.weight"]
    g = t["blk.0.ffn_gate.weight"] @ xn
    u = t["blk.0.ffn_up.weight"] @ xn
    s = g / (1 + np.exp(-g))
    out = t["blk.0.ffn_down.weight"] @ (s * u)
    y = x + out
    cos = x @ y / np.sqrt(x @ x) / np.sqrt(y @ y)
    return {
        "x_mean_square": np.mean(x**2),
        "x_rms": np.sqrt(np.mean(x**2)),
        "x_length": np.sqrt(x @ x),
        "gate_first": g[0],
        "gate_first_naive": g[0],
        "out_length": np.sqrt(out @ out),
        "y_length": np.sqrt(y @ y),
        "cosine_x_y": cos,
        "angle_deg": np.degrees(np.arccos(cos)),
        "gate_negative_fraction": np.mean(g < 0),
        "silu_abs_below_0_1_fraction": np.mean(np.abs(s) < 0.1),
        "silu_abs_below_0_01_fraction": np.mean(np.abs(s) < 0.01),
        "gate_min": g.min(),
        "gate_max": g.max(),
        "x_first3": x[:3],
        "x_first3_squared": x[:3] ** 2,
    }


def test_compute_matches_an_independent_float64_walk():
    meta, tensors = synthetic()
    m = lesson.compute(meta, tensors, " cat")
    assert all(k in m for k in REQUIRED)
    assert m["token_id"] == 3 and m["token_vocab_form"] == "Ġcat"
    for key, want in reference(meta, tensors, 3).items():
        np.testing.assert_allclose(np.asarray(m[key], dtype=np.float64), want, rtol=1e-5, atol=0, err_msg=key)
    wk = lesson.walk(meta, tensors, " cat")
    # the loop sums in 64-bit floats over the float32 xn: the exact dot of those inputs
    exact = tensors["blk.0.ffn_gate.weight"][0].astype(np.float64) @ wk.trace.xn.astype(np.float64)
    assert m["gate_first_naive"] == pytest.approx(exact, rel=1e-14)
    assert m["gate_first_naive_abs_diff"] < 1e-6
    assert m["gate_linearity_max_abs_diff"] == 0.0  # W(2x) == 2Wx bit for bit
    assert m["gate_additivity_max_rel_diff"] < 1e-5
    assert m["x_rms_after_dividing"] == pytest.approx(1.0, abs=1e-6)
    assert 0 < m["gate_negative_fraction"] < 1
    # float32 throughout, as the model computes
    assert wk.x.dtype == np.float32 and all(a.dtype == np.float32 for a in wk.trace)


def test_dims_are_read_with_the_architecture_prefix():
    meta, tensors = synthetic(arch="qwen2")
    d = lesson.dims(meta)
    assert (d["architecture"], d["embedding_length"], d["feed_forward_length"]) == ("qwen2", 32, 80)
    assert d["block_count"] == 2
    assert (d["head_count"], d["head_count_kv"], d["head_dim"], d["rms_epsilon"]) == (4, 2, 8, 1e-5)
    del meta["qwen2.attention.head_count_kv"]
    assert lesson.dims(meta)["head_count_kv"] == 4  # absent: as many as query heads
    del meta["qwen2.feed_forward_length"]
    with pytest.raises(LessonInputError, match="qwen2.feed_forward_length"):
        lesson.dims(meta)


def test_toys_and_course_arithmetic():
    m = lesson.compute(*synthetic())
    assert (m["toy_dot"], m["toy_length"], m["toy_rms"], m["toy_mean"], m["toy_mean_pair"]) == (24, 5, 3, 1.5, 0)
    assert m["toy_cosine"] == pytest.approx(0.96) and round(m["toy_angle_deg"]) == 16
    assert plain(m["toy_matvec"]) == [7.0, -1.0] and m["toy_matvec_naive"] == [7.0, -1.0]
    assert m["silu_min"] == pytest.approx(-0.2784645, abs=1e-7)
    assert m["silu_argmin"] == pytest.approx(-1.27846, abs=1e-5)
    assert m["course_length_from_rms"] == pytest.approx(10.9312)
    assert m["course_ffn_gate_fp32_mb"] == pytest.approx(180.355072)


def test_flops_table_for_the_course_config_and_this_model():
    course = cost.flops_metrics(cost.flops_per_token(cost.COURSE_DIMS), cost.COURSE_DIMS)
    # 4 attention projections 4096x4096 + 3 FFN matrices 4096x11008, at 2 FLOPs per weight
    assert course["flops_matvec_per_token_block"] == 2 * (4 * 4096 * 4096 + 3 * 4096 * 11008) == 404_750_336
    assert course["flops_elementwise_per_token_block"] == 4 * 4096 * 2 + 4096 * 2 + 5 * 11008
    m = lesson.compute(*synthetic())
    # this model: q/o 32x32, k/v 16x32 (2 of 4 heads), FFN 3 x 80x32
    assert m["flops_matvec_per_token_block"] == 2 * (2 * 32 * 32 + 2 * 16 * 32 + 3 * 80 * 32)
    assert m["course_flops_matvec_per_token_block"] == 404_750_336
    rows = cost.flops_table(lesson.dims(synthetic()[0]))
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert {r["step"]: r["rows"] for r in rows}["attn_k"] == 16


def test_timing_is_read_not_invented(tmp_path):
    summary = {"matvec_cold_gbps": 11.0, "cpu": "Some x86 CPU"}
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("n,median_s,gflops\n256,0.4,1\n1,0.02,2\n")  # no gbps, no time_over_n1
    s, rows, notes = read_timing(None, sweep)
    assert notes == ["timing summary not found: None"] and len(rows) == 2
    table, m = cost.matvec_vs_matmul(summary, rows, notes)
    assert [r["n"] for r in table] == [1, 256]
    assert table[1]["time_over_n1"] == pytest.approx(20.0) and table[0]["gbps"] is None
    assert m["timing_matmul_ratio_256_over_1"] == pytest.approx(20.0) and m["timing_ratio_source"] == "sweep.csv"
    assert m["timing_matvec_cold_gbps"] == 11.0 and m["timing_stream_copy_gbps"] is None
    assert "sweep.csv column 'gbps'" in m["timing_missing"]
    assert "summary.json key 'stream_copy_gbps'" in m["timing_missing"]
    assert "sweep.csv column 'time_over_n1' (worked out from median_s)" in m["timing_missing"]
    assert m["timing_course_machine"] is False
    spark = {"machine": {"cpu_model": "NVIDIA GB10"}, "weights": {"what": "GB10 elsewhere is ignored"}}
    assert cost.matvec_vs_matmul(spark, [])[1]["timing_course_machine"] is True
    assert cost.matvec_vs_matmul({"weights": {"what": "a GB10 note"}}, [])[1]["timing_course_machine"] is False
    # the timing stage's own columns are passed through, and its time_over_n1 is used as written
    sweep.write_text(
        "op,n,rows,cols,weight_bytes,median_s,gbps,gflops,time_over_n1,noisy\n"
        "matvec,1,8,4,128,0.01,1,2,1.0,True\nmatmul,256,8,4,128,0.5,1,2,49.0,False\n"
    )
    table, m = cost.matvec_vs_matmul({}, read_timing(None, sweep)[1])
    assert [(r["op"], r["time_over_n1"], r["noisy"], r["weight_bytes"]) for r in table] == [
        ("matvec", 1.0, True, 128),
        ("matmul", 49.0, False, 128),
    ]
    assert m["timing_matmul_ratio_256_over_1"] == 49.0 and m["timing_weight_mb"] == 128e-6
    _, m = cost.matvec_vs_matmul({"matmul_ratio_256_over_1": 21.0}, rows)
    assert m["timing_matmul_ratio_256_over_1"] == 21.0 and m["timing_ratio_source"] == "summary.json"
    _, m = cost.matvec_vs_matmul({}, [])
    assert m["timing_matmul_ratio_256_over_1"] is None and m["timing_ratio_source"] == "missing"


def test_every_claim_has_a_metric_and_the_right_verdict():
    meta, tensors = synthetic()
    m = lesson.compute(meta, tensors, timing_summary={"matmul_ratio_256_over_1": 5.0})
    results = lesson.evaluate_claims(m, model="tiny", metadata=meta)
    metrics_used = {r.claim.metric for r in results}
    assert metrics_used <= set(m), metrics_used - set(m)
    for r in results:
        if r.claim.requires:
            assert r.status == "specimen differs", r.claim.claim_id
        else:
            assert r.status == "reproduced", (r.claim.claim_id, r.measured)
    assert next(r for r in results if r.claim.metric == "x_rms").measured == pytest.approx(m["x_rms"])


def test_bad_inputs_say_what_is_wrong():
    meta, tensors = synthetic()
    with pytest.raises(KeyError, match="' mouse'"):
        lesson.compute(meta, tensors, " mouse")
    bad = {**tensors, "blk.0.ffn_gate.weight": tensors["blk.0.ffn_gate.weight"].T}
    with pytest.raises(LessonInputError, match=r"ffn_gate.*\(80, 32\)"):
        lesson.compute(meta, bad)
    del tensors["blk.0.ffn_up.weight"]
    with pytest.raises(LessonInputError, match="ffn_up"):
        lesson.compute(meta, tensors)


def test_missing_extracted_tensor_is_named(tmp_path):
    meta, tensors = synthetic()
    del tensors["blk.0.ffn_down.weight"]
    write_inputs(tmp_path / "gguf", meta, tensors)
    with pytest.raises(LessonInputError, match="'blk.0.ffn_down.weight' missing"):
        lesson.compute(meta, TensorFiles(tmp_path / "gguf" / "extract.json"))


def test_tensor_files_and_metrics_json(tmp_path):
    meta, tensors = synthetic()
    write_inputs(tmp_path / "gguf", meta, tensors)
    assert read_metadata(tmp_path / "gguf" / "metadata.json") == meta
    assert metadata_values(meta) == meta  # a flat mapping is accepted as it is
    files = TensorFiles(tmp_path / "gguf" / "extract.json")
    assert set(files) == set(tensors) and len(files) == 5
    np.testing.assert_array_equal(files["blk.0.ffn_gate.weight"], tensors["blk.0.ffn_gate.weight"])
    with pytest.raises(LessonInputError, match="attn_q"):
        files["blk.0.attn_q.weight"]
    assert "blk.0.attn_q.weight" not in files and files.get("blk.0.attn_q.weight") is None
    assert "blk.0.ffn_up.weight" in files
    m = lesson.compute(meta, files)
    p1 = write_metrics(m, tmp_path / "a.json")
    p2 = write_metrics(lesson.compute(meta, files), tmp_path / "b.json")
    assert p1.read_bytes() == p2.read_bytes()
    loaded = json.loads(p1.read_text())
    assert list(loaded) == sorted(loaded) and isinstance(loaded["x_rms"], float)


NOTEBOOK = Path(__file__).resolve().parents[1] / "workflow" / "notebooks" / "03_ffn_by_hand.ipynb"


def test_the_notebook_does_each_step_in_its_cells_on_the_real_arrays():
    code = "\n".join(
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"
    )
    for step in (
        "row = np.array(W_embd[token_id]",
        "xn = rms_norm(x, w_ffn_norm, eps)",
        "g = W_gate @ xn",
        "u = W_up @ xn",
        "h = act(g) * u",
        "down = W_down @ h",
        "y = x + out",
    ):
        assert step in code, step
    assert "matplotlib.use" not in code


@pytest.mark.slow  # a whole notebook again: make test runs every notebook once (test_notebooks)
def test_the_notebook_on_the_tiny_run_computes_what_the_package_does(standalone, finished_tiny):
    """The shared standalone run (tests/test_notebooks.py checks what every lesson's must do)."""
    out = standalone(lesson.SPEC.id)
    base = finished_tiny / "results" / "tiny" / "gguf"
    meta = read_metadata(base / "metadata.json")
    got = json.loads((out / "x_metrics.json").read_text())
    want = plain(lesson.compute(meta, TensorFiles(base / "extract.json")))
    for key in REQUIRED + ["x_first3", "flops_total_per_token_block", "x_mean_square", "xn_rms", "y_length"]:
        assert got[key] == want[key], key
    assert got["is_specimen"] is False and got["model"] == "tiny" and got["timing_missing"] == []
    with (out / "x_claims.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(claims.COLUMNS)
    assert {r["status"] for r in rows} <= {"reproduced", "specimen differs"}
    with (out / "x_matvec_vs_matmul.csv").open() as f:
        assert list(csv.DictReader(f).fieldnames) == list(cost.TABLE_COLUMNS)
    with (out / "x_flops_per_token.csv").open() as f:
        assert [r["step"] for r in csv.DictReader(f)] == [r["step"] for r in cost.flops_table(lesson.dims(meta))]
    # beyond one token and one block: the vocabulary sample and the forward pass, block by block
    for key in ("vocab_angle_deg_median", "pass_later_ffn_angle_deg_median", "pass_residual_end_median"):
        assert got[key] is not None, key
    with (out / "x_across_blocks.csv").open(encoding="utf-8") as f:
        assert [int(r["block"]) for r in csv.DictReader(f)] == list(range(meta["llama.block_count"]))


def test_on_a_tiny_gguf_through_the_extract_stage(tmp_path):
    """The real pipeline pieces: synthetic GGUF -> extract -> compute, checked in float64 on the same arrays."""
    synthetic_mod = pytest.importorskip("bytesup.model.synthetic")
    extract_mod = pytest.importorskip("bytesup.gguf.extract")
    gguf_path = synthetic_mod.write_tiny_llama(tmp_path / "tiny.gguf")
    extract_mod.extract(gguf_path, tmp_path / "gguf", lesson.tensor_names())
    meta = read_metadata(tmp_path / "gguf" / "metadata.json")
    tensors = TensorFiles(tmp_path / "gguf" / "extract.json")
    m = lesson.compute(meta, tensors)
    row = m["token_id"]
    assert meta["tokenizer.ggml.tokens"][row] == "Ġcat"
    want = reference(meta, {k: tensors[k] for k in lesson.tensor_names()}, row)
    for key in ["x_rms", "x_length", "gate_first", "out_length", "cosine_x_y", "angle_deg"]:
        np.testing.assert_allclose(float(m[key]), want[key], rtol=1e-5, err_msg=key)
    results = lesson.evaluate_claims(m, model="tiny", metadata=meta)
    assert "not reproduced" not in {r.status for r in results}


# --- Gemma 3: the walk follows the model's recipe (issue 13) -------------------------------------


def gemma_extract(gguf_path, folder):
    from bytesup.gguf.extract import extract

    extract(gguf_path, folder, list(lesson.SPEC.tensors))
    return read_metadata(folder / "metadata.json"), TensorFiles(folder / "extract.json")


# Lesson 3's float32 walk against reference_gemma's float64 one, measured: every length, RMS and cosine
# within 1.2e-7 of itself on the tiny file and 6.7e-8 on Gemma 3 270M; gate_first, one 640-term dot
# product, within 7.5e-7 there; the angle within 2e-5 degrees. Without the RMSNorm epsilon (1e-6) the
# tiny file's out_length moves by 1.4e-6, the real model's xn_rms by 4.4e-7 and down_length by 8.5e-7.
WALK_REL = {"gate_first": 2.5e-6}
WALK_REL_DEFAULT, ANGLE_ABS_DEG = 3e-7, 1e-5


def check_against_reference(m, want, angle_abs_deg=ANGLE_ABS_DEG):
    """Lesson 3's float32 metrics against reference_gemma's float64 ones."""
    assert m["token_id"] == want["token_id"] and m["activation"] == "gelu_tanh" and m["post_ffn_norm"] is True
    assert m["embedding_scale"] == pytest.approx(want["embedding_scale"], rel=1e-12)
    np.testing.assert_allclose(plain(m["x_first3"]), want["x_first3"], rtol=2e-7)
    for key in ("x_rms", "x_length", "xn_rms", "gate_first", "down_length", "out_length", "y_length", "cosine_x_y"):
        assert float(m[key]) == pytest.approx(want[key], rel=WALK_REL.get(key, WALK_REL_DEFAULT), abs=0), key
    assert float(m["angle_deg"]) == pytest.approx(want["angle_deg"], abs=angle_abs_deg)
    n = len(want["h"])
    for key in ("gate_negative_fraction", "act_abs_below_0_1_fraction", "act_abs_below_0_01_fraction"):
        assert float(m[key]) == pytest.approx(want[key], abs=2.5 / n), key  # float32 may flip a value at a threshold
    assert not any(k.startswith("silu_abs") for k in m)  # no SiLU-named numbers for a GELU model


def test_gemma3_walk_follows_its_recipe_on_a_tiny_file(tmp_path):
    """A tiny Gemma 3 file (bytesup.model.synthetic): scaled embedding, GELU-tanh gate, post_ffw_norm, residual,
    against the float64 recomputation in tests/reference_gemma.py (gguf-py only)."""
    from reference_gemma import lesson3_reference

    from bytesup.model.synthetic import write_tiny_gemma3

    gguf = write_tiny_gemma3(tmp_path / "g.gguf")
    meta, tensors = gemma_extract(gguf, tmp_path / "gguf")
    m = lesson.compute(meta, tensors, " cat")
    check_against_reference(m, lesson3_reference(gguf, " cat"))
    assert m["embedding_scale"] == pytest.approx(32**0.5) and m["recipe"].startswith("gemma3: embedding x sqrt")
    # the FLOPs table has Gemma's extra steps, its activation, and the course's llama numbers only where the steps match
    rows = cost.flops_table(lesson.dims(meta), recipe(meta), qk_norm=True)
    steps = [r["step"] for r in rows]
    assert "GELU-tanh" in steps and "SiLU" not in steps and "post_ffw_norm (RMSNorm)" in steps
    assert next(r for r in rows if r["step"] == "GELU-tanh")["flops"] == 8 * 64
    assert next(r for r in rows if r["step"] == "GELU-tanh")["course_flops"] == 4 * 11008  # the specimen's SiLU
    assert next(r for r in rows if r["step"] == "post_ffw_norm (RMSNorm)")["course_flops"] is None
    assert m["flops_total_per_token_block"] == sum(r["flops"] for r in rows)
    # the llama keys are unchanged for a llama model, and both families agree there
    lm = lesson.compute(*synthetic())
    assert lm["silu_abs_below_0_1_fraction"] == lm["act_abs_below_0_1_fraction"] and lm["activation"] == "silu"
    assert lm["embedding_scale"] == 1.0 and lm["post_ffn_norm"] is False and lm["down_length"] == lm["out_length"]
    # without its post_ffw_norm the walk cannot follow Gemma, and says which tensor is missing
    partial = {k: tensors[k] for k in tensors if "post_ffw_norm" not in k}
    with pytest.raises(LessonInputError, match="'blk.0.post_ffw_norm.weight' missing"):
        lesson.compute(meta, partial)


def test_gemma2_walk_is_gemma3s_ffn_on_a_tiny_file(tmp_path):
    """Gemma 2's FFN is Gemma 3's (scaled embedding, GELU-tanh, post_ffw_norm): the same float64 reference."""
    from reference_gemma import lesson3_reference
    from tiny_rows import write_row

    gguf = write_row("gemma2", tmp_path)
    meta, tensors = gemma_extract(gguf, tmp_path / "gguf")
    m = lesson.compute(meta, tensors, " cat")
    # measured: the angle 2.0e-5 degrees off (its cosine within 3e-7, which allows 4.5e-5 degrees at 21 degrees)
    check_against_reference(m, lesson3_reference(gguf, " cat"), angle_abs_deg=4e-5)
    assert m["recipe"].startswith("gemma2: embedding x sqrt") and m["post_ffn_norm"] is True


def test_spec_follows_the_architecture_table_and_refuses_the_rest():
    from bytesup.model.arch import ARCHITECTURES

    # every row but those storing gate and up as one tensor (phi3), derived from the table
    assert lesson.SPEC.architectures == tuple(a for a, f in ARCHITECTURES.items() if not f.gate_up_fused)
    assert "gemma3" in lesson.SPEC.architectures and "gemma2" in lesson.SPEC.architectures
    assert "phi3" in ARCHITECTURES and lesson.SPEC.refusal("phi3").startswith("it follows llama, qwen2, qwen3,")
    meta, tensors = synthetic(arch="phi3")
    with pytest.raises(LessonInputError, match=r"^metadata.json: phi3 stores the FFN's gate and up as one tensor"):
        lesson.compute(meta, tensors)
    meta, tensors = synthetic(arch="mamba")
    with pytest.raises(
        LessonInputError, match=r"^metadata.json: architecture 'mamba' is not in the architecture table"
    ):
        lesson.compute(meta, tensors)


@pytest.mark.slow  # extracts Gemma 3 270M's 262,144-row embedding table (671 MB as float32)
def test_gemma3_270m_walk_matches_the_independent_float64_recipe(tmp_path, gemma_gguf):
    from reference_gemma import lesson3_reference

    meta, tensors = gemma_extract(gemma_gguf, tmp_path / "gguf")
    m = lesson.compute(meta, tensors, " cat")
    want = lesson3_reference(gemma_gguf, " cat")
    check_against_reference(m, want)
    # the real Gemma block, not the llama recipe on Gemma's weights (which turned " cat" by 111 degrees)
    assert m["token_id"] == 5866 and round(float(m["angle_deg"]), 1) == 73.2
    assert round(100 * float(m["act_abs_below_0_01_fraction"])) == 41


def test_paths_resolve_against_the_project_root(tmp_path, monkeypatch):
    from bytesup.run import paths

    (tmp_path / "Snakefile").write_text("")
    deep = tmp_path / "workflow" / "notebooks"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert paths.project_root() == tmp_path.resolve()
    assert paths.resolve("results/x.json") == tmp_path.resolve() / "results" / "x.json"
    assert paths.resolve("/abs/x.json") == Path("/abs/x.json")
    with pytest.raises(paths.ProjectRootNotFound, match="Snakefile"):
        paths.project_root("/")


# --- beyond one token and one block (across.py) -----------------------------------------------------


def tiny_gguf_inputs(tmp_path, writer="llama"):
    from bytesup.gguf.extract import extract
    from bytesup.model.synthetic import write_tiny_gemma3, write_tiny_llama

    gguf = (write_tiny_llama if writer == "llama" else write_tiny_gemma3)(tmp_path / f"{writer}.gguf")
    extract(gguf, tmp_path / "gguf", list(lesson.SPEC.tensors))
    return gguf, read_metadata(tmp_path / "gguf" / "metadata.json"), TensorFiles(tmp_path / "gguf" / "extract.json")


@pytest.mark.parametrize("writer", ["llama", "gemma3"])
def test_many_tokens_through_block_0_are_the_walk_on_each_row(tmp_path, writer):
    """The vocabulary sample's batched FFN is the walk (ffn_walk.ffn_step) row by row, and RMSNorm makes the
    FFN blind to x's length."""
    from bytesup.lessons.ffn_walk import dims, ffn_step, ffn_weights

    _, meta, tensors = tiny_gguf_inputs(tmp_path, writer)
    rc = recipe(meta)
    w = ffn_weights(tensors, dims(meta), 0, rc)
    E = np.asarray(tensors["token_embd.weight"])
    X = E[:5] * np.float32(rc.embed_scale)
    out, _ = across.ffn_rows(X, w, dims(meta)["rms_epsilon"], rc)
    for i in range(5):
        trace, _ = ffn_step(X[i], w, dims(meta)["rms_epsilon"], rc)
        np.testing.assert_allclose(out[i], trace.out, rtol=1e-5, atol=1e-6)
    m = lesson.compute(meta, tensors)
    assert m["vocab_tokens"] == min(across.VOCAB_SAMPLE, E.shape[0])
    ids = np.unique(np.linspace(0, E.shape[0] - 1, across.VOCAB_SAMPLE).round().astype(int))
    Xs = E[ids] * np.float32(rc.embed_scale)
    outs, _ = across.ffn_rows(Xs, w, dims(meta)["rms_epsilon"], rc)
    cos = np.sum(Xs * (Xs + outs), 1) / np.linalg.norm(Xs, axis=1) / np.linalg.norm(Xs + outs, axis=1)
    assert m["vocab_angle_deg_median"] == pytest.approx(np.median(np.degrees(np.arccos(np.clip(cos, -1, 1)))), abs=1e-3)
    assert m["ffn_scale_change_max_rel"] < 1e-3  # FFN(c x) = FFN(x) once x is far above eps
    assert all(m[k] is None for k in across.PASS_KEYS)  # no forward pass without the model file


@pytest.mark.parametrize("writer", ["llama", "gemma3"])
def test_the_forward_pass_half_by_half_is_the_models(tmp_path, writer):
    """forward_halves keeps, per block, x, h = x + attention and y = h + FFN(h); its y is the traced pass's
    stream, block after block, and the per-block measures are medians over positions 1.. of those arrays."""
    from bytesup.model.forward import Model

    gguf, meta, tensors = tiny_gguf_inputs(tmp_path, writer)
    m, tables = lesson.run(meta, tensors, " cat", model_gguf=gguf, forward={"resident_budget_mb": 100})
    halves, rows = tables["halves"], tables["across"]
    assert m["pass_check_max_rel_diff"] < 1e-6 and m["pass_tokens"] == len(halves.ids) > 2
    with Model.from_gguf(gguf) as model:
        n_layers = model.spec.n_layers
        np.testing.assert_array_equal(halves.x[1:], halves.y[:-1])  # each block reads what the last wrote
        emb = np.asarray(model.weights.embed_rows(np.asarray(halves.ids)), np.float32) * np.float32(
            model.spec.embed_scale
        )
        np.testing.assert_allclose(halves.x[0], emb, rtol=1e-6)
        assert m["model_tied"] is model.spec.tied
    assert [r["block"] for r in rows] == list(range(n_layers)) and m["pass_blocks"] == n_layers
    ffn = halves.y - halves.h
    r = np.linalg.norm(ffn, axis=-1) / np.linalg.norm(halves.h, axis=-1)
    assert rows[1]["ffn_over_h_median"] == pytest.approx(np.median(r[1, 1:]))
    assert m["pass_later_ffn_over_h_median"] == pytest.approx(np.median(r[1:, 1:]))
    assert m["pass_residual_start_median"] == pytest.approx(np.median(np.linalg.norm(halves.x[0, 1:], axis=-1)))
    assert m["pass_residual_end_median"] == pytest.approx(np.median(np.linalg.norm(halves.y[-1, 1:], axis=-1)))
    fig = figures.plot_across_blocks(rows, {"ratio": 2.0, "angle": 60.0}, {"ratio": 0.3, "angle": 18.0})
    line = fig.axes[0].lines[0]  # the data drawn: per block, the FFN's length over the stream's
    np.testing.assert_array_equal(line.get_ydata(), [row["ffn_over_h_median"] for row in rows])
    np.testing.assert_array_equal(fig.axes[1].lines[0].get_ydata(), [row["ffn_angle_deg_median"] for row in rows])


def test_the_verdicts_say_which_statement_holds():
    """Each verdict key carries the measured value where its statement holds, None where it does not."""
    over = across.verdicts(
        {"vocab_angle_deg_median": 80.0, "pass_block0_ffn_angle_deg_median": 30.0, "pass_later_ffn_angle_deg_median": 12.0,
         "act_abs_below_0_1_fraction": 0.3, "pass_ffn_top1_share_median": 0.1}
    )  # fmt: skip
    assert over["block0_overwrites_angle_deg"] == 80.0 and over["block0_nudges_angle_deg"] is None
    assert over["pass_block0_nudges_angle_deg"] == 30.0 and over["pass_block0_overwrites_angle_deg"] is None
    assert over["later_blocks_nudge_angle_deg"] == 12.0 and over["later_blocks_overwrite_angle_deg"] is None
    assert over["valves_mostly_open_share"] == pytest.approx(0.7) and over["valves_mostly_shut_share"] is None
    assert over["ffn_output_spread_top1_share"] == 0.1 and over["ffn_output_concentrated_top1_share"] is None
    under = across.verdicts({"vocab_angle_deg_median": 18.0, "act_abs_below_0_1_fraction": 0.91})
    assert under["block0_nudges_angle_deg"] == 18.0 and under["valves_mostly_shut_share"] == 0.91
    assert under["later_blocks_nudge_angle_deg"] is None and under["later_blocks_overwrite_angle_deg"] is None


def test_top_share_tells_an_outlier_from_a_spread_vector():
    assert across.top_share(np.array([3.0, 4.0])) == pytest.approx(16 / 25)
    assert across.top_share(np.ones(100)) == pytest.approx(0.01)
    assert across.top_share(np.array([1.0, -2.0, 2.0]), 2) == pytest.approx(8 / 9)

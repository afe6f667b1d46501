"""Lesson 7 (decode is memory-bound): bytes per token, ceilings, roofline points, claims, and the notebook.

Byte counts are checked against numbers worked out by hand from the published configurations, and on a
tiny GGUF against gguf-py's own tensor table; timing inputs are synthetic, so nothing asserts a speed.
"""

import csv
import json
import math
import sys
from pathlib import Path

import pytest
from workflow_helpers import run_notebook

from bytesup.gguf.extract import extract
from bytesup.gguf.sizes import QuantSizeError
from bytesup.lessons import LessonInputError, claims, plain, read_metadata
from bytesup.lessons import decode_memory_bound as lesson
from bytesup.lessons.decode_memory_bound import accounting, roofline, whole_model
from bytesup.model import configs
from bytesup.model import param_counts as pc
from bytesup.model.synthetic import write_tiny_llama
from bytesup.timing.results import read_timing

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "workflow" / "notebooks" / "capstone_decode_is_memory_bound.ipynb"
PATTERNS = ["token_embd.weight", "blk.0.*", "output_norm.weight", "?output.weight"]
WRITES = sorted(
    [
        "metrics.json",
        "claims.csv",
        "tensor_reads.csv",
        "bytes_per_token.csv",
        "decode_ceilings.csv",
        "roofline_points.csv",
        "whole_model_timing.csv",
        "bytes_per_token.png",
        "prefill.png",
        "roofline.png",
    ]
)
MODEL_INDEPENDENT = {c.claim_id for c in claims.load_claims(lesson.SPEC.id) if not c.requires}


# --- synthetic timing files, shaped like bytesup.timing.cpu / bytesup.timing.gpu write them -------------------


def sweep_rows(bw_gbps, peak_gflops, dtype="fp32", rows=4096, cols=1024, sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256)):
    """A sweep whose times follow the roofline exactly: t = max(bytes / bandwidth, flops / peak)."""
    itemsize = {"fp32": 4, "bf16": 2}[dtype]
    out = []
    for n in sizes:
        flops = 2 * rows * cols * n
        nbytes = (rows * cols + cols * n + rows * n) * itemsize
        t = max(nbytes / (bw_gbps * 1e9), flops / (peak_gflops * 1e9))
        out.append(
            {
                "op": "matvec" if n == 1 else "matmul",
                "dtype": dtype,
                "n": n,
                "rows": rows,
                "cols": cols,
                "itemsize": itemsize,
                "weight_bytes": rows * cols * itemsize,
                "bytes": nbytes,
                "flops": flops,
                "median_s": t,
                "gbps": nbytes / t / 1e9,
                "gflops": flops / t / 1e9,
                "noisy": False,
            }
        )
    t1 = out[0]["median_s"]
    for r in out:
        r["time_over_n1"] = r["median_s"] / t1
    return out


def cpu_summary(sweep, copy=50.0, machine="Test CPU"):
    return {
        "status": "measured",
        "device": "cpu",
        "stream_copy_gbps": copy,
        "matvec_cold_gbps": sweep[0]["gbps"],
        "matvec_warm_gbps": 3 * copy,
        "matmul_ratio_256_over_1": sweep[-1]["time_over_n1"],
        "noisy": [],
        "machine": {"cpu_model": machine, "llc_bytes": 1 << 20},
        "machine_shared": False,
    }


def gpu_files():
    sweep = sweep_rows(3000, 40000, "fp32") + sweep_rows(3000, 400000, "bf16")
    summary = {
        "status": "measured",
        "device": "cuda",
        "stream_copy_gbps": 4000.0,
        "matvec_cold_gbps": sweep[0]["gbps"],
        "machine": {"name": "Test GPU"},
        "by_dtype": {"fp32": {"matvec_cold_gbps": sweep[0]["gbps"]}, "bf16": {"matvec_cold_gbps": sweep[9]["gbps"]}},
    }
    return summary, sweep


GPU_SKIPPED = {
    "status": "skipped",
    "skipped": "no CUDA device",
    "gpu_mode": "auto",
    "device": None,
    "stream_copy_gbps": None,
    "matvec_cold_gbps": None,
}


def as_csv_rows(rows):
    """What csv.DictReader gives back: every value a string."""
    return [{k: str(v) for k, v in r.items()} for r in rows]


def write_csv(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["op"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


# --- 1. what a tensor costs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, n, expect",
    [
        ("F32", 10, 40),
        ("BF16", 10, 20),
        ("F16", 3, 6),
        ("Q8_0", 32, 34),
        ("Q8_0", 4096, 4352),
        ("Q4_1", 64, 40),
        ("Q4_0", 32, 18),
    ],
)
def test_type_bytes(kind, n, expect):
    assert accounting.type_bytes(kind, n) == expect


@pytest.mark.parametrize("kind, n", [("Q9_9", 32), ("Q8_0", 33)])
def test_type_bytes_refuses(kind, n):
    with pytest.raises(QuantSizeError):  # a BytesupError: the job prints its one line
        accounting.type_bytes(kind, n)


# --- 2. the two published models, worked out by hand -----------------------------------------------


def test_specimen_q8_0_table_by_hand():
    rows = accounting.config_tensor_table(accounting.SPECIMEN)
    assert len(rows) == 1 + 32 * 9 + 2  # token_embd, 9 per block, output_norm, output
    matrices = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 2 * 32256 * 4096
    norms = (2 * 32 + 1) * 4096
    assert sum(r["bytes"] for r in rows) == matrices // 32 * 34 + norms * 4 == 7_162_576_896
    acc = accounting.account_layout(accounting.SPECIMEN)
    row_bytes = 4096 // 32 * 34  # one Q8_0 row of the embedding table
    assert acc.summary["bytes_per_token"] == 7_162_576_896 - 32256 * row_bytes + row_bytes == 7_022_203_136
    assert acc.summary["ffn_bytes_per_token"] == 32 * 3 * 4096 * 11008 // 32 * 34
    # 2 FLOPs per matrix weight read; the embedding row is a lookup, not a matvec
    assert acc.summary["decode_flops_per_token"] == 2 * (matrices - 32256 * 4096)
    assert accounting.kv_cache_bytes_per_context_token(lesson.DEEPSEEK_CODER_6_7B) == 32 * 2 * 32 * 128 * 2


def test_llama3_8b_bf16_matches_text_001_and_param_counts():
    s = accounting.account_layout(accounting.LLAMA3_8B_BF16).summary
    streamed = pc.count(configs.LLAMA3_8B)["streamed_params"]  # param_counts leaves the embedding row out
    assert s["weights_read"] == streamed + 4096 == 8_030_261_248 - 128256 * 4096 + 4096
    assert s["bytes_per_token"] == 2 * s["weights_read"]
    assert s["ffn_weights"] == 32 * 3 * 4096 * 14336
    assert round(s["bytes_per_token_gb"], 2) == 15.01
    assert round(s["ffn_bytes_per_token_gb"], 2) == 11.27
    assert round(100 * s["ffn_share_of_bytes"]) == 75
    assert accounting.kv_cache_bytes_per_context_token(configs.LLAMA3_8B) == 32 * 2 * 8 * 128 * 2


def test_config_table_refuses_gpt2():
    with pytest.raises(LessonInputError):
        accounting.config_tensor_table(accounting.Layout("x", "GPT-2", configs.GPT2_SMALL, "F16", "F32"))


# --- 3. the reading rule --------------------------------------------------------------------------


def toy_table(tied):
    rows = [
        {"name": "token_embd.weight", "type": "Q8_0", "shape": "10x64", "bytes": 10 * 68, "elements": 640},
        {"name": "blk.0.ffn_up.weight", "type": "F32", "shape": "32x64", "bytes": 32 * 64 * 4, "elements": 2048},
        {"name": "blk.0.ffn_norm.weight", "type": "F32", "shape": "64", "bytes": 256, "elements": 64},
        {"name": "output_norm.weight", "type": "F32", "shape": "64", "bytes": 256, "elements": 64},
    ]
    if not tied:
        rows.append({"name": "output.weight", "type": "F16", "shape": "10x64", "bytes": 1280, "elements": 640})
    return rows


def test_untied_reads_one_embedding_row():
    reads = pc.per_token_reads(toy_table(tied=False))
    embd = [r for r in reads if r["name"].startswith("token_embd")]
    assert len(embd) == 1 and embd[0]["bytes_read"] == 68 and embd[0]["elements_read"] == 64
    s = accounting.summarize_reads(reads)
    assert s["bytes_per_token"] == 68 + 8192 + 256 + 256 + 1280
    assert s["file_tensor_bytes"] == 680 + 8192 + 256 + 256 + 1280
    assert s["decode_flops_per_token"] == 2 * (2048 + 640)
    assert s["bytes_by_group"]["output head"] == 1280


def test_tied_head_reads_the_whole_table_once_more():
    reads = pc.per_token_reads(toy_table(tied=True))
    head = [r for r in reads if r["part"] == "lm_head"]
    assert [r["name"] for r in head] == ["token_embd.weight (tied output head)"]
    s = accounting.summarize_reads(reads)
    assert s["bytes_per_token"] == 68 + 680 + 8192 + 256 + 256
    assert s["file_tensor_bytes"] == 680 + 8192 + 256 + 256  # the table counted once in the file
    assert s["decode_flops_per_token"] == 2 * (2048 + 640)


def test_ragged_lookup_table_is_refused():
    rows = toy_table(tied=False)
    rows[0]["bytes"] = 681
    with pytest.raises(ValueError, match="not a whole number of rows"):
        pc.per_token_reads(rows)


# --- 4. ceilings and the roofline ------------------------------------------------------------------


def test_roofline_points_and_roofs():
    sweep = sweep_rows(50, 200)
    points, notes = roofline.roofline_points(as_csv_rows(sweep), "cpu")
    assert notes == [] and [p["n"] for p in points] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    p1 = points[0]
    assert p1["intensity"] == pytest.approx(2 * 4096 * 1024 / ((4096 * 1024 + 1024 + 4096) * 4))
    assert p1["gflops"] == pytest.approx(50 * p1["intensity"])  # on the sloped roof
    rf = roofline.roofs(points, 50)
    assert rf["peak_gflops"] == pytest.approx(200) and rf["ridge_intensity"] == pytest.approx(4.0)
    m = roofline.point_metrics(points, "sweep")
    assert m["sweep_work_256_over_1"] == 256
    assert roofline.flops_per_weight_n1(as_csv_rows(sweep), points) == 2


def test_roofline_points_work_out_missing_columns():
    sweep = [{k: v for k, v in r.items() if k not in ("flops", "bytes", "gflops")} for r in sweep_rows(50, 200)]
    points, notes = roofline.roofline_points(as_csv_rows(sweep), "cpu")
    full, _ = roofline.roofline_points(as_csv_rows(sweep_rows(50, 200)), "cpu")
    for p, q in zip(points, full):
        assert p["derived"] == "flops bytes gflops"
        assert p["intensity"] == pytest.approx(q["intensity"]) and p["gflops"] == pytest.approx(q["gflops"])
    assert any("no column 'flops'" in n for n in notes) and any("worked out" in n for n in notes)
    # with nothing to work from, a row is left out and said so
    bare = [{"n": "1", "median_s": "0.1"}]
    points, notes = roofline.roofline_points(bare, "cpu")
    assert points == [] and any("not enough columns" in n for n in notes)


def test_which_roof_binds():
    summary = {"bytes_per_token": 1e9, "decode_flops_per_token": 2e9}
    mem = roofline.roofline_ceiling(summary, {"bandwidth_gbps": 100.0, "peak_gflops": 1000.0})
    assert mem["memory_ceiling_tps"] == pytest.approx(100) and mem["compute_ceiling_tps"] == pytest.approx(500)
    assert mem["bound"] == "memory"
    assert roofline.roofline_ceiling(summary, {"bandwidth_gbps": 100.0, "peak_gflops": 100.0})["bound"] == "compute"
    assert roofline.roofline_ceiling(summary, {"bandwidth_gbps": None, "peak_gflops": 100.0})["bound"] is None


def test_bandwidths_without_and_with_a_gpu():
    sweep = sweep_rows(50, 200)
    rows, notes = lesson.bandwidths(cpu_summary(sweep), GPU_SKIPPED)
    gpu = [r for r in rows if r["bandwidth"].startswith("GPU")]
    assert len(gpu) == 1 and gpu[0]["gbps"] is None and "no CUDA device" in gpu[0]["note"]
    assert {r["gbps"] for r in rows if r["source"].startswith("course")} == {273.0, 128.0}
    assert notes == ["GPU not measured: no CUDA device"]
    rows, notes = lesson.bandwidths(cpu_summary(sweep), gpu_files()[0])
    assert [r["bandwidth"] for r in rows if r["bandwidth"].startswith("GPU")] == [
        "GPU copy (Test GPU)",
        "GPU matvec bf16, cold (N = 1)",
        "GPU matvec fp32, cold (N = 1)",
    ]
    assert notes == []


def test_ceilings_are_bandwidth_over_bytes():
    acc = accounting.account_layout(accounting.SPECIMEN)
    rows = roofline.ceilings(
        [acc],
        [
            {"source": "x", "bandwidth": "b", "gbps": 273.0, "note": ""},
            {"source": "x", "bandwidth": "none", "gbps": None, "note": "n/a"},
        ],
    )
    assert rows[0]["tokens_per_s_ceiling"] == pytest.approx(273e9 / 7_022_203_136)
    assert rows[0]["ms_per_token_floor"] == pytest.approx(1e3 * 7_022_203_136 / 273e9)
    assert rows[1]["tokens_per_s_ceiling"] is None


# --- 5. the whole lesson on a tiny GGUF, against gguf-py -------------------------------------------


# the tied head in CI (slow): the quick set runs the untied file, whose head and embedding rows are apart
@pytest.fixture(scope="module", params=[pytest.param(True, marks=pytest.mark.slow), False], ids=["tied", "untied"])
def tiny(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    gguf = write_tiny_llama(folder / "tiny.gguf", tied=request.param)
    extract(gguf, folder / "gguf", PATTERNS)
    return gguf, read_metadata(folder / "gguf" / "metadata.json"), pc.read_tensor_table(folder / "gguf" / "tensors.csv")


def test_bytes_per_token_against_gguf_py(tiny):
    from gguf import GGUFReader

    gguf, meta, rows = tiny
    reader = GGUFReader(str(gguf))
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    row = int(embd.n_bytes) // int(embd.shape[1])  # GGUF dims are innermost first: [width, vocab]
    tied = "output.weight" not in sizes
    expect = sum(sizes.values()) - sizes["token_embd.weight"] + row + (sizes["token_embd.weight"] if tied else 0)
    m = lesson.compute(
        meta,
        rows,
        timing_summary=cpu_summary(sweep_rows(50, 200)),
        timing_sweep=as_csv_rows(sweep_rows(50, 200)),
        gpu_summary=GPU_SKIPPED,
    )
    assert m["model_bytes_per_token"] == expect
    assert m["model_file_tensor_bytes"] == sum(sizes.values())
    assert m["model_tied"] is tied
    assert m["model_ceiling_stream_copy_tps"] == pytest.approx(50e9 / expect)
    assert m["roofline_cpu_ridge_intensity"] == pytest.approx(4.0)


def test_claims_on_another_model(tiny):
    _, meta, rows = tiny
    sweep = sweep_rows(50, 200)
    m = lesson.compute(
        meta, rows, timing_summary=cpu_summary(sweep), timing_sweep=as_csv_rows(sweep), gpu_summary=GPU_SKIPPED
    )
    results = lesson.evaluate_claims(m, model="tiny", metadata=meta)
    status = {r.claim.claim_id: r.status for r in results}
    assert {status[c] for c in MODEL_INDEPENDENT} == {"reproduced"}
    assert {s for c, s in status.items() if c not in MODEL_INDEPENDENT} == {"specimen differs"}
    assert len(status) == 14


def test_claims_without_a_sweep_are_not_reproduced(tiny):
    _, meta, rows = tiny
    m = lesson.compute(meta, rows, timing_summary={}, timing_sweep=[], gpu_summary={})
    status = {r.claim.claim_id: r.status for r in lesson.evaluate_claims(m, model="tiny", metadata=meta)}
    assert status["matvec.flops_per_weight"] == status["matmul.work_256_over_1"] == "not reproduced"
    assert status["llama3_8b.bytes_per_token"] == "reproduced"
    assert any("stream_copy_gbps" in n for n in m["notes"]) and m["timing_missing"]


def test_specimen_on_the_course_machine_is_compared(tiny):
    """With the specimen's tensor table and the course's machine, nothing is 'specimen differs'."""
    _, meta, _ = tiny
    rows = accounting.config_tensor_table(accounting.SPECIMEN)
    sweep = sweep_rows(128, 1000, rows=11008, cols=4096)
    summary = cpu_summary(sweep, copy=273.0, machine="NVIDIA DGX Spark (GB10)")
    summary["matmul_ratio_256_over_1"] = 20.0
    summary["matvec_cold_gbps"] = 128.0
    m = lesson.compute(meta, rows, timing_summary=summary, timing_sweep=as_csv_rows(sweep), gpu_summary=GPU_SKIPPED)
    assert m["model_bytes_equal_specimen_config"] is True
    results = lesson.evaluate_claims(m, model="deepseek-coder-6.7b-instruct-q8_0", metadata=meta)
    assert {r.status for r in results} == {"reproduced"}


def test_a_tiny_gemma3s_cache_at_4k_counts_its_windows(tmp_path):
    """The capstone's cache at lesson 7's context, layer by layer: a tiny Gemma 3 with window 4 and 6 layers,
    the last global (64 bytes a layer per token)."""
    from bytesup.model.synthetic import write_tiny_gemma3

    gguf = write_tiny_gemma3(tmp_path / "g.gguf")
    extract(gguf, tmp_path / "gguf", ["token_embd.weight"])
    meta = read_metadata(tmp_path / "gguf" / "metadata.json")
    rows = pc.read_tensor_table(tmp_path / "gguf" / "tensors.csv")
    m = lesson.compute(meta, rows, gpu_summary=GPU_SKIPPED)
    assert (m["model_sliding_window"], m["model_kv_global_layers"]) == (4, 1)
    assert m["model_kv_cache_4k_bytes"] == 64 * 4096 + 5 * 64 * 4 and m["model_kv_cache_bytes_per_context_token"] == 384


def test_this_models_kv_cache_and_bound_table(tiny):
    _, meta, rows = tiny
    d = lesson.dims(meta)
    arch = accounting.model_architecture(d, rows)
    assert (arch.n_layers, arch.n_kv_heads, arch.head_dim, arch.tied) == (
        2,
        2,
        8,
        "output.weight" not in {r["name"] for r in rows},
    )
    sweep = sweep_rows(50, 200)
    run = lesson.run(
        meta, rows, timing_summary=cpu_summary(sweep), timing_sweep=as_csv_rows(sweep), gpu_summary=GPU_SKIPPED
    )
    assert (
        run.metrics["model_kv_cache_bytes_per_context_token"] == 2 * 2 * 2 * 8 * 2
    )  # K and V, blocks, heads, width, F16
    wider = {**meta, "llama.attention.value_length": 16}  # values twice as long as keys: K at 8, V at 16
    assert sum(per for per, _ in accounting.model_kv_layers(wider)) == 2 * 2 * (8 + 16) * 2
    m = run.metrics  # lesson 7's 4k context beside the empty cache, by the one ceiling function
    assert m["model_kv_cache_4k_bytes"] == 4096 * m["model_kv_cache_bytes_per_context_token"]
    assert m["model_sliding_window"] is None and m["model_kv_global_layers"] == 2
    copy = m["timing_stream_copy_gbps"]
    assert m["model_ceiling_stream_copy_tps"] == pytest.approx(copy * 1e9 / m["model_bytes_per_token"], rel=1e-12)
    assert m["model_ceiling_stream_copy_4k_tps"] == pytest.approx(
        copy * 1e9 / (m["model_bytes_per_token"] + m["model_kv_cache_4k_bytes"]), rel=1e-12
    )
    assert m["model_ceiling_stream_copy_float32_tps"] == pytest.approx(
        copy * 1e9 / (4 * m["model_weights_read"]), rel=1e-12
    )
    assert m["deepseek_q8_0_kv_cache_4k_bytes"] == 524_288 * 4096
    assert [(b["device"], b["model"]) for b in run.bounds] == [("cpu", a.label) for a in run.accounts]
    assert {b["bound"] for b in run.bounds} <= {"memory", "compute"}
    assert run.bounds[0]["memory ceiling tok/s"] == run.metrics["model_cpu_memory_ceiling_tps"]


# --- 5b. the whole model, timed (decode.json and prefill.csv of rule timing_decode) ------------------

QUICK = {"repeats": 3, "warmup": 1, "decode_tokens": 4, "prefill_sizes": [1, 4, 16], "stream_bytes": 4 << 20}
SMALL_Q8 = (64, 256)  # the Q8_0 product's matrix in these runs (the job's: the specimen's FFN)


def quick_decode(gguf):
    from bytesup.timing.decode import run_decode

    return run_decode(gguf, QUICK, threads=1, q8_0_shape=SMALL_Q8)


def decode_files(
    tps=20.0,
    nbytes=500_000_000,
    read=12.5,
    copy=10.0,
    flops=270_000_000,
    arith_s=0.002,
    ns=(1, 8, 32, 128),
    llama=None,
    f32_tps=None,
):
    """A decode.json and prefill.csv shaped like bytesup.timing.decode writes them, whose prefill follows
    seconds per token = memory floor / N + arithmetic exactly (memory floor = bytes / read ceiling)."""
    mem = nbytes / (read * 1e9)
    rows = [
        {
            "engine": "bytesup",
            "n": n,
            "median_s": n * (mem / n + arith_s),
            "tokens_per_s": 1 / (mem / n + arith_s),
            "gflops": flops / (mem / n + arith_s) / 1e9,
            "rel_iqr": 0.01,
            "noisy": False,
            "repeats": 3,
        }
        for n in ns
    ]
    ceiling = read * 1e9 / nbytes
    by_context = [
        {"context": c, "tokens_per_s": tps * nbytes / (nbytes + kv), "bytes_per_token": nbytes + kv,
         "kv_bytes_per_token": kv, "kv_share_of_bytes": kv / (nbytes + kv), "flops_per_token": flops + 1000 * c,
         "noisy": False}
        for c, kv in ((0, 0), (512, 25_000_000), (2048, 100_000_000))
    ]  # fmt: skip
    summary = {
        "status": "measured",
        "engine": "bytesup (NumPy)",
        "weights": "resident: dequantized once to float32",
        "threads": 2,
        "decode_tokens": 8,
        "decode_median_s": 1 / tps,
        "decode_rel_iqr": 0.02,
        "decode_noisy": False,
        "decode_tokens_per_s": tps,
        "decode_bytes_per_token": nbytes,
        "decode_gbps": nbytes * tps / 1e9,
        "decode_read_ceiling_gbps": read,
        "decode_read_ceiling_kernel": "gemv",
        "decode_read_ceiling_rel_iqr": 0.03,
        "stream_copy_gbps": copy,
        "decode_ceiling_tokens_per_s": ceiling,
        "decode_fraction_of_read_ceiling": tps / ceiling,
        "decode_flops_per_token": flops,
        "prefill_tokens_per_s": {str(r["n"]): r["tokens_per_s"] for r in rows},
        "prefill_gflops": {str(r["n"]): r["gflops"] for r in rows},
        "targets": [
            {"name": "decode_fraction_of_read_ceiling", "target": 0.7, "measured": tps / ceiling,
             "unit": "fraction of the read ceiling", "met": tps / ceiling >= 0.7, "noisy": False},
            {"name": "decode_over_llama_cpp_f32", "target": 0.9,
             "measured": tps / f32_tps if f32_tps else None, "unit": "x llama.cpp on the float32 copy",
             "met": tps / f32_tps >= 0.9 if f32_tps else None, "noisy": False},
        ],  # fmt: skip
        "llama_cpp_f32": (
            {"version": "0.3.36", "decode_tokens_per_s": f32_tps, "decode_gbps": nbytes * f32_tps / 1e9,
             "decode_bytes_per_token": nbytes, "ours_tokens_per_s": tps, "ours_over_theirs": tps / f32_tps}
            if f32_tps else {"skipped": "llama-cpp-python is not installed"}
        ),  # fmt: skip
        "decode_over_llama_cpp_f32": tps / f32_tps if f32_tps else None,
        "decode_by_context": by_context,
        "decode_context_notes": [],
        "decode_kv_visible_context": 1000,
        "decode_kv_half_context": 9000,
        "streamed": {"tokens_per_s": 2.0, "step_median_s": 0.5, "dequant_median_s": 0.4, "dequant_share": 0.8,
                     "dequant_gbps": 0.25, "bound": "dequantization"},
        "decode_products": {"median_s": 0.8 / tps, "bytes": nbytes - 1000, "gbps": (nbytes - 1000) * tps / 0.8e9,
                            "fraction_of_read_ceiling": (nbytes - 1000) * tps / 0.8e9 / read, "share_of_step": 0.8,
                            "over_llama_cpp_f32": 1.1},
        "decode_layout": {"chosen": "long-runs", "trial_median_s": {"rows": 1.1 / tps, "long-runs": 1.0 / tps},
                          "median_s": {"rows": 1.2 / tps, "long-runs": 1.0 / tps}},
        "q8_0_product": {"gbps": 2.5, "fraction_of_read_ceiling": 0.2, "int8_to_float32_share": 0.2, "bytes_per_weight": 1.125,
                         "weights_per_s": 2.0e9, "shape": [11008, 4096]},
        "other_processes_cpu_fraction": 0.01,
        "machine_shared": False,
    }  # fmt: skip
    if llama is None:
        summary["llama_cpp"] = {"skipped": "not installed: pip install -e '.[llama]'"}
    else:  # llama = (tokens/s, file bytes, arithmetic seconds per token)
        l_tps, l_bytes, l_arith = llama
        l_mem = l_bytes / (read * 1e9)
        l_rows = [
            {
                "engine": "llama.cpp",
                "n": n,
                "median_s": n * (l_mem / n + l_arith),
                "tokens_per_s": 1 / (l_mem / n + l_arith),
                "gflops": flops / (l_mem / n + l_arith) / 1e9,
                "rel_iqr": 0.01,
                "noisy": False,
                "repeats": 3,
            }
            for n in ns
        ]
        l_ceiling = read * 1e9 / l_bytes
        summary["llama_cpp"] = {
            "version": "0.3.36",
            "decode_tokens_per_s": l_tps,
            "decode_rel_iqr": 0.01,
            "decode_bytes_per_token": l_bytes,
            "decode_gbps": l_bytes * l_tps / 1e9,
            "decode_ceiling_tokens_per_s": l_ceiling,
            "decode_fraction_of_read_ceiling": l_tps / l_ceiling,
            "prefill_tokens_per_s": {str(r["n"]): r["tokens_per_s"] for r in l_rows},
        }
        rows += l_rows
    return summary, rows


DECODE_SKIPPED = {"status": "skipped", "skipped": "architecture 'gemma3' is not one the forward pass follows"}
MEASURED_KEYS = (
    "decode_tokens_per_s",
    "decode_bytes_per_token",
    "decode_ceiling_tokens_per_s",
    "decode_fraction_of_read_ceiling",
    "decode_read_ceiling_gbps",
    "decode_read_ceiling_kernel",
    "decode_gbps",
    "decode_flops_per_token",
    "decode_stream_copy_gbps",
    "decode_intensity",
    "decode_gflops",
    "decode_crossover_n",
    "decode_bound",
    "prefill_best_tokens_per_s",
    "llama_cpp_decode_tokens_per_s",
    "llama_cpp_decode_fraction_of_read_ceiling",
    "decode_target_met",
    "llama_cpp_f32_decode_tokens_per_s",
    "decode_over_llama_cpp_f32",
    "decode_slowdown_at_longest_context",
    "decode_kv_visible_context",
    "decode_streamed_dequant_share",
    "q8_0_product_fraction_of_read_ceiling",
    "deepseek_q8_0_tokens_per_s_q8_product",
    "decode_products_gbps",
    "decode_products_fraction_of_read_ceiling",
    "decode_products_share_of_step",
    "decode_products_over_llama_cpp_f32",
    "decode_layout",
    "decode_step_ms_rows",
    "decode_step_ms_long_runs",
)


def test_decode_metrics_follow_from_decode_json():
    summary, rows = decode_files(tps=20.0, nbytes=500_000_000, read=12.5, copy=10.0, flops=270_000_000, arith_s=0.002)
    m, whole, notes = whole_model.decode_metrics(summary, as_csv_rows(rows), peak_gflops=100.0)
    assert notes == [] and m["decode_status"] == "measured" and m["decode_skipped"] is None
    assert m["decode_tokens_per_s"] == 20.0 and m["decode_bytes_per_token"] == 500_000_000
    assert (m["decode_read_ceiling_gbps"], m["decode_read_ceiling_kernel"]) == (12.5, "gemv")
    assert m["decode_ceiling_tokens_per_s"] == pytest.approx(12.5e9 / 500e6) == pytest.approx(25.0)
    assert m["decode_fraction_of_read_ceiling"] == pytest.approx(20 / 25)
    # the products alone: 80 % of a 50 ms step, reading all but 1,000 of the step's bytes
    assert m["decode_products_share_of_step"] == 0.8 and m["decode_products_over_llama_cpp_f32"] == 1.1
    assert m["decode_products_gbps"] == pytest.approx((500e6 - 1000) * 20 / 0.8e9)
    assert m["decode_products_fraction_of_read_ceiling"] == pytest.approx(m["decode_products_gbps"] / 12.5)
    # the layout a trial chose, and a step's milliseconds in each layout: 50 ms timed, rows 1.2 x that
    assert m["decode_layout"] == "long-runs"
    assert (m["decode_step_ms_long_runs"], m["decode_step_ms_rows"]) == (pytest.approx(50.0), pytest.approx(60.0))
    assert m["decode_target_goal"] == 0.7 and m["decode_target_met"] is True and m["decode_target_applies"] is True
    assert m["decode_gbps"] == pytest.approx(10.0) and m["decode_gbps_over_stream_copy"] == pytest.approx(1.0)
    assert m["decode_intensity"] == pytest.approx(270e6 / 500e6) and m["decode_gflops"] == pytest.approx(5.4)
    # prefill by N: a mapping, as prefill.csv gives it; the split of a token's time read back exactly
    expect = {str(n): 1 / (0.04 / n + 0.002) for n in (1, 8, 32, 128)}
    assert m["prefill_tokens_per_s"] == pytest.approx(expect)
    assert m["prefill_best_n"] == 128 and m["prefill_best_tokens_per_s"] == pytest.approx(expect["128"])
    assert m["decode_memory_floor_ms"] == pytest.approx(40.0)  # bytes / the read ceiling, not copy
    assert m["decode_arithmetic_ms_per_token"] == pytest.approx(2.0)
    assert m["decode_crossover_n"] == pytest.approx(20.0) and m["decode_bound"] == "memory"
    assert m["decode_explained_share_of_decode_time"] == pytest.approx((0.040 + 0.002) * 20)
    assert m["prefill_best_gflops_fraction_of_sweep_peak"] == pytest.approx(270e6 * expect["128"] / 1e9 / 100)
    assert m["llama_cpp_status"] == "skipped" and "pip install" in m["llama_cpp_skipped"]
    assert m["llama_cpp_decode_tokens_per_s"] is None and m["llama_cpp_prefill_tokens_per_s"] == {}
    assert m["llama_cpp_f32_status"] == "skipped" and m["decode_over_llama_cpp_f32"] is None
    assert m["decode_over_llama_cpp_f32_met"] is None
    # the table: the decode point, then prefill by N, with intensity N x FLOPs / bytes, then the contexts
    assert [(w["phase"], w["n"], w.get("context")) for w in whole] == [
        ("decode", 1, None),
        ("prefill", 1, None),
        ("prefill", 8, None),
        ("prefill", 32, None),
        ("prefill", 128, None),
        ("decode", 1, 0),
        ("decode", 1, 512),
        ("decode", 1, 2048),
    ]
    assert whole[0]["intensity"] == pytest.approx(0.54) and whole[0]["gflops"] == pytest.approx(5.4)
    p128 = whole[4]
    assert p128["intensity"] == pytest.approx(128 * 0.54) and p128["speedup_over_n1"] == pytest.approx(
        expect["128"] / expect["1"]
    )
    assert p128["growth_vs_proportional"] == pytest.approx(expect["128"] / expect["1"] / 128)
    c2048 = whole[-1]  # weights and the cache read together: more bytes, a little more FLOPs
    assert c2048["bytes_per_pass"] == 600_000_000 and c2048["intensity"] == pytest.approx((270e6 + 2048e3) / 600e6)


def test_llama_cpp_on_the_float32_copy_sets_ours_beside_it():
    summary, rows = decode_files(tps=20.0, f32_tps=25.0)
    m, _, _ = whole_model.decode_metrics(summary, as_csv_rows(rows))
    assert m["llama_cpp_f32_status"] == "measured" and m["llama_cpp_f32_skipped"] is None
    assert m["llama_cpp_f32_decode_tokens_per_s"] == 25.0 and m["decode_over_llama_cpp_f32"] == pytest.approx(0.8)
    assert m["llama_cpp_f32_fraction_of_read_ceiling"] == pytest.approx(500e6 * 25 / 1e9 / 12.5)
    assert m["decode_over_llama_cpp_f32_goal"] == 0.9 and m["decode_over_llama_cpp_f32_met"] is False


def test_context_streamed_and_q8_0_keys_come_from_decode_json_and_the_specimens_shapes():
    from bytesup.timing.context import kv_bytes_read

    summary, rows = decode_files(tps=20.0)
    specimen = {"bytes_per_token": 7_000_000_000, "weights_read": 6_700_000_000}
    m, _, _ = whole_model.decode_metrics(summary, as_csv_rows(rows), specimen=specimen)
    assert m["decode_contexts"] == [0, 512, 2048] and m["decode_longest_context"] == 2048
    assert m["decode_tokens_per_s_by_context"]["0"] == 20.0
    assert m["decode_slowdown_at_longest_context"] == pytest.approx(600 / 500)
    assert m["decode_kv_share_by_context"]["2048"] == pytest.approx(1 / 6)
    assert (m["decode_kv_visible_context"], m["decode_kv_half_context"]) == (1000, 9000)
    # the specimen, computed: an F16 cache of 32 blocks x 2 x 4096 values beside 7 GB of weights
    kv = kv_bytes_read(lesson.DEEPSEEK_CODER_6_7B, 8192, "F16")
    assert kv == 8192 * 32 * 2 * 4096 * 2
    assert m["deepseek_q8_0_kv_share_by_context"]["8192"] == pytest.approx(kv / (7e9 + kv))
    visible = m["deepseek_q8_0_kv_visible_context"]
    assert (
        kv_bytes_read(lesson.DEEPSEEK_CODER_6_7B, visible, "F16")
        / (7e9 + kv_bytes_read(lesson.DEEPSEEK_CODER_6_7B, visible, "F16"))
        >= 0.1
    )
    assert kv_bytes_read(lesson.DEEPSEEK_CODER_6_7B, visible - 1, "F16") / 7.0e9 < 0.1 / 0.9
    assert m["decode_streamed_dequant_share"] == 0.8 and m["decode_streamed_bound"] == "dequantization"
    assert m["q8_0_product_fraction_of_read_ceiling"] == 0.2
    assert m["deepseek_q8_0_tokens_per_s_q8_product"] == pytest.approx(2.0e9 / 6.7e9)
    assert m["deepseek_q8_0_ceiling_read_q8_resident_tps"] == pytest.approx(12.5e9 / (6.7e9 * 1.125))


def test_llama_cpp_beside_ours_and_which_limit_binds_each():
    """llama.cpp reads the quantized file's bytes; on few cores its arithmetic can outlast its memory time."""
    summary, rows = decode_files(tps=20.0, llama=(90.0, 96_600_000, 0.010))
    m, whole, _ = whole_model.decode_metrics(summary, as_csv_rows(rows), peak_gflops=100.0)
    assert m["llama_cpp_status"] == "measured" and m["llama_cpp_version"] == "0.3.36"
    assert m["llama_cpp_decode_bytes_per_token"] == 96_600_000
    assert m["llama_cpp_decode_ceiling_tokens_per_s"] == pytest.approx(12.5e9 / 96.6e6)
    assert m["llama_cpp_decode_fraction_of_read_ceiling"] == pytest.approx(90 / (12.5e9 / 96.6e6))
    assert m["llama_cpp_decode_gbps_over_stream_copy"] == pytest.approx(90 * 0.0966 / 10.0)
    assert m["llama_cpp_over_bytesup_decode"] == pytest.approx(4.5)
    assert m["llama_cpp_decode_memory_floor_ms"] == pytest.approx(96.6e6 / 12.5e9 * 1e3)
    assert m["llama_cpp_decode_arithmetic_ms_per_token"] == pytest.approx(10.0)
    assert m["llama_cpp_decode_bound"] == "arithmetic" and m["decode_bound"] == "memory"
    assert m["llama_cpp_decode_crossover_n"] == pytest.approx(7.728 / 10.0)
    assert set(m["llama_cpp_prefill_tokens_per_s"]) == {"1", "8", "32", "128"}
    assert [w["engine"] for w in whole].count("llama.cpp") == 5
    l_dec = next(w for w in whole if w["engine"] == "llama.cpp" and w["phase"] == "decode")
    assert l_dec["intensity"] == pytest.approx(270e6 / 96.6e6)  # same FLOPs, fewer bytes


def test_prefill_at_the_memory_roof_still_says_memory():
    summary, rows = decode_files(arith_s=0.0)
    m, _, _ = whole_model.decode_metrics(summary, rows)
    assert m["decode_bound"] == "memory" and m["decode_arithmetic_ms_per_token"] is None


@pytest.mark.parametrize("record", [DECODE_SKIPPED, {}], ids=["skipped", "missing"])
def test_a_skipped_or_missing_decode_record_leaves_nulls(record):
    m, whole, notes = whole_model.decode_metrics(record, [], peak_gflops=100.0)
    assert whole == [] and len(notes) == 1
    assert m["decode_status"] == ("skipped" if record else "missing")
    assert m["decode_skipped"] == (
        DECODE_SKIPPED["skipped"] if record else "no decode.json: the timing_decode job did not run"
    )
    assert {k: m[k] for k in MEASURED_KEYS} == dict.fromkeys(MEASURED_KEYS)
    assert m["prefill_tokens_per_s"] == {} and m["llama_cpp_status"] is None and m["decode_contexts"] == []


def test_course_points_are_the_printed_numbers():
    spark1, spark256 = lesson.course_points()
    assert spark1["gflops"] == pytest.approx(128 * 0.5) and spark1["intensity"] == pytest.approx(0.5)
    assert spark256["gflops"] == pytest.approx(64 * 256 / 20) and spark256["intensity"] == pytest.approx(128)
    assert spark1["bytes"] == 11008 * 4096 * 4


@pytest.fixture
def no_llama_cpp(monkeypatch):
    """Our decoder only: llama.cpp, where a build is installed, is not what these tests check."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)


def test_a_real_tiny_run_gives_the_metrics_and_the_lessons_own_byte_count(tiny, no_llama_cpp):
    gguf, meta, rows = tiny
    result = quick_decode(gguf)
    s = result["summary"]
    m = lesson.compute(
        meta,
        rows,
        timing_summary=cpu_summary(sweep_rows(50, 200)),
        timing_sweep=as_csv_rows(sweep_rows(50, 200)),
        gpu_summary=GPU_SKIPPED,
        decode_summary=s,
        decode_prefill=as_csv_rows(result["prefill"]),
    )
    for key in (
        "decode_tokens_per_s",
        "decode_bytes_per_token",
        "decode_ceiling_tokens_per_s",
        "decode_fraction_of_read_ceiling",
        "decode_read_ceiling_gbps",
        "decode_flops_per_token",
    ):
        assert m[key] == pytest.approx(s[key]), key
    assert m["decode_tokens_per_s_by_context"] == pytest.approx(s["decode_tokens_per_s_by_context"])
    assert m["decode_streamed_dequant_share"] == pytest.approx(s["streamed"]["dequant_share"])
    # the decoder's float32 bytes are this lesson's weights read per token at 4 bytes each
    assert m["decode_bytes_per_token"] == m["model_float32_bytes_per_token"] == 4 * m["model_weights_read"]
    assert m["prefill_tokens_per_s"] == pytest.approx(s["prefill_tokens_per_s"])
    assert sorted(m["prefill_tokens_per_s"], key=int) == ["1", "4", "16"]
    assert m["decode_target_met"] == s["targets"][0]["met"] and m["llama_cpp_status"] == "skipped"
    assert m["llama_cpp_f32_status"] == "skipped"  # llama.cpp is hidden from these tests
    assert m["decode_bound"] in ("memory", "arithmetic")


def test_another_architecture_gives_null_metrics(tiny, tmp_path, no_llama_cpp):
    gguf, meta, rows = tiny
    other = tmp_path / "g.gguf"
    other.write_bytes(gguf.read_bytes().replace(b"llama", b"gemma", 1))  # general.architecture's value
    s = quick_decode(other)["summary"]
    m = lesson.compute(
        meta,
        rows,
        timing_summary=cpu_summary(sweep_rows(50, 200)),
        timing_sweep=as_csv_rows(sweep_rows(50, 200)),
        gpu_summary=GPU_SKIPPED,
        decode_summary=s,
        decode_prefill=[],
    )
    assert m["decode_status"] == "skipped" and "gemma" in m["decode_skipped"]
    assert {k: m[k] for k in MEASURED_KEYS} == dict.fromkeys(MEASURED_KEYS)
    assert any("whole-model timing not measured" in n for n in m["notes"])


# --- 6. the notebook, standalone, on a tiny model ---------------------------------------------------


@pytest.mark.slow  # a whole notebook again: make test runs every notebook once (test_notebooks)
@pytest.mark.parametrize("gpu", ["measured", "skipped"])
def test_notebook_runs_standalone_from_its_folder(tmp_path, gpu, no_llama_cpp):
    """Default input paths; outputs at the defaults (GPU skipped) or where parameters say (GPU measured).
    The whole-model timing is a real run of our decoder on the tiny model with the GPU measured, a
    skipped record (another architecture) with the GPU skipped."""
    from bytesup.timing.decode import write_decode_results

    pytest.importorskip("papermill")
    (tmp_path / "Snakefile").write_text("# project root marker\n")
    gguf = write_tiny_llama(tmp_path / "tiny.gguf", tied=True)
    base = tmp_path / "results" / "smollm2-135m" / "gguf"
    extract(gguf, base, PATTERNS)
    timing = tmp_path / "results" / "timing" / "smollm2-135m"
    sweep = sweep_rows(50, 200)
    (timing / "cpu").mkdir(parents=True)
    (timing / "cpu" / "summary.json").write_text(json.dumps(cpu_summary(sweep)))
    write_csv(timing / "cpu" / "sweep.csv", sweep)
    gsum, gsweep = gpu_files() if gpu == "measured" else (GPU_SKIPPED, [])  # skipped: a header-only sweep.csv
    (timing / "gpu").mkdir(parents=True)
    (timing / "gpu" / "summary.json").write_text(json.dumps(gsum))
    write_csv(timing / "gpu" / "sweep.csv", gsweep)
    if gpu == "measured":
        decoded = quick_decode(gguf)
    else:
        decoded = {"summary": DECODE_SKIPPED, "prefill": []}
    write_decode_results(decoded, timing / "cpu" / "decode.json", timing / "cpu" / "prefill.csv")
    dsum, dpre = read_timing(timing / "cpu" / "decode.json", timing / "cpu" / "prefill.csv")[:2]
    nb_dir = tmp_path / "workflow" / "notebooks"
    nb_dir.mkdir(parents=True)
    default_out = tmp_path / "results" / "smollm2-135m" / "lessons" / lesson.SPEC.id
    if gpu == "measured":
        out = tmp_path / "elsewhere"
        outputs = {k: str(out / Path(v).name) for k, v in lesson.SPEC.outputs("x").items() if k != "notebook"}
    else:
        out, outputs = default_out, {}
    run_notebook(NOTEBOOK, tmp_path / "executed.ipynb", cwd=nb_dir, **outputs)

    assert sorted(p.name for p in out.iterdir()) == WRITES
    assert default_out.exists() is (gpu == "skipped")
    got = json.loads((out / "metrics.json").read_text())
    want = plain(
        lesson.compute(
            read_metadata(base / "metadata.json"),
            pc.read_tensor_table(base / "tensors.csv"),
            timing_summary=cpu_summary(sweep),
            timing_sweep=as_csv_rows(sweep),
            gpu_summary=gsum,
            gpu_sweep=as_csv_rows(gsweep),
            decode_summary=dsum,
            decode_prefill=dpre,
            model="smollm2-135m",
        )
    )
    for key in want:
        if isinstance(want[key], float):
            assert got[key] == pytest.approx(want[key], rel=1e-12), key
        else:
            assert got[key] == want[key], key
    assert got["is_specimen"] is False and got["gpu_status"] == gpu
    with (out / "whole_model_timing.csv").open(encoding="utf-8") as f:
        whole = list(csv.DictReader(f))
    if gpu == "measured":  # the decoder's record, carried through unchanged
        s = decoded["summary"]
        for key in (
            "decode_tokens_per_s",
            "decode_bytes_per_token",
            "decode_ceiling_tokens_per_s",
            "decode_fraction_of_read_ceiling",
        ):
            assert got[key] == pytest.approx(s[key], rel=1e-12), key
        assert got["prefill_tokens_per_s"] == pytest.approx(s["prefill_tokens_per_s"])
        assert got["decode_bytes_per_token"] == got["model_float32_bytes_per_token"]
        assert [(r["phase"], r["n"], r["context"]) for r in whole] == [
            ("decode", "1", ""),
            ("prefill", "1", ""),
            ("prefill", "4", ""),
            ("prefill", "16", ""),
        ] + [("decode", "1", str(c)) for c in s["decode_tokens_per_s_by_context"]]
    else:  # another architecture: one line in the notebook, nulls in metrics.json
        assert got["decode_status"] == "skipped" and got["decode_skipped"] == DECODE_SKIPPED["skipped"]
        assert {k: got[k] for k in MEASURED_KEYS} == dict.fromkeys(MEASURED_KEYS) and whole == []
        executed = json.loads((tmp_path / "executed.ipynb").read_text())
        said = [o.get("text", "") for c in executed["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
        said = "".join("".join(t) if isinstance(t, list) else t for t in said)
        assert f"whole-model timing: not measured for this model ({DECODE_SKIPPED['skipped']})" in said
    with (out / "roofline_points.csv").open(encoding="utf-8") as f:
        points = list(csv.DictReader(f))
    if gpu == "measured":
        assert got["roofline_gpu_ridge_intensity"] == pytest.approx(400000 / 4000)
        assert len(points) == 27 and {p["device"] for p in points} == {"cpu", "gpu"}
    else:
        assert "roofline_gpu_ridge_intensity" not in got and got["gpu_skipped"] == "no CUDA device"
        assert len(points) == 9 and {p["device"] for p in points} == {"cpu"}
    with (out / "claims.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(claims.COLUMNS)
    assert {r["status"] for r in rows if r["claim_id"] in MODEL_INDEPENDENT} == {"reproduced"}
    assert {r["status"] for r in rows if r["claim_id"] not in MODEL_INDEPENDENT} == {"specimen differs"}
    with (out / "tensor_reads.csv").open(encoding="utf-8") as f:
        reads = list(csv.DictReader(f))
    assert sum(int(r["bytes_read"]) for r in reads) == got["model_bytes_per_token"]
    for name in ("bytes_per_token.png", "prefill.png", "roofline.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert math.isfinite(got["model_bytes_per_token_gb"])

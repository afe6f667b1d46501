"""bytesup.timing.cpu, .measure, .memory and .machine: the counting, statistics and bookkeeping of the
CPU timing job.

Small sizes only (arrays of a few MiB, repeats=3). Nothing here asserts a speed: only
relations that hold whatever the machine (bytes and FLOPs counted right, GB/s = bytes /
median time, ratios read from the table, bit-exactness, the noisy and 'met' logic).
"""

import csv
import json
import math

import numpy as np
import pytest

from bytesup.gguf.file import GGUFFile
from bytesup.model.synthetic import write_tiny_llama
from bytesup.timing import cpu as timing
from bytesup.timing import machine, measure, memory

TINY_CFG = {
    "batch_sizes": [1, 2, 4, 256],
    "repeats": 3,
    "warmup": 1,
    "min_weight_bytes": 1 << 30,  # more than the tiny model has: use every block
    "stream_bytes": 1 << 20,
    "min_sample_ms": 0.0,
    "dequant_types": ["Q8_0", "Q4_1", "Q6_K"],
    "dequant_bytes": 1,
}


@pytest.fixture(scope="module")
def ffn_gguf(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("timing") / "tiny.gguf", n_layers=3)


@pytest.fixture(scope="module")
def tiny_run(ffn_gguf):
    return timing.run_cpu(ffn_gguf, TINY_CFG, threads=1)


# --- statistics -------------------------------------------------------------------------


def test_summarize_median_and_relative_iqr():
    s = measure.summarize([5.0, 1.0, 3.0, 2.0, 4.0], noisy_spread=0.5)
    assert s["median_s"] == 3.0
    assert (s["p25_s"], s["p75_s"], s["min_s"], s["max_s"]) == (2.0, 4.0, 1.0, 5.0)
    assert s["rel_iqr"] == pytest.approx(2.0 / 3.0)
    assert s["noisy"] is True  # 0.667 > 0.5
    assert measure.summarize([5.0, 1.0, 3.0, 2.0, 4.0], noisy_spread=0.7)["noisy"] is False


def test_summarize_identical_times_are_not_noisy_and_one_outlier_does_not_flip_it():
    assert measure.summarize([2.0] * 7, 0.1)["rel_iqr"] == 0.0
    s = measure.summarize([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0], 0.1)
    assert s["median_s"] == 1.0 and s["max_s"] == 9.0 and s["noisy"] is False


class FakeTimer:
    """Every sample 'takes' `seconds`, whatever it runs."""

    def __init__(self, seconds):
        self.seconds = seconds

    def start(self):
        pass

    def stop(self):
        return self.seconds


def test_time_rotation_goes_round_robin_and_divides_by_calls_per_sample():
    order = []
    calls = [lambda: order.append(0), lambda: order.append(1), lambda: order.append(2)]
    times, per_sample = measure.time_rotation(calls, repeats=4, warmup=2, min_sample_s=0.0, timer=FakeTimer(0.5))
    assert per_sample == 1 and times == [0.5] * 4
    # 2 warm-up passes of 3 calls, 1 estimate, 4 samples of 1: 11 calls, strictly rotating
    assert order == [i % 3 for i in range(11)]

    order.clear()
    times, per_sample = measure.time_rotation(calls, repeats=3, warmup=1, min_sample_s=2.0, timer=FakeTimer(0.5))
    assert per_sample == 4  # one call 'took' 0.5 s, a sample must last 2 s
    assert times == [0.5 / 4] * 3
    assert len(order) == 3 + 1 + 3 * 4 and order == [i % 3 for i in range(len(order))]


# --- counting ---------------------------------------------------------------------------


def test_sweep_counts_bytes_and_flops():
    # W 3x4, X 4x2, Y 3x2, float32: (12 + 8 + 6) * 4 bytes; 2 FLOPs per weight per token
    assert timing.sweep_counts(3, 4, 2, 4) == (104, 48)
    assert timing.sweep_counts(11008, 4096, 1, 4) == ((11008 * 4096 + 4096 + 11008) * 4, 2 * 11008 * 4096)


def test_sweep_row_rates_are_counts_over_median():
    stats = measure.summarize([0.002, 0.001, 0.003], 0.1)
    row = timing.sweep_row("matmul", 2, 3, 4, 4, stats, 1, {"dtype": "fp32"})
    assert row["bytes"] == 104 and row["flops"] == 48 and row["weight_bytes"] == 48
    assert row["gbps"] == pytest.approx(104 / 0.002 / 1e9)
    assert row["gflops"] == pytest.approx(48 / 0.002 / 1e9)


def test_time_ratios_and_256_over_1_come_from_the_table():
    def row(n, t, dtype="fp32"):
        return {"op": "matvec" if n == 1 else "matmul", "n": n, "median_s": t, "dtype": dtype}

    rows = timing.add_time_ratios(
        [row(1, 2.0), row(16, 4.0), row(256, 40.0), row(1, 1.0, "bf16"), row(256, 5.0, "bf16")]
    )
    assert [r["time_over_n1"] for r in rows] == [1.0, 2.0, 20.0, 1.0, 5.0]
    assert timing.ratio_256_over_1(rows) == 20.0
    assert timing.ratio_256_over_1(rows, "bf16") == 5.0
    assert timing.ratio_256_over_1([row(1, 1.0), row(16, 2.0)]) is None


def test_stream_counts_bytes_as_stream_does_and_checks_its_arrays():
    rows = memory.stream(1 << 20, threads=2, repeats=3, warmup=1, noisy_spread=0.1)
    assert [r["kernel"] for r in rows] == ["copy", "triad"]
    n = (1 << 20) // 8
    for r, per_element in zip(rows, (16, 24)):
        assert r["array_bytes"] == 8 * n
        assert r["bytes_counted"] == per_element * n
        assert r["gbps"] == pytest.approx(r["bytes_counted"] / r["median_s"] / 1e9)
        assert r["best_gbps"] >= r["gbps"]


def test_read_kernels_count_each_byte_read_once_and_check_their_results():
    rows = memory.read_kernels(1 << 22, threads=2, repeats=3, warmup=1, noisy_spread=0.1)
    assert [r["kernel"] for r in rows] == ["sum", "dot", "gemv", "gemv_columns"]
    n = (1 << 22) // 4
    total, dot, gemv, by_columns = rows
    for row in (total, dot):  # a float32 sum and x . x read each element once
        assert row["bytes_counted"] == row["array_bytes"] == 4 * n
    r, c = memory.gemv_shape(n)
    assert (r, c) == (n // 2 // 4096, 4096) and 2 * r * c <= n  # two matrices share the one buffer
    assert gemv["bytes_counted"] == by_columns["bytes_counted"] == 4 * (r * c + c + r)  # W read, x read, y written
    for row in rows:
        assert row["gbps"] == pytest.approx(row["bytes_counted"] / row["median_s"] / 1e9)
        assert row["best_gbps"] >= row["gbps"] and row["threads"] == 2


def test_gemv_shape_of_a_small_buffer_keeps_two_matrices():
    assert memory.gemv_shape(10) == (1, 5)
    assert memory.gemv_shape(3 * 4096) == (1, 4096)


def test_read_ceiling_is_the_best_read_kernel_and_names_it():
    def row(kernel, gbps, rel_iqr=0.01):
        return {"kernel": kernel, "gbps": gbps, "rel_iqr": rel_iqr, "noisy": rel_iqr > 0.1}

    rows = [row("copy", 30.0), row("triad", 40.0), row("sum", 25.0), row("gemv", 33.0, 0.2), row("copy", 31.0)]
    c = memory.read_ceiling(rows)
    assert (c["gbps"], c["kernel"], c["rel_iqr"], c["noisy"]) == (33.0, "gemv", 0.2, True)  # triad is not a read kernel
    assert c["by_kernel_gbps"] == {"copy": 31.0, "sum": 25.0, "gemv": 33.0}  # copy measured twice: its better run
    assert list(memory.READ_KERNELS) == ["copy", "sum", "dot", "gemv", "gemv_columns"]
    assert memory.read_ceiling([row("copy", 30.0)])["kernel"] == "copy"
    with pytest.raises(measure.TimingError, match="no read kernel"):
        memory.read_ceiling([row("triad", 40.0)])


def test_read_ceiling_across_turns_is_each_kernels_median_then_the_best():
    def row(kernel, gbps, noisy=False):
        return {"kernel": kernel, "gbps": gbps, "rel_iqr": 0.01, "noisy": noisy}

    # a drifting machine (one decode job's figures: copy 33.0 and gemv 30.5 before, 53.1 and 63.2 after)
    turns = [
        [row("copy", 33.0), row("triad", 90.0), row("gemv", 30.5)],
        [row("copy", 35.0), row("gemv", 36.0)],
        [row("copy", 40.0), row("gemv", 38.0, noisy=True)],
        [row("copy", 53.1), row("gemv", 63.2)],
    ]
    c = memory.read_ceiling_across(turns, noisy_spread=0.5)
    assert c["by_kernel_gbps"] == {"copy": 37.5, "gemv": 37.0}  # medians across the turns; triad is no read kernel
    assert (c["gbps"], c["kernel"], c["turns"]) == (37.5, "copy", 4)
    # copy's spread across the turns: p25 34.5, p75 43.275 (numpy's linear percentiles), over its median
    assert c["rel_iqr"] == pytest.approx((43.275 - 34.5) / 37.5) and c["noisy"] is False
    assert c["by_kernel_rel_iqr"]["gemv"] == pytest.approx((44.3 - 34.625) / 37.0)
    assert c["by_turn_gbps"] == {"copy": [33.0, 35.0, 40.0, 53.1], "gemv": [30.5, 36.0, 38.0, 63.2]}
    assert memory.read_ceiling_across(turns, noisy_spread=0.2)["noisy"] is True  # 0.234 > 0.2
    gemv_flagged = memory.read_ceiling_across([[row("gemv", 9.0, noisy=True)], [row("gemv", 9.0)]], 0.5)
    assert gemv_flagged["noisy"] is True  # a turn's own noisy flag carries over


def test_stream_array_size_rule():
    assert memory.stream_bytes_for(32 << 20, None) == 256 << 20  # 4 x 32 MiB < 256 MiB floor
    assert memory.stream_bytes_for(256 << 20, None) == 1 << 30  # 4 x LLC
    assert memory.stream_bytes_for(256 << 20, 1 << 20) == 1 << 20  # configured wins


def test_other_processes_share_subtracts_our_own_cpu_time():
    # 2 s on 2 CPUs = 4 CPU-s; the machine was busy 3 CPU-s, 1 of them ours: others used 2 of 4
    assert machine.other_cpu_fraction((0.0, 10.0, 5.0), (2.0, 13.0, 6.0), cpus=2) == 0.5
    assert machine.other_cpu_fraction((0.0, 10.0, 5.0), (2.0, 12.0, 7.0), cpus=2) == 0.0  # all ours
    assert machine.other_cpu_fraction(None, (2.0, 12.0, 7.0), cpus=2) is None  # no /proc/stat


def test_llc_is_read_from_the_machine():
    size, source = machine.llc_bytes()
    assert size > 0 and source


# --- weights and the sweep --------------------------------------------------------------


def test_ffn_buffers_stack_real_weights_until_big_enough(ffn_gguf):
    model = GGUFFile(ffn_gguf)
    gate = model.tensor("blk.0.ffn_gate.weight").shape  # (64, 32) numpy order
    one = timing.ffn_weight_buffers(model, min_bytes=1)
    assert [m.shape for m in one.matrices] == [gate, gate]
    np.testing.assert_array_equal(one.matrices[0], model.load("blk.0.ffn_gate.weight"))
    np.testing.assert_array_equal(one.matrices[1], model.load("blk.0.ffn_up.weight"))

    two = timing.ffn_weight_buffers(model, min_bytes=gate[0] * gate[1] * 4 + 1)  # > one block: two
    assert two.matrices[0].shape == (2 * gate[0], gate[1])
    np.testing.assert_array_equal(two.matrices[0][gate[0] :], model.load("blk.1.ffn_gate.weight"))
    assert two.tensors == [
        "blk.0.ffn_gate.weight",
        "blk.1.ffn_gate.weight",
        "blk.0.ffn_up.weight",
        "blk.1.ffn_up.weight",
    ]

    every = timing.ffn_weight_buffers(model, min_bytes=1 << 40)
    assert every.matrices[0].shape == (3 * gate[0], gate[1])
    d = every.describe(llc=1 << 20)
    assert d["total_bytes"] == 2 * 3 * gate[0] * gate[1] * 4
    assert d["cold"] is False  # 24 KiB matrices do not exceed a 1 MiB cache
    assert timing.ffn_weight_buffers(model, 1).describe(llc=1)["cold"] is True


def test_matvec_sweep_rows_per_n(ffn_gguf):
    weights = timing.ffn_weight_buffers(GGUFFile(ffn_gguf), 1 << 40)
    rows = timing.matvec_sweep(weights.matrices, [1, 2, 8], repeats=3, warmup=1, seed=0, noisy_spread=0.1)
    r, c = weights.matrices[0].shape
    assert [(x["op"], x["n"]) for x in rows] == [("matvec", 1), ("matmul", 2), ("matmul", 8)]
    for x in rows:
        assert (x["bytes"], x["flops"]) == timing.sweep_counts(r, c, x["n"], 4)
        assert x["time_over_n1"] == pytest.approx(x["median_s"] / rows[0]["median_s"])


def test_split_matvec_counts_as_the_sweeps_matvec_and_computes_w_times_x(ffn_gguf):
    weights = timing.ffn_weight_buffers(GGUFFile(ffn_gguf), 1 << 40)
    row = timing.split_matvec(weights.matrices, 2, repeats=3, warmup=1, seed=0, noisy_spread=0.1, min_sample_s=0.0)
    r, c = weights.matrices[0].shape
    assert (row["op"], row["n"], row["threads"]) == ("matvec_split", 1, 2)
    assert (row["bytes"], row["flops"]) == timing.sweep_counts(r, c, 1, 4)
    assert row["gbps"] == pytest.approx(row["bytes"] / row["median_s"] / 1e9)


def test_long_runs_matvec_reads_column_major_copies_and_computes_w_times_x(ffn_gguf):
    weights = timing.ffn_weight_buffers(GGUFFile(ffn_gguf), 1 << 40)
    row = timing.long_runs_matvec(weights.matrices, repeats=3, warmup=1, seed=0, noisy_spread=0.1, min_sample_s=0.0)
    r, c = weights.matrices[0].shape
    assert r >= c and (row["op"], row["n"], row["layout"]) == ("matvec_long_runs", 1, "long-runs")
    assert (row["bytes"], row["flops"]) == timing.sweep_counts(r, c, 1, 4)
    assert row["gbps"] == pytest.approx(row["bytes"] / row["median_s"] / 1e9)
    wide = [np.ones((4, 8), np.float32)]  # more columns than rows: that layout keeps it row-major
    assert timing.long_runs_matvec(wide, repeats=3, warmup=1, seed=0, noisy_spread=0.1, min_sample_s=0.0) is None


# --- targets ----------------------------------------------------------------------------


def test_fraction_target():
    copy = {"gbps": 10.0, "noisy": False}
    assert timing.fraction_target("x", {"gbps": 8.0, "noisy": False}, copy)["met"] is True
    t = timing.fraction_target("x", {"gbps": 7.9, "noisy": True}, copy)
    assert t["met"] is False and t["noisy"] is True and t["measured"] == pytest.approx(0.79)
    assert t["unit"] == "fraction of copy GB/s" and t["target"] == 0.8


# --- settings ---------------------------------------------------------------------------


def test_settings_fill_defaults_and_refuse_nonsense():
    s = timing.settings({"repeats": 9})
    assert s["repeats"] == 9 and s["batch_sizes"] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    with pytest.raises(timing.TimingError, match="unknown key"):
        timing.settings({"repeat": 9})
    with pytest.raises(timing.TimingError, match="include 1"):
        timing.settings({"batch_sizes": [2, 4]})
    with pytest.raises(timing.TimingError, match="too few"):
        timing.settings({"repeats": 2})


# --- the whole job ----------------------------------------------------------------------


def test_run_cpu_summary_is_consistent_with_its_tables(tiny_run):
    s, sweep, stream = tiny_run["summary"], tiny_run["sweep"], tiny_run["stream"]
    copy, triad, total, dot, gemv, by_columns = stream
    assert [r["kernel"] for r in stream] == ["copy", "triad", "sum", "dot", "gemv", "gemv_columns"]
    n1 = next(r for r in sweep if r["n"] == 1)
    assert s["status"] == "measured" and s["device"] == "cpu"
    assert s["stream_copy_gbps"] == copy["gbps"] and s["stream_triad_gbps"] == triad["gbps"]
    assert s["matvec_cold_gbps"] == n1["gbps"]
    assert s["matvec_fraction_of_copy"] == pytest.approx(n1["gbps"] / copy["gbps"])
    best = max((copy, total, dot, gemv, by_columns), key=lambda r: r["gbps"])
    assert (s["read_ceiling_gbps"], s["read_ceiling_kernel"]) == (best["gbps"], best["kernel"])
    assert s["matvec_fraction_of_read_ceiling"] == pytest.approx(n1["gbps"] / best["gbps"])
    assert s["matmul_ratio_256_over_1"] == pytest.approx(sweep[-1]["median_s"] / n1["median_s"])
    assert [r["n"] for r in sweep] == s["batch_sizes"] == [1, 2, 4, 256]
    assert set(s["dequant"]) == {"Q8_0", "Q4_1", "Q6_K"}
    for t in ("Q8_0", "Q4_1"):
        assert set(s["dequant"][t]) >= {"ours_mbps", "gguf_mbps", "ratio", "bit_exact"}
        assert s["dequant"][t]["bit_exact"] is True
    assert "skipped" in s["dequant"]["Q6_K"]
    names = [t["name"] for t in s["targets"]]
    assert names == [
        "dequant_Q8_0_speedup_over_gguf",
        "dequant_Q4_1_speedup_over_gguf",
        "dequant_Q6_K_speedup_over_gguf",
        "matvec_cold_fraction_of_stream_copy",
    ]
    matvec_goal = s["targets"][-1]  # the faster way of the cold matvec against copy
    ways = {
        "BLAS's own threads": n1["gbps"],
        "1 worker over their own rows": s["matvec_cold_split_gbps"],
        "column-major copies (the long-runs layout)": s["matvec_cold_long_runs_gbps"],
    }
    fastest = max(ways, key=ways.get)
    assert matvec_goal["measured"] == pytest.approx(ways[fastest] / copy["gbps"])
    assert matvec_goal["note"] == f"the fastest of {', '.join(ways)}: {fastest}"
    assert s["matvec_cold_split_fraction_of_copy"] == pytest.approx(s["matvec_cold_split_gbps"] / copy["gbps"])
    assert s["matvec_cold_long_runs_fraction_of_copy"] == pytest.approx(s["matvec_cold_long_runs_gbps"] / copy["gbps"])
    for t in s["targets"]:
        assert set(t) >= {"name", "target", "measured", "unit", "met"}
        if t["name"].startswith("dequant_Q6_K"):  # asked for, absent from the tiny model: listed, not met
            assert t["measured"] is None and t["met"] is None
        else:
            assert t["met"] == (t["measured"] >= t["target"])  # every figure measured, bit-exact
    m = s["machine"]
    assert m["threads"] == 1 and m["llc_bytes"] > 0 and m["cpu_model"]
    assert all(lib["num_threads"] == 1 for lib in m["blas"])  # threadpoolctl limit was in force
    assert len(s["load_average_before"]) == len(s["load_average_after"]) == 3
    assert s["other_processes_cpu_fraction"] >= 0.0
    assert s["machine_shared"] == (s["other_processes_cpu_fraction"] > machine.BUSY_OTHER_FRACTION)
    assert s["weights"]["tensors"][0] == "blk.0.ffn_gate.weight" and s["settings"]["seed"] == 0


def test_run_cpu_writes_json_and_csvs(tiny_run, tmp_path):
    paths = {name: tmp_path / f"{name}.csv" for name in ("sweep", "stream", "dequant")}
    timing.write_results(tiny_run, tmp_path / "summary.json", paths)
    back = json.loads((tmp_path / "summary.json").read_text())
    assert back == json.loads(json.dumps(tiny_run["summary"]))
    with open(paths["sweep"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["n"]) for r in rows] == [1, 2, 4, 256]  # one row per N (the lesson reads it)
    assert {"n", "median_s", "gflops", "gbps", "time_over_n1"} <= set(rows[0])
    assert math.isclose(float(rows[0]["gbps"]), tiny_run["summary"]["matvec_cold_gbps"])
    with open(paths["dequant"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["type"] for r in rows] == ["Q8_0", "Q4_1", "Q6_K"]  # one row per type, the report prints it
    q8 = rows[0]
    assert q8["tensors"] == "token_embd.weight" and q8["target"] == "5.0" and q8["met"] in ("True", "False")
    assert float(q8["ratio"]) == pytest.approx(float(q8["gguf_median_s"]) / float(q8["ours_median_s"]))
    assert rows[2]["present"] == "False" and rows[2]["ratio"] == ""


def _shape(value):
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__ if not isinstance(value, (int, float)) or isinstance(value, bool) else "number"


def test_summary_structure_is_deterministic(ffn_gguf, tiny_run):
    again = timing.run_cpu(ffn_gguf, TINY_CFG, threads=1)["summary"]
    first = dict(tiny_run["summary"])
    for s in (first, again):  # which N comes out noisy is the one thing allowed to differ
        s.pop("noisy")
        for t in s["targets"]:
            t.pop("noisy")
        for d in s["dequant"].values():
            d.pop("noisy", None)
    assert _shape(first) == _shape(again)
    assert list(first) == list(again)


def test_a_model_without_an_ffn_is_a_one_line_error(tmp_path):
    class NoFFN:
        path = tmp_path / "x.gguf"
        tensors = []

    with pytest.raises(timing.TimingError, match=r"x\.gguf: no blk\.N\.ffn_gate") as err:
        timing.ffn_weight_buffers(NoFFN(), 1)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_default_model_weights(default_gguf):
    """On SmolLM2-135M: the sweep stacks its 1536 x 576 Q4_1 FFN matrices."""
    with GGUFFile(default_gguf) as model:
        weights = timing.ffn_weight_buffers(model, min_bytes=64 << 20)
        assert [m.shape for m in weights.matrices] == [(19 * 1536, 576)] * 2  # 19 blocks: >= 64 MiB each
        assert weights.describe(32 << 20)["source_types"] == ["Q4_1"]


def test_the_sweep_figures_memory_roof_is_the_read_ceiling_where_measured():
    from bytesup.timing.plots import roof_bandwidth

    assert roof_bandwidth({"stream_copy_gbps": 30.0, "read_ceiling_gbps": 33.0, "read_ceiling_kernel": "sum"}) == (
        33.0,
        "read ceiling (sum)",
    )
    assert roof_bandwidth({"stream_copy_gbps": 30.0}) == (30.0, "copy bandwidth")  # a summary from before the kernels

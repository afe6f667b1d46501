"""bytesup.timing.dequant_bench: the dequantizer benchmark's counting, bit checks, targets and command.

Nothing here asserts a speed: only relations that hold whatever the machine (rates follow the
counts, ratios are read from the times, a wrong dequantizer is caught however fast it is).
"""

import numpy as np
import pytest

from bytesup.gguf.dequant import dequantize
from bytesup.gguf.file import GGUFFile
from bytesup.model.synthetic import write_tiny_llama
from bytesup.timing import dequant_bench as bench


@pytest.fixture(scope="module")
def ffn_gguf(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("dequant_bench") / "tiny.gguf", n_layers=3)


# --- dequantization ---------------------------------------------------------------------


def test_dequant_bench_is_bit_exact_and_rates_follow_the_counts(ffn_gguf):
    rows = bench.dequant_bench(
        GGUFFile(ffn_gguf), ["Q8_0", "Q4_1", "Q6_K"], budget_bytes=1, repeats=3, warmup=1, noisy_spread=0.1
    )
    by_type = {r["type"]: r for r in rows}
    for t, goal in (("Q8_0", 5.0), ("Q4_1", 3.0)):
        r = by_type[t]
        assert r["present"] and r["hand_written"] and r["bit_exact"] is True
        assert r["n_tensors"] == 1  # budget of 1 byte: the first tensor of that type
        assert r["ours_mbps"] == pytest.approx(r["quant_bytes"] / r["ours_median_s"] / 1e6)
        assert r["ratio"] == pytest.approx(r["gguf_median_s"] / r["ours_median_s"])
        assert r["ratio"] == pytest.approx(r["ours_mbps"] / r["gguf_mbps"])
        assert r["target"] == goal and r["met"] == (r["ratio"] >= goal) and r["threads"] == 1
    assert by_type["Q6_K"] == {"type": "Q6_K", "present": False, "note": "no Q6_K tensors in this model", "target": 3.0}


def test_dequant_bench_covers_every_type_of_the_model(ffn_gguf):
    """types=None: one row per type the model holds, in file order, the tensor named; floats have no goal."""
    model = GGUFFile(ffn_gguf)
    held = list(dict.fromkeys(t.type_name for t in model.tensors))
    rows = bench.dequant_bench(model, None, budget_bytes=1, repeats=3, warmup=0, noisy_spread=0.1, threads=2)
    assert [r["type"] for r in rows] == held == bench.model_types(model)
    assert "F32" in held and "Q4_1" in held
    for r in rows:
        first = next(t.name for t in model.tensors if t.type_name == r["type"])
        assert r["tensors"] == first and r["bit_exact"] is True and r["threads"] == 2
        assert r["target"] == bench.dequant_goal(r["type"])
    assert bench.dequant_goal("F32") is None and bench.dequant_goal("Q6_K") == 3.0
    assert [t["name"] for t in bench.dequant_targets(rows)] == [
        f"dequant_{t}_speedup_over_gguf" for t in held if t not in ("F32", "F16", "BF16")
    ]


def test_dequant_bench_catches_a_wrong_dequantizer(ffn_gguf):
    def off_by_one_ulp(raw, type_name, shape):
        out = dequantize(raw, type_name, shape)
        return np.nextafter(out, np.inf, dtype=np.float32)

    [row] = bench.dequant_bench(GGUFFile(ffn_gguf), ["Q8_0"], 1, 3, 1, 0.1, ours=off_by_one_ulp, hand_written=set())
    assert row["bit_exact"] is False and row["hand_written"] is False
    targets = bench.dequant_targets([dict(row, ratio=100.0)])  # fast is no excuse for wrong
    [t] = [t for t in targets if t["name"].startswith("dequant_Q8_0")]
    assert t["met"] is False and "bit-exact" in t["note"]


# --- targets ----------------------------------------------------------------------------


def _deq(type_name, ratio, exact=True, noisy=False):
    return {"type": type_name, "present": True, "ratio": ratio, "bit_exact": exact, "noisy": noisy}


def test_dequant_targets_met_logic():
    rows = [_deq("Q8_0", 5.0), _deq("Q4_1", 2.99, noisy=True), _deq("Q6_K", 3.0), _deq("F32", 1.1)]
    targets = {t["name"]: t for t in bench.dequant_targets(rows)}
    q8, q4 = targets["dequant_Q8_0_speedup_over_gguf"], targets["dequant_Q4_1_speedup_over_gguf"]
    assert (q8["target"], q8["measured"], q8["met"]) == (5.0, 5.0, True)  # >= is met
    assert (q4["target"], q4["measured"], q4["met"], q4["noisy"]) == (3.0, 2.99, False, True)  # a miss stays
    assert targets["dequant_Q6_K_speedup_over_gguf"]["met"] is True  # any other quantized type: 3x
    assert list(targets) == [
        "dequant_Q8_0_speedup_over_gguf",
        "dequant_Q4_1_speedup_over_gguf",
        "dequant_Q6_K_speedup_over_gguf",
    ]  # F32 is a copy: measured, no goal


def test_dequant_target_for_an_unmeasured_type_is_listed_not_dropped():
    absent = {"type": "Q4_1", "present": False, "note": "no Q4_1 tensors in this model"}
    [q8, q4] = bench.dequant_targets([_deq("Q8_0", 9.0), absent])
    assert q8["met"] is True
    assert q4["name"] == "dequant_Q4_1_speedup_over_gguf" and q4["target"] == 3.0
    assert q4["measured"] is None and q4["met"] is None and "not measured: no Q4_1 tensors" in q4["note"]


def test_dequant_row_spread_is_the_per_repeat_ratios(ffn_gguf, monkeypatch):
    """ours takes 1 s every time, gguf-py 2..6 s: the ratio is the medians' (4), the spread the per-repeat ratios'."""
    clock, ref_times = [0.0], iter([2.0, 3.0, 4.0, 5.0, 6.0])
    monkeypatch.setattr(bench, "perf_counter", lambda: clock[0])

    def ours(raw, type_name, shape):
        clock[0] += 1.0
        return dequantize(raw, type_name, shape)

    def reference(raw, type_name, shape):
        clock[0] += next(ref_times)
        return dequantize(raw, type_name, shape)

    monkeypatch.setattr(bench, "reference_dequantize", reference)
    [row] = bench.dequant_bench(GGUFFile(ffn_gguf), ["Q4_1"], 1, 5, 0, 0.1, ours=ours, hand_written={"Q4_1"})
    assert (row["ratio"], row["ratio_p25"], row["ratio_p75"], row["ratio_rel_iqr"]) == (4.0, 3.0, 5.0, 0.5)
    assert (row["ours_median_s"], row["gguf_median_s"], row["met"]) == (1.0, 4.0, True)
    assert set(bench.COLUMNS) >= set(row)  # every figure of a row has its column in dequant.csv
    summary = bench.dequant_summary([row, {"type": "Q6_K", "present": False, "note": "no Q6_K tensors"}])
    assert summary["Q4_1"]["ratio"] == 4.0 and summary["Q6_K"] == {"skipped": "no Q6_K tensors"}


def test_the_command_prints_one_line_per_type(ffn_gguf, capsys):
    assert bench.main([str(ffn_gguf), "--types", "Q8_0,Q4_1,Q6_K", "--threads", "2", "--repeats", "3",
                       "--warmup", "0", "--bytes", "1"]) == 0  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert "2 thread(s), 3 repeats; load average before" in out[0]
    lines = {line.split()[0]: line for line in out[2:]}
    assert list(lines) == ["Q8_0", "Q4_1", "Q6_K"]
    assert lines["Q8_0"].split()[-1] in ("yes", "NO") and " 5.0x " in lines["Q8_0"]
    assert "no Q6_K tensors in this model" in lines["Q6_K"]


@pytest.mark.slow
def test_default_model_dequant(default_gguf):
    """On SmolLM2-135M: its first Q8_0 tensor is the embedding table, cut to whole rows; bit-exact."""
    with GGUFFile(default_gguf) as model:
        rows = bench.dequant_bench(model, ["Q8_0", "Q4_1"], 1, repeats=3, warmup=1, noisy_spread=0.1)
    assert [(r["type"], r["n_tensors"], r["bit_exact"]) for r in rows] == [("Q8_0", 1, True), ("Q4_1", 1, True)]
    assert rows[0]["tensors"] == "token_embd.weight" and rows[0]["elements"] == 576  # one row of 576

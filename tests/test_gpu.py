"""bytesup.timing.gpu: the GPU job's decisions, and its CPU twin (CI has no GPU).

The twin runs the very functions the GPU job runs, on torch device 'cpu'; it is skipped
when torch is not installed. No test asserts a speed.
"""

import json
import sys

import pytest

from bytesup.model.synthetic import write_tiny_llama
from bytesup.model.weights import DEFAULT_RESIDENT_BUDGET
from bytesup.timing import cpu as timing
from bytesup.timing import gpu

TINY_CFG = {
    "batch_sizes": [1, 2, 256],
    "repeats": 3,
    "warmup": 1,
    "min_weight_bytes": 1 << 30,
    "stream_bytes": 1 << 20,
    "min_sample_ms": 0.0,
    "decode_tokens": 4,
    "prefill_sizes": [1, 8, 32, 512],  # 512 > the tiny model's context (128): left out
}


@pytest.fixture(scope="module")
def twin_gguf(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("gpu") / "tiny.gguf", n_layers=2)


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(gpu, "cuda_status", lambda: (False, "no CUDA device"))


# --- gpu: auto | on | off ---------------------------------------------------------------


def test_without_torch_the_reason_says_so(monkeypatch):
    monkeypatch.setattr(gpu, "nvidia_driver_seen", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    assert gpu.cuda_status() == (False, "no CUDA device (torch not installed)")
    assert gpu.resolve_device("auto") == (None, "no CUDA device (torch not installed)")


def test_without_a_driver_torch_is_not_even_imported(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "DRIVER_PATHS", (str(tmp_path / "no-driver"),))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    monkeypatch.setitem(sys.modules, "torch", None)  # an import would give the torch reason instead
    assert gpu.cuda_status() == (False, "no CUDA device (no NVIDIA driver on this machine)")
    (tmp_path / "no-driver").mkdir()  # a driver's /proc entry: now torch is asked
    assert gpu.cuda_status() == (False, "no CUDA device (torch not installed)")


def test_auto_without_cuda_writes_a_skipped_record(no_cuda, twin_gguf, tmp_path):
    result = gpu.run_gpu(twin_gguf, TINY_CFG, mode="auto")
    s = result["summary"]
    assert s["status"] == "skipped" and s["skipped"] == "no CUDA device" and s["gpu_mode"] == "auto"
    assert result["sweep"] == result["stream"] == [] and s["targets"] == [] and s["dequant"] == {}
    # the same top-level keys the report reads from a measured summary, with no figures
    for key in (
        "stream_copy_gbps",
        "stream_triad_gbps",
        "matvec_cold_gbps",
        "matvec_fraction_of_copy",
        "matmul_ratio_256_over_1",
        "read_ceiling_gbps",
        *gpu.DECODE_KEYS,
    ):
        assert s[key] is None
    paths = {"sweep": tmp_path / "sweep.csv", "stream": tmp_path / "stream.csv"}
    timing.write_results(result, tmp_path / "summary.json", paths)
    assert json.loads((tmp_path / "summary.json").read_text())["skipped"] == "no CUDA device"
    assert paths["sweep"].read_text().splitlines() == [",".join(timing.TABLE_COLUMNS["sweep"])]  # header only


def test_auto_without_torch_writes_the_torch_reason(monkeypatch, twin_gguf):
    monkeypatch.setattr(gpu, "nvidia_driver_seen", lambda: True)  # a driver, but no torch
    monkeypatch.setitem(sys.modules, "torch", None)
    s = gpu.run_gpu(twin_gguf, TINY_CFG, mode="auto")["summary"]
    assert s["skipped"] == "no CUDA device (torch not installed)"


def test_on_without_cuda_is_a_clear_one_line_error(no_cuda, twin_gguf):
    with pytest.raises(gpu.GPUUnavailable) as err:
        gpu.run_gpu(twin_gguf, TINY_CFG, mode="on")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("gpu: on in config, but no CUDA device") and "gpu: auto" in message


def test_on_without_torch_names_the_extra(monkeypatch):
    monkeypatch.setattr(gpu, "nvidia_driver_seen", lambda: True)  # a driver, but no torch
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(gpu.GPUUnavailable, match=r"torch not installed.*bytesup\[gpu\]"):
        gpu.resolve_device("on")


def test_off_skips_even_with_cuda(monkeypatch):
    monkeypatch.setattr(gpu, "cuda_status", lambda: (True, ""))
    assert gpu.resolve_device("off") == (None, "gpu: off in config")
    assert gpu.resolve_device("auto") == ("cuda", "")
    assert gpu.resolve_device("on") == ("cuda", "")


def test_yaml_booleans_mean_on_and_off(no_cuda):
    assert gpu.resolve_device(False) == (None, "gpu: off in config")
    with pytest.raises(gpu.GPUUnavailable, match="gpu: on in config"):
        gpu.resolve_device(True)


def test_unknown_mode_is_refused():
    with pytest.raises(gpu.GPUUnavailable, match="not one of auto, on, off"):
        gpu.resolve_device("yes")


# --- the CPU twin -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def twin(twin_gguf):
    pytest.importorskip("torch", reason="torch not installed: the GPU job's CPU twin needs it")
    return gpu.run_gpu(twin_gguf, TINY_CFG, mode="auto", device="cpu")


def test_twin_measures_both_dtypes_with_the_cpu_jobs_counting(twin):
    s, sweep = twin["summary"], twin["sweep"]
    assert s["status"] == "measured" and s["device"] == "cpu"
    assert [(r["dtype"], r["n"]) for r in sweep] == [
        ("fp32", 1),
        ("fp32", 2),
        ("fp32", 256),
        ("bf16", 1),
        ("bf16", 2),
        ("bf16", 256),
    ]
    for r in sweep:
        assert r["itemsize"] == {"fp32": 4, "bf16": 2}[r["dtype"]]
        assert (r["bytes"], r["flops"]) == timing.sweep_counts(r["rows"], r["cols"], r["n"], r["itemsize"])
        assert r["gbps"] == pytest.approx(r["bytes"] / r["median_s"] / 1e9)
    for dtype in ("fp32", "bf16"):
        rows = {r["n"]: r for r in sweep if r["dtype"] == dtype}
        d = s["by_dtype"][dtype]
        assert d["matvec_cold_gbps"] == rows[1]["gbps"]
        assert d["matmul_ratio_256_over_1"] == pytest.approx(rows[256]["median_s"] / rows[1]["median_s"])
        assert d["matvec_fraction_of_copy"] == pytest.approx(rows[1]["gbps"] / s["stream_copy_gbps"])
    assert s["matvec_cold_gbps"] == s["by_dtype"]["fp32"]["matvec_cold_gbps"]  # headline is fp32


def test_twin_stream_and_targets(twin):
    s = twin["summary"]
    copy, triad, total, dot, gemv = twin["stream"]
    n = (1 << 20) // 8
    assert (copy["bytes_counted"], triad["bytes_counted"]) == (16 * n, 24 * n)
    r, c = gpu.memory.gemv_shape(2 * n)  # the read kernels' float32 buffer: as many bytes as one STREAM array
    assert (total["bytes_counted"], dot["bytes_counted"], gemv["bytes_counted"]) == (8 * n, 8 * n, 4 * (r * c + c + r))
    assert s["stream_copy_gbps"] == copy["gbps"] and s["stream_triad_gbps"] == triad["gbps"]
    assert [t["name"] for t in s["targets"]] == [
        "device_matvec_fp32_fraction_of_device_copy",
        "device_matvec_bf16_fraction_of_device_copy",
    ]
    for t in s["targets"]:
        assert t["target"] == 0.8 and t["met"] == (t["measured"] >= 0.8)
    assert s["machine"]["type"] == "cpu" and "CPU twin" in s["machine"]["name"]
    assert s["dequant"] == {}  # same shape as the CPU summary; dequantization is a host job
    json.dumps(s, allow_nan=False)


def test_twin_sweep_computes_w_times_x(twin_gguf):
    torch = pytest.importorskip("torch")
    import numpy as np

    weights = timing.ffn_weight_buffers(timing.open_model(twin_gguf), 1)
    w = weights.matrices[0]
    x = np.arange(w.shape[1], dtype=np.float32) / w.shape[1]
    got = torch.matmul(torch.from_numpy(w), torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, w @ x, rtol=1e-5, atol=1e-6)  # the op the sweep times


# --- the whole-model decode in the twin ------------------------------------------------


def test_twin_decode_numbers_follow_their_definitions(twin, twin_gguf):
    from bytesup.model.forward import Model, weight_float32_bytes_per_token

    s = twin["summary"]
    assert "decode_skipped" not in s and s["decode_tokens"] == 4
    with Model.from_gguf(twin_gguf) as model:
        bytes_per_token = model.weight_bytes_per_token().float32_bytes
        assert bytes_per_token == weight_float32_bytes_per_token(model.spec)
    assert s["decode_bytes_per_token"] == bytes_per_token
    assert s["decode_tokens_per_s"] == pytest.approx(1.0 / s["decode_median_s"])
    # ceiling = the job's own device read ceiling (best of copy, sum, gemv) / bytes per token
    best = max((r for r in twin["stream"] if r["kernel"] in ("copy", "sum", "dot", "gemv")), key=lambda r: r["gbps"])
    assert s["decode_read_ceiling_gbps"] == s["read_ceiling_gbps"] == best["gbps"]
    assert s["decode_read_ceiling_kernel"] == s["read_ceiling_kernel"] == best["kernel"]
    assert s["decode_ceiling_tokens_per_s"] == pytest.approx(best["gbps"] * 1e9 / bytes_per_token)
    assert s["decode_fraction_of_read_ceiling"] == pytest.approx(
        s["decode_tokens_per_s"] / s["decode_ceiling_tokens_per_s"]
    )
    assert s["decode_gbps"] == pytest.approx(bytes_per_token * s["decode_tokens_per_s"] / 1e9)
    assert s["decode_rel_iqr"] >= 0 and isinstance(s["decode_noisy"], bool)
    assert s["decode_budget_bytes"] == DEFAULT_RESIDENT_BUDGET == 4 << 30  # the twin's facts carry no device memory
    # prefill: tokens/s = N / median seconds, for each N the context holds
    rows = twin["prefill"]
    assert [r["n"] for r in rows] == [1, 8, 32] and list(s["prefill_tokens_per_s"]) == ["1", "8", "32"]
    for r in rows:
        assert r["repeats"] == TINY_CFG["repeats"] and r["device"] == "cpu"
        assert s["prefill_tokens_per_s"][str(r["n"])] == r["tokens_per_s"] == pytest.approx(r["n"] / r["median_s"])
    assert {"decode", "decode_ceiling", "prefill"} <= set(s["counting"])
    json.dumps(s, allow_nan=False)


def test_twin_decode_uses_the_torch_forward_pass(twin_gguf):
    """The job's timers around forward_torch: one time per decode step after the prompt and the
    warm-up (the cache ends there), one per prefill repeat. (Its logits: test_model_forward_torch.)"""
    torch = pytest.importorskip("torch")
    from bytesup.model.forward import Model
    from bytesup.model.forward_torch import TorchModel

    with Model.from_gguf(twin_gguf) as model:
        twin = TorchModel.from_model(model, "cpu")
        decode = gpu.time_device_decode(torch, "cpu", twin, n_tokens=3, warmup=1)
        assert len(decode["times"]) == 3 and all(t > 0 for t in decode["times"])
        assert decode["context_end"] == gpu.PROMPT_LEN + 1 + 3
        assert len(gpu.time_prefill(twin, 8, repeats=3, warmup=1, timer=gpu.device_timer(torch, "cpu"))) == 3


def test_decode_is_skipped_with_its_reason_when_over_budget(twin_gguf):
    pytest.importorskip("torch")
    cfg = dict(TINY_CFG, batch_sizes=[1])
    result = gpu.run_gpu(twin_gguf, cfg, mode="auto", device="cpu", decode_budget_bytes=1000)
    s = result["summary"]
    assert s["status"] == "measured" and s["matvec_cold_gbps"] > 0  # the sweep still ran
    assert s["decode_skipped"].startswith(f"{twin_gguf}: float32 weights of ")
    assert "exceed the decode budget of 1,000 bytes" in s["decode_skipped"] and "\n" not in s["decode_skipped"]
    for key in gpu.DECODE_KEYS:
        assert s[key] is None
    assert s["prefill_tokens_per_s"] == {} and result["prefill"] == []
    json.dumps(s, allow_nan=False)


def test_decode_is_skipped_for_what_the_forward_pass_does_not_follow(tmp_path):
    torch = pytest.importorskip("torch")
    path = write_tiny_llama(tmp_path / "yarn.gguf", extra_metadata={"llama.rope.scaling.type": "yarn"})
    out = gpu.device_decode(torch, "cpu", path, timing.settings(TINY_CFG), 10.0, 1 << 30)
    assert (
        out["decode_skipped"] == f"{path}: llama: rope scaling 'yarn' (llama.rope.scaling.type) is not followed"
        " by the forward pass (it follows none, linear)"
    )
    assert out["decode_tokens_per_s"] is None and out["prefill_rows"] == []


def test_decode_budget_is_device_memory_minus_headroom():
    assert gpu.decode_budget({"memory_bytes": 80 << 30}) == 72 << 30  # 10% of 80 GiB > 4 GiB
    assert gpu.decode_budget({"memory_bytes": 16 << 30}) == 12 << 30  # 4 GiB > 10% of 16 GiB
    assert gpu.decode_budget({"memory_bytes": 2 << 30}) == 0
    assert gpu.decode_budget({"memory_bytes": None}) == DEFAULT_RESIDENT_BUDGET  # the CPU twin


@pytest.mark.skipif(not gpu.cuda_status()[0], reason="no CUDA device")
def test_on_a_cuda_device(twin_gguf):
    s = gpu.run_gpu(twin_gguf, TINY_CFG, mode="on")["summary"]
    assert s["status"] == "measured" and s["device"] == "cuda" and s["machine"]["name"]
    assert s["counting"]["timer"].startswith("CUDA events")
    assert "decode_skipped" not in s and s["decode_tokens_per_s"] > 0 and 0 < s["decode_fraction_of_read_ceiling"]


# --- the CUDA-only pieces, against a stand-in for torch.cuda ----------------------------


class _FakeEvent:
    def __init__(self, enable_timing):
        assert enable_timing is True
        self.recorded = self.synced = 0

    def record(self):
        self.recorded += 1

    def synchronize(self):
        self.synced += 1

    def elapsed_time(self, end):
        return 2.5  # milliseconds, as torch reports them


def _fake_torch():
    from types import SimpleNamespace

    props = SimpleNamespace(
        name="Fake GPU", total_memory=80 << 30, major=9, minor=0, multi_processor_count=132, L2_cache_size=50 << 20
    )
    cuda = SimpleNamespace(Event=_FakeEvent, current_device=lambda: 0, get_device_properties=lambda i: props)
    return SimpleNamespace(
        cuda=cuda,
        device=lambda d: SimpleNamespace(type=d.split(":")[0], index=None),
        version=SimpleNamespace(cuda="12.8"),
        get_float32_matmul_precision=lambda: "highest",
    )


def test_cuda_event_timer_reports_seconds_after_waiting_for_the_end_event():
    timer = gpu.device_timer(_fake_torch(), "cuda")
    assert isinstance(timer, gpu.CudaEventTimer)
    timer.start()
    assert timer.stop() == 0.0025
    assert timer._start.recorded == timer._end.recorded == timer._end.synced == 1


def test_cuda_device_facts(monkeypatch):
    monkeypatch.setattr(gpu, "_nvidia_smi", lambda index: {"driver": "570.1", "memory_total_mib": 81920})
    facts = gpu.device_facts(_fake_torch(), "cuda")
    assert facts["name"] == "Fake GPU" and facts["driver"] == "570.1" and facts["memory_bytes"] == 80 << 30
    assert facts["cache_bytes"] == 50 << 20 and facts["cache_source"] == "torch L2_cache_size"
    assert facts["compute_capability"] == "9.0" and facts["fp32_matmul_precision"] == "highest"

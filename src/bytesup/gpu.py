"""GPU timing: the same question on a CUDA device, with a CPU twin the tests run.

The claim is the CPU job's (see bytesup.timing): one token reads every weight once, so
a matvec is paced by memory bandwidth. Here the yardstick is the device's own copy
bandwidth, and the sweep N = 1 ... 256 runs in fp32 and bf16 on the same real FFN
weights, rotating between two stacked matrices larger than the device's L2 cache.

Every function takes a torch `device`. On 'cuda' the timer is a pair of CUDA events
around the timed calls (after warm-up; `elapsed_time` after the end event completes).
On 'cpu' - the twin that CI runs, since CI has no GPU - the same code runs with the
host clock and synchronisation as a no-op. Counting (bytes, FLOPs, spread, noisy,
targets) is bytesup.timing's, so the two jobs cannot drift apart.

`gpu:` in the config decides what happens without a CUDA device: auto writes a
'skipped' record, on stops with a one-line error, off always skips.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from bytesup import timing
from bytesup.machine import cpu_model
from bytesup.timing import MiB, summarize, sweep_row, time_rotation

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
DTYPES = ("fp32", "bf16")
DEVICE_STREAM_MIN_BYTES = 256 * MiB
ASSUMED_L2_BYTES = 64 * MiB  # when torch does not report the device's L2 size


class GPUUnavailable(RuntimeError):
    """gpu: on, but no CUDA device; the message is one line."""


def cuda_status() -> tuple[bool, str]:
    """(True, '') with a usable CUDA device, else (False, why not)."""
    try:
        import torch
    except ImportError:
        return False, "no CUDA device (torch not installed)"
    try:
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            return False, "no CUDA device"
    except RuntimeError as err:  # a broken driver install reports here
        return False, f"no CUDA device ({str(err).splitlines()[0]})"
    return True, ""


def normal_mode(mode) -> str:
    """YAML 1.1 reads an unquoted `gpu: on` / `gpu: off` as true / false: take them as meant."""
    return ("on" if mode else "off") if isinstance(mode, bool) else mode


def resolve_device(mode: str) -> tuple[str | None, str]:
    """'cuda' when the job should measure, else None and the reason it is skipped.

    gpu: on without a device raises GPUUnavailable; gpu: off skips even with one.
    """
    mode = normal_mode(mode)
    if mode not in MODES:
        raise GPUUnavailable(f"gpu: {mode!r} is not one of auto, on, off (config/config.yaml)")
    if mode == "off":
        return None, "gpu: off in config"
    ok, why = cuda_status()
    if ok:
        return "cuda", ""
    if mode == "on":
        hint = "install the gpu extra (pip install 'bytesup[gpu]')" if "torch" in why else "check the driver"
        raise GPUUnavailable(f"gpu: on in config, but {why}; {hint}, or set gpu: auto to skip the GPU job")
    return None, why


def skipped_record(mode: str, reason: str) -> dict:
    """The whole GPU summary when nothing is measured: same keys, no figures."""
    return {
        "status": "skipped",
        "skipped": reason,
        "gpu_mode": mode,
        "device": None,
        "stream_copy_gbps": None,
        "stream_triad_gbps": None,
        "matvec_cold_gbps": None,
        "matvec_fraction_of_copy": None,
        "matmul_ratio_256_over_1": None,
        "dequant": {},
        "targets": [],
    }


# --- the device ---------------------------------------------------------------------


class CudaEventTimer:
    """Elapsed device time between two CUDA events on the current stream."""

    def __init__(self, torch):
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._start.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3  # ms -> s


def device_timer(torch, device: str):
    if torch.device(device).type == "cuda":
        return CudaEventTimer(torch)
    return timing.WallTimer()  # CPU twin: torch's CPU ops return when done, nothing to sync


def _nvidia_smi(index: int) -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version,memory.total", "--format=csv,noheader,nounits",
                              "-i", str(index)], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    parts = [p.strip() for p in out.strip().split(",")]
    return {"driver": parts[0], "memory_total_mib": int(parts[1])} if len(parts) == 2 and parts[1].isdigit() else {}


def device_facts(torch, device: str) -> dict:
    """GPU name, driver, memory and L2 size (or, for the CPU twin, the host's)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        llc, source = timing.llc_bytes()
        return {"type": dev.type, "name": f"{cpu_model()} (CPU twin of the GPU job)", "driver": None,
                "memory_bytes": None, "cache_bytes": llc, "cache_source": source,
                "torch_threads": torch.get_num_threads()}
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    l2 = getattr(props, "L2_cache_size", 0) or 0
    smi = _nvidia_smi(index)
    return {
        "type": "cuda",
        "name": props.name,
        "driver": smi.get("driver"),
        "memory_bytes": int(props.total_memory),
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "cache_bytes": int(l2) if l2 else ASSUMED_L2_BYTES,
        "cache_source": "torch L2_cache_size" if l2 else "assumed (torch does not report L2)",
        "cuda_runtime": torch.version.cuda,
        "fp32_matmul_precision": torch.get_float32_matmul_precision(),  # 'highest': no TF32 in the fp32 sweep
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


# --- measurements -------------------------------------------------------------------


def device_stream(torch, device: str, array_bytes: int, repeats: int, warmup: int, noisy_spread: float,
                  min_sample_s: float) -> list[dict]:
    """STREAM copy and triad on the device, float64 like STREAM, counted as STREAM counts."""
    n = max(array_bytes // 8, 1024)
    a = torch.full((n,), 1.0, dtype=torch.float64, device=device)
    b = torch.full((n,), 2.0, dtype=torch.float64, device=device)
    c = torch.zeros(n, dtype=torch.float64, device=device)
    kernels = {
        "copy": lambda: c.copy_(a),
        "triad": lambda: torch.add(b, c, alpha=timing.TRIAD_SCALAR, out=a),  # a = b + q*c, one kernel
    }
    rows = []
    for kernel, fn in kernels.items():
        times, per_sample = time_rotation([fn], repeats, warmup, min_sample_s, device_timer(torch, device))
        stats = summarize(times, noisy_spread)
        moved = timing.STREAM_BYTES_PER_ELEMENT[kernel] * n
        rows.append({"kernel": kernel, "device": device, "array_bytes": 8 * n, "bytes_counted": moved,
                     "calls_per_sample": per_sample, **stats,
                     "gbps": moved / stats["median_s"] / 1e9, "best_gbps": moved / stats["min_s"] / 1e9})
    probe = slice(None, None, max(n // 4096, 1))
    if not (bool((c[probe] == 1.0).all()) and bool((a[probe] == 2.0 + timing.TRIAD_SCALAR).all())):
        raise timing.TimingError(f"device STREAM check failed on {device}: arrays do not hold the expected values")
    del a, b, c
    return rows


def device_sweep(torch, device: str, matrices: list[np.ndarray], dtype: str, batch_sizes, repeats: int, warmup: int,
                 seed: int, noisy_spread: float, min_sample_s: float) -> list[dict]:
    """The CPU job's sweep on the device: Y = W @ X in fp32 or bf16, alternating matrices.

    N = 1 multiplies by a vector (gemv); N >= 2 by a matrix (gemm). Outputs preallocated.
    """
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    ws = [torch.from_numpy(m).to(device=device, dtype=tdtype) for m in matrices]
    rows, cols = ws[0].shape
    itemsize = ws[0].element_size()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for n in batch_sizes:
        shape_x = (cols,) if n == 1 else (cols, n)
        xs = [torch.randn(shape_x, generator=gen, dtype=torch.float32).to(device=device, dtype=tdtype) for _ in ws]
        ys = [torch.empty((rows,) if n == 1 else (rows, n), dtype=tdtype, device=device) for _ in ws]
        calls = [lambda w=w, x=x, y=y: torch.matmul(w, x, out=y) for w, x, y in zip(ws, xs, ys)]
        times, per_sample = time_rotation(calls, repeats, warmup, min_sample_s, device_timer(torch, device))
        stats = summarize(times, noisy_spread)
        out.append(sweep_row("matvec" if n == 1 else "matmul", n, rows, cols, itemsize, stats, per_sample,
                             {"dtype": dtype, "device": device}))
        log.info("%s %s N=%d: %.4f ms, %.1f GB/s", device, dtype, n, stats["median_s"] * 1e3, out[-1]["gbps"])
    del ws
    return timing.add_time_ratios(out)


# --- the job ------------------------------------------------------------------------


def run_gpu(gguf_path: str | Path, cfg: dict | None = None, mode: str = "auto", device: str | None = None) -> dict:
    """The GPU timing job. `device` forces one ('cpu' for the twin); otherwise `mode` decides.

    Returns {'summary', 'sweep', 'stream', 'dequant'} like timing.run_cpu; when skipped the
    tables are empty and the summary says why.
    """
    mode = normal_mode(mode)
    if device is None:
        device, why = resolve_device(mode)
        if device is None:
            log.info("GPU job skipped: %s", why)
            return {"summary": skipped_record(mode, why), "sweep": [], "stream": [], "dequant": []}
    import torch

    share = timing.CpuShare()
    cfg = timing.settings(cfg)
    reps, warm, noisy = int(cfg["repeats"]), int(cfg["warmup"]), float(cfg["noisy_spread"])
    min_sample_s = float(cfg["min_sample_ms"]) / 1e3
    facts = device_facts(torch, device)
    cache = facts["cache_bytes"]

    array_bytes = int(cfg["stream_bytes"]) if cfg["stream_bytes"] else max(4 * cache, DEVICE_STREAM_MIN_BYTES)
    stream_rows = device_stream(torch, device, array_bytes, reps, warm, noisy, min_sample_s)

    with timing.open_model(gguf_path) as model:
        weights = timing.ffn_weight_buffers(model, int(cfg["min_weight_bytes"] or 2 * cache))
    sweep_rows = []
    for dtype in DTYPES:
        sweep_rows += device_sweep(torch, device, weights.matrices, dtype, cfg["batch_sizes"], reps, warm,
                                   int(cfg["seed"]), noisy, min_sample_s)
    if torch.device(device).type == "cuda":
        facts["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))

    summary = build_gpu_summary(facts, cfg, mode, device, stream_rows, sweep_rows, weights.describe(cache))
    summary["other_processes_cpu_fraction"] = other = share.other_fraction()
    summary["machine_shared"] = bool(other is not None and other > timing.BUSY_OTHER_FRACTION)
    return {"summary": summary, "sweep": sweep_rows, "stream": stream_rows, "dequant": []}


def build_gpu_summary(facts: dict, cfg: dict, mode: str, device: str, stream_rows: list[dict],
                      sweep_rows: list[dict], weights: dict) -> dict:
    copy = next(r for r in stream_rows if r["kernel"] == "copy")
    triad = next(r for r in stream_rows if r["kernel"] == "triad")
    by_dtype: dict[str, Any] = {}
    targets = []
    for dtype in DTYPES:
        rows = [r for r in sweep_rows if r["dtype"] == dtype]
        if not rows:
            continue
        matvec = next(r for r in rows if r["n"] == 1)
        by_dtype[dtype] = {
            "matvec_cold_gbps": matvec["gbps"],
            "matvec_cold_gflops": matvec["gflops"],
            "matvec_cold_median_s": matvec["median_s"],
            "matvec_fraction_of_copy": matvec["gbps"] / copy["gbps"],
            "matmul_ratio_256_over_1": timing.ratio_256_over_1(sweep_rows, dtype),
            "gflops_by_n": {str(r["n"]): r["gflops"] for r in rows},
            "gbps_by_n": {str(r["n"]): r["gbps"] for r in rows},
            "weight_bytes": matvec["weight_bytes"],
        }
        targets.append(timing.fraction_target(f"device_matvec_{dtype}_fraction_of_device_copy", matvec, copy))
    fp32 = by_dtype["fp32"]
    noisy = [f"stream.{r['kernel']}" for r in stream_rows if r["noisy"]]
    noisy += [f"sweep.{r['dtype']}.N={r['n']}" for r in sweep_rows if r["noisy"]]
    return {
        "status": "measured",
        "gpu_mode": mode,
        "device": device,
        "stream_copy_gbps": copy["gbps"],
        "stream_triad_gbps": triad["gbps"],
        "stream_copy_best_gbps": copy["best_gbps"],
        "stream_triad_best_gbps": triad["best_gbps"],
        "stream_array_bytes": copy["array_bytes"],
        "matvec_cold_gbps": fp32["matvec_cold_gbps"],
        "matvec_fraction_of_copy": fp32["matvec_fraction_of_copy"],
        "matmul_ratio_256_over_1": fp32["matmul_ratio_256_over_1"],
        "by_dtype": by_dtype,
        "dequant": {},
        "dequant_note": "dequantization runs on the host; its throughput is in the CPU job's summary",
        "noisy": noisy,
        "weights": weights,
        "machine": facts,
        "settings": {k: cfg[k] for k in timing.DEFAULTS},
        "counting": {
            "stream": "STREAM's: copy 16 and triad 24 bytes per float64 element, on the device",
            "sweep": "bytes = (rows*cols + cols*N + rows*N) * itemsize (4 fp32, 2 bf16); FLOPs = 2*rows*cols*N",
            "timer": "CUDA events around each sample after warm-up" if device.startswith("cuda")
                     else "host clock (CPU twin; no device to synchronise)",
        },
        "targets": targets,
    }

"""GPU timing: the same question on a CUDA device, with a CPU twin the tests run.

The claim is the CPU job's (see bytesup.timing.cpu): one token reads every weight once, so
a matvec is paced by memory bandwidth. Here the yardstick is the device's own copy
bandwidth, and the sweep N = 1 ... 256 runs in fp32 and bf16 on the same real FFN
weights, rotating between two stacked matrices larger than the device's L2 cache.

Every function takes a torch `device`. On 'cuda' the timer is a pair of CUDA events
around the timed calls (after warm-up; `elapsed_time` after the end event completes).
On 'cpu' - the twin that CI runs, since CI has no GPU - the same code runs with the
host clock and synchronisation as a no-op. Counting (bytes, FLOPs, spread, noisy,
targets) is bytesup.timing.cpu's, so the two jobs cannot drift apart.

After the sweep, the whole model: the project's forward pass in torch
(bytesup.model.forward_torch, float32 weights resident on the device) decodes one token at a
time with its KV cache, each step timed alone; its tokens/s is set against the ceiling
  device copy GB/s (this job) / float32 bytes of weights one token reads,
as the CPU job's decode.json does, and prefill tokens/s is measured for a few N. It is skipped,
with the reason in `decode_skipped`, when the architecture is not supported or the float32
weights do not fit the budget (the device's memory minus headroom).

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

from bytesup.errors import BytesupError
from bytesup.gguf.file import GGUFFile
from bytesup.model.arch import spec_from_metadata, supported
from bytesup.model.forward import Model, flops_per_token
from bytesup.model.forward_torch import TorchModel
from bytesup.model.weights import DEFAULT_RESIDENT_BUDGET, float32_bytes
from bytesup.timing import cpu, memory
from bytesup.timing.cpu import sweep_row
from bytesup.timing.decode import DECODE_KEYS, decode_summary, prefill_row, time_prefill
from bytesup.timing.machine import CpuShare, MiB, cpu_model, llc_bytes
from bytesup.timing.measure import TimingError, WallTimer, summarize, time_rotation
from bytesup.timing.memory import read_ceiling
from bytesup.timing.steps import PROMPT_LEN, prompt_ids

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
DTYPES = ("fp32", "bf16")
DEVICE_STREAM_MIN_BYTES = 256 * MiB
ASSUMED_L2_BYTES = 64 * MiB  # when torch does not report the device's L2 size
DECODE_HEADROOM_BYTES = 4 * 2**30  # device memory kept free beside the decode's weights (at least;
DECODE_HEADROOM_FRACTION = 0.10  # or this share of the device's memory when larger): KV cache, activations


class GPUUnavailable(BytesupError, RuntimeError):
    """gpu: on, but no CUDA device; the message is one line."""


# Where an NVIDIA driver shows itself (Linux, a container given the GPU, WSL2's /dev/dxg): without any of
# them CUDA cannot run, and the job says so without importing torch (seconds).
DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def nvidia_driver_seen() -> bool:
    return any(os.path.exists(p) for p in DRIVER_PATHS) or shutil.which("nvidia-smi") is not None


def cuda_status() -> tuple[bool, str]:
    """(True, '') with a usable CUDA device, else (False, why not)."""
    if not nvidia_driver_seen():
        return False, "no CUDA device (no NVIDIA driver on this machine)"
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
        "read_ceiling_gbps": None,
        "read_ceiling_kernel": None,
        "matvec_cold_gbps": None,
        "matvec_fraction_of_copy": None,
        "matmul_ratio_256_over_1": None,
        **dict.fromkeys(DECODE_KEYS),
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
    return WallTimer()  # CPU twin: torch's CPU ops return when done, nothing to sync


def _nvidia_smi(index: int) -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version,memory.total", "--format=csv,noheader,nounits", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    parts = [p.strip() for p in out.strip().split(",")]
    return {"driver": parts[0], "memory_total_mib": int(parts[1])} if len(parts) == 2 and parts[1].isdigit() else {}


def device_facts(torch, device: str) -> dict:
    """GPU name, driver, memory and L2 size (or, for the CPU twin, the host's)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        llc, source = llc_bytes()
        return {
            "type": dev.type,
            "name": f"{cpu_model()} (CPU twin of the GPU job)",
            "driver": None,
            "memory_bytes": None,
            "cache_bytes": llc,
            "cache_source": source,
            "torch_threads": torch.get_num_threads(),
        }
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


def device_memory_rows(
    torch, device: str, array_bytes: int, repeats: int, warmup: int, noisy_spread: float, min_sample_s: float
) -> list[dict]:
    """The CPU job's memory kernels on the device (bytesup.timing.memory, counted the same way):
    STREAM copy and triad on float64, then a float32 sum and a dot over one buffer and a gemv
    alternating between the two halves of it. Each is checked afterwards."""
    n = max(array_bytes // 8, 1024)
    a = torch.full((n,), 1.0, dtype=torch.float64, device=device)
    b = torch.full((n,), 2.0, dtype=torch.float64, device=device)
    c = torch.zeros(n, dtype=torch.float64, device=device)
    kernels = {
        "copy": (lambda: c.copy_(a), memory.STREAM_BYTES_PER_ELEMENT["copy"] * n, 8 * n),
        "triad": (lambda: torch.add(b, c, alpha=memory.TRIAD_SCALAR, out=a), memory.STREAM_BYTES_PER_ELEMENT["triad"] * n, 8 * n),
    }  # fmt: skip
    rows = [_device_row(torch, device, k, [fn], moved, size, repeats, warmup, noisy_spread, min_sample_s)
            for k, (fn, moved, size) in kernels.items()]  # fmt: skip
    probe = slice(None, None, max(n // 4096, 1))
    if not (bool((c[probe] == 1.0).all()) and bool((a[probe] == 2.0 + memory.TRIAD_SCALAR).all())):
        raise TimingError(f"device STREAM check failed on {device}: arrays do not hold the expected values")
    a = b = c = None  # the device's arrays go before the next measurement

    m = max(array_bytes // 4, 2)
    buf = torch.ones(m, dtype=torch.float32, device=device)
    total = torch.zeros((), dtype=torch.float32, device=device)
    rows.append(_device_row(torch, device, "sum", [lambda: torch.sum(buf, dim=0, out=total)], 4 * m, 4 * m, repeats, warmup,
                            noisy_spread, min_sample_s))  # fmt: skip
    rows.append(_device_row(torch, device, "dot", [lambda: torch.dot(buf, buf, out=total)], 4 * m, 4 * m, repeats,
                            warmup, noisy_spread, min_sample_s))  # fmt: skip
    r, k = memory.gemv_shape(m)
    mats = [buf[: r * k].view(r, k), buf[r * k : 2 * r * k].view(r, k)]
    x = torch.ones(k, dtype=torch.float32, device=device)
    ys = [torch.zeros(r, dtype=torch.float32, device=device) for _ in mats]
    calls = [lambda w=w, y=y: torch.mv(w, x, out=y) for w, y in zip(mats, ys)]
    rows.append(_device_row(torch, device, "gemv", calls, 4 * (r * k + k + r), 4 * r * k, repeats, warmup,
                            noisy_spread, min_sample_s))  # fmt: skip
    if abs(float(total) - m) > 1e-3 * m or not all(bool((y == k).all()) for y in ys):  # total: the last dot
        raise TimingError(
            f"device read-kernel check failed on {device}: the sum or the gemv is not what the buffer holds"
        )
    return rows


def _device_row(torch, device, kernel, calls, moved, size, repeats, warmup, noisy_spread, min_sample_s) -> dict:
    times, per_sample = time_rotation(calls, repeats, warmup, min_sample_s, device_timer(torch, device))
    return memory.kernel_row(kernel, size, moved, per_sample, summarize(times, noisy_spread), device=device)


def device_sweep(
    torch,
    device: str,
    matrices: list[np.ndarray],
    dtype: str,
    batch_sizes,
    repeats: int,
    warmup: int,
    seed: int,
    noisy_spread: float,
    min_sample_s: float,
) -> list[dict]:
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
        out.append(
            sweep_row(
                "matvec" if n == 1 else "matmul",
                n,
                rows,
                cols,
                itemsize,
                stats,
                per_sample,
                {"dtype": dtype, "device": device},
            )
        )
        log.info("%s %s N=%d: %.4f ms, %.1f GB/s", device, dtype, n, stats["median_s"] * 1e3, out[-1]["gbps"])
    del ws
    return cpu.add_time_ratios(out)


# --- the whole model: decode and prefill ------------------------------------------------


def decode_budget(facts: dict) -> int:
    """The most float32 weight bytes the decode may put on the device: its memory minus headroom
    (DECODE_HEADROOM_BYTES or DECODE_HEADROOM_FRACTION of it, whichever is larger). The CPU twin,
    whose facts carry no device memory, takes the NumPy decoder's resident budget."""

    memory = facts.get("memory_bytes")
    if not memory:
        return DEFAULT_RESIDENT_BUDGET
    return max(int(memory) - max(DECODE_HEADROOM_BYTES, int(memory * DECODE_HEADROOM_FRACTION)), 0)


def _host_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (the weights pass through the host once), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def decode_refusal(gguf_path: str | Path, budget_bytes: int) -> str | None:
    """None when the whole-model decode can run here, else the one-line reason it is skipped."""

    with GGUFFile(gguf_path) as f:
        refusal = supported(f.metadata, f.tensor_names, path=gguf_path)
        if refusal:
            return refusal
        spec = spec_from_metadata(f.metadata, f.tensor_names, path=gguf_path)
    need = float32_bytes(spec)
    if need > budget_bytes:
        return (
            f"{gguf_path}: float32 weights of {_size(need)} exceed the decode budget of {_size(budget_bytes)}"
            " (the device's memory minus headroom, or run_gpu's decode_budget_bytes)"
        )
    host = _host_available_bytes()
    if host is not None and need > host:
        return (
            f"{gguf_path}: float32 weights of {_size(need)} exceed the host's available memory"
            f" ({_size(host)}), through which they reach the device"
        )
    return None


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n:,} bytes"


def time_device_decode(torch, device: str, model, n_tokens: int, warmup: int, prompt_len: int = PROMPT_LEN) -> dict:
    """Per-token seconds of `n_tokens` decode steps after a short prompt, each step timed alone
    (CUDA events on the device; the host clock on the CPU twin), after `warmup` untimed steps.
    Greedy, as in generation: the next input is the argmax (which waits for the step)."""

    timer = device_timer(torch, device)
    cache = model.new_cache(prompt_len + warmup + n_tokens)
    logits = model.forward(prompt_ids(model.spec.vocab, prompt_len), cache)
    nxt = int(torch.argmax(logits[-1]))
    for _ in range(warmup):
        nxt = int(torch.argmax(model.forward([nxt], cache)[-1]))
    times = []
    for _ in range(n_tokens):
        timer.start()
        logits = model.forward([nxt], cache)
        times.append(timer.stop())
        nxt = int(torch.argmax(logits[-1]))
    return {"times": times, "context_end": cache.n}


def device_decode(torch, device: str, gguf_path: str | Path, cfg: dict, ceiling: dict, budget_bytes: int) -> dict:
    """The whole-model decode and prefill on the device: decode_summary()'s keys against the device's
    read ceiling (`ceiling`: bytesup.timing.memory.read_ceiling of this job's device rows).

    Returns the summary's decode keys plus 'prefill_rows', 'noisy' and 'counting' (taken out by
    run_gpu); when skipped, the decode keys are None and 'decode_skipped' says why.
    """

    counting = {
        "decode": "bytes per token = every float32 weight the step reads once (all blocks, final norm, the "
        "whole output head, one embedding row); tokens/s = 1 / median seconds per step",
        "decode_ceiling": "the device's read ceiling (best of copy, sum, dot and gemv, this job) x 1e9 / decode bytes "
        "per token; the fraction = decode GB/s / that ceiling",
        "prefill": "tokens/s = N / median seconds of one N-token pass into a fresh cache",
    }
    refusal = decode_refusal(gguf_path, budget_bytes)
    if refusal:
        log.info("whole-model decode skipped: %s", refusal)
        return {
            "decode_skipped": refusal,
            **dict.fromkeys(DECODE_KEYS),
            "prefill_tokens_per_s": {},
            "decode_budget_bytes": budget_bytes,
            "prefill_rows": [],
            "noisy": [],
            "counting": counting,
        }
    reps, warm, noisy = int(cfg["repeats"]), int(cfg["warmup"]), float(cfg["noisy_spread"])
    with Model.from_gguf(gguf_path, mode="resident") as numpy_model:
        model = TorchModel.from_model(numpy_model, device)
        bytes_per_token = numpy_model.weight_bytes_per_token().float32_bytes
    spec = model.spec
    sizes = [int(n) for n in cfg["prefill_sizes"] if int(n) <= spec.context_length]
    decode = time_device_decode(torch, device, model, int(cfg["decode_tokens"]), max(warm, 1))
    timer = device_timer(torch, device)
    prefill_rows = [
        prefill_row("bytesup (torch)", n, time_prefill(model, n, reps, 1, timer), noisy, spec, device=device)
        for n in sizes
    ]
    out = {
        "decode_engine": "bytesup (torch, float32 weights resident on the device)",
        **decode_summary(decode["times"], bytes_per_token, ceiling, noisy),
        "decode_flops_per_token": flops_per_token(spec, decode["context_end"]),
        "decode_weights_device_bytes": model.weights.nbytes,
        "decode_budget_bytes": budget_bytes,
        "prefill_tokens_per_s": {str(r["n"]): r["tokens_per_s"] for r in prefill_rows},
        "prefill_gflops": {str(r["n"]): r["gflops"] for r in prefill_rows},
        "prefill_rows": prefill_rows,
        "counting": counting,
    }
    out["noisy"] = (["decode"] if out["decode_noisy"] else []) + [
        f"prefill.N={r['n']}" for r in prefill_rows if r["noisy"]
    ]
    log.info("%s decode: %.1f tokens/s, %.0f%% of the read ceiling", device, out["decode_tokens_per_s"],
             100 * out["decode_fraction_of_read_ceiling"])  # fmt: skip
    del model
    return out


# --- the job ------------------------------------------------------------------------


def run_gpu(
    gguf_path: str | Path,
    cfg: dict | None = None,
    mode: str = "auto",
    device: str | None = None,
    decode_budget_bytes: int | None = None,
) -> dict:
    """The GPU timing job. `device` forces one ('cpu' for the twin); otherwise `mode` decides.

    Returns {'summary', 'sweep', 'stream', 'dequant'} like cpu.run_cpu, plus 'prefill' (the
    whole-model prefill rows) when measured; when skipped the tables are empty and the summary
    says why. decode_budget_bytes: the most float32 weight bytes the whole-model decode may put
    on the device (None: decode_budget(device facts)).
    """
    mode = normal_mode(mode)
    if device is None:
        device, why = resolve_device(mode)
        if device is None:
            log.info("GPU job skipped: %s", why)
            return {"summary": skipped_record(mode, why), "sweep": [], "stream": [], "dequant": []}
    import torch

    share = CpuShare()
    cfg = cpu.settings(cfg)
    reps, warm, noisy = int(cfg["repeats"]), int(cfg["warmup"]), float(cfg["noisy_spread"])
    min_sample_s = float(cfg["min_sample_ms"]) / 1e3
    facts = device_facts(torch, device)
    cache = facts["cache_bytes"]

    array_bytes = int(cfg["stream_bytes"]) if cfg["stream_bytes"] else max(4 * cache, DEVICE_STREAM_MIN_BYTES)
    stream_rows = device_memory_rows(torch, device, array_bytes, reps, warm, noisy, min_sample_s)

    with cpu.open_model(gguf_path) as model:
        weights = cpu.ffn_weight_buffers(model, int(cfg["min_weight_bytes"] or 2 * cache))
    sweep_rows = []
    for dtype in DTYPES:
        sweep_rows += device_sweep(
            torch,
            device,
            weights.matrices,
            dtype,
            cfg["batch_sizes"],
            reps,
            warm,
            int(cfg["seed"]),
            noisy,
            min_sample_s,
        )
    if torch.device(device).type == "cuda":
        facts["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))

    summary = build_gpu_summary(facts, cfg, mode, device, stream_rows, sweep_rows, weights.describe(cache))
    # the whole model: decode and prefill of the torch forward pass, against this job's read ceiling
    del weights
    budget = decode_budget(facts) if decode_budget_bytes is None else int(decode_budget_bytes)
    decode = device_decode(torch, device, gguf_path, cfg, read_ceiling(stream_rows), budget)
    prefill_rows = decode.pop("prefill_rows")
    summary["noisy"] += decode.pop("noisy")
    summary["counting"].update(decode.pop("counting"))
    summary.update(decode)
    if torch.device(device).type == "cuda":
        facts["max_memory_allocated_bytes_with_decode"] = int(torch.cuda.max_memory_allocated(device))
    summary.update(share.record())
    return {"summary": summary, "sweep": sweep_rows, "stream": stream_rows, "dequant": [], "prefill": prefill_rows}


def build_gpu_summary(
    facts: dict, cfg: dict, mode: str, device: str, stream_rows: list[dict], sweep_rows: list[dict], weights: dict
) -> dict:
    copy = next(r for r in stream_rows if r["kernel"] == "copy")
    triad = next(r for r in stream_rows if r["kernel"] == "triad")
    ceiling = read_ceiling(stream_rows)
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
            "matvec_fraction_of_read_ceiling": matvec["gbps"] / ceiling["gbps"],
            "matmul_ratio_256_over_1": cpu.ratio_256_over_1(sweep_rows, dtype),
            "gflops_by_n": {str(r["n"]): r["gflops"] for r in rows},
            "gbps_by_n": {str(r["n"]): r["gbps"] for r in rows},
            "weight_bytes": matvec["weight_bytes"],
        }
        targets.append(cpu.fraction_target(f"device_matvec_{dtype}_fraction_of_device_copy", matvec, copy))
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
        "read_ceiling_gbps": ceiling["gbps"],
        "read_ceiling_kernel": ceiling["kernel"],
        "read_ceiling_rel_iqr": ceiling["rel_iqr"],
        "read_gbps_by_kernel": ceiling["by_kernel_gbps"],
        "matvec_cold_gbps": fp32["matvec_cold_gbps"],
        "matvec_fraction_of_copy": fp32["matvec_fraction_of_copy"],
        "matvec_fraction_of_read_ceiling": fp32["matvec_fraction_of_read_ceiling"],
        "matmul_ratio_256_over_1": fp32["matmul_ratio_256_over_1"],
        "by_dtype": by_dtype,
        "dequant": {},
        "dequant_note": "dequantization runs on the host; its throughput is in the CPU job's summary",
        "noisy": noisy,
        "weights": weights,
        "machine": facts,
        "settings": {k: cfg[k] for k in cpu.DEFAULTS},
        "counting": {
            "stream": "STREAM's: copy 16 and triad 24 bytes per float64 element, on the device; then a float32 "
            "sum and a dot (4 bytes per element) and a gemv (W + x + y): the read ceiling is the best of copy, sum, dot "
            "and gemv",
            "sweep": "bytes = (rows*cols + cols*N + rows*N) * itemsize (4 fp32, 2 bf16); FLOPs = 2*rows*cols*N",
            "timer": "CUDA events around each sample after warm-up"
            if device.startswith("cuda")
            else "host clock (CPU twin; no device to synchronise)",
        },
        "targets": targets,
    }

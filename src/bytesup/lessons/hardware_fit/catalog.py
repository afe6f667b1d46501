"""Lesson 7's models and devices: this run's model from its own file, the published models in three
storage types, this machine as measured and the published devices."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gguf.constants import LlamaFileType

from bytesup.errors import BytesupError
from bytesup.gguf.sizes import parse_shape, type_bytes
from bytesup.lessons import LessonInputError
from bytesup.lessons.ffn_walk import meta_value
from bytesup.lessons.hardware_fit.storage import (
    KV_CACHE_TYPE,
    QUANTS,
    GiB,
    read_per_token,
    storage_types,
    weights_bytes,
)
from bytesup.model import configs

# --- the models ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """A published model: its configuration and its key in metrics.json."""

    key: str
    arch: configs.Architecture

    @property
    def max_context(self) -> int:  # max_position_embeddings of its published config.json
        return self.arch.context_length

    @property
    def context_source(self) -> str:
        return f"{self.arch.source} max_position_embeddings"


PUBLISHED_MODELS = (
    Published("deepseek_coder_6_7b", configs.DEEPSEEK_CODER_6_7B),
    Published("llama3_8b", configs.LLAMA3_8B),
    Published("llama3_70b", configs.LLAMA3_70B),
    Published("llama31_405b", configs.LLAMA31_405B),
)
SPECIMEN_KEY = "deepseek_coder_6_7b"


def slug(text: str) -> str:
    """A metrics key from a label: 'Q4_K_M' -> 'q4_k_m'."""
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


# --- this run's model, from its own file -------------------------------------------------------------


def file_quant(metadata: Mapping, rows: Sequence[Mapping]) -> str:
    """The file's storage in llama.cpp's words (general.file_type: MOSTLY_Q4_1 -> Q4_1), else its
    most common matrix type."""
    file_type = metadata.get("general.file_type")
    try:
        return LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except (TypeError, ValueError):
        matrices = [r["type"] for r in rows if len(r["shape"]) == 2] or ["?"]
        return max(set(matrices), key=matrices.count)


def kv_layers_of_file(metadata: Mapping) -> configs.KVLayers:
    """configs.file_kv_layers (each layer's window from the file) with the lesson's one-line error."""
    try:
        return configs.file_kv_layers(metadata, KV_CACHE_TYPE)
    except (BytesupError, ValueError) as err:
        raise LessonInputError(f"metadata.json: {err}") from None


def kv_facts(layers: configs.KVLayers) -> dict:
    """What the fit tables say about a cache: bytes per token while every layer still grows, the
    sliding window (None without one) and how many layers keep the whole context."""
    windows = {w for _, w in layers if w is not None}
    return {
        "kv_layers": layers,
        "kv_bytes_per_token": sum(per for per, _ in layers),
        "sliding_window": min(windows) if windows else None,
        "kv_global_layers": sum(w is None for _, w in layers),
    }


def this_model(metadata: Mapping, rows: Sequence[Mapping], name: str = "this model") -> dict:
    """This run's model as the fit table needs it, from its tensor table and metadata only."""
    if not rows:
        raise LessonInputError("tensors.csv: no tensors listed; re-run the extract stage")
    rows = [{**r, "shape": parse_shape(r["shape"])} for r in rows]
    arch = meta_value(metadata, "general.architecture")
    return {
        "key": "model",
        "model": name,
        "quant": file_quant(metadata, rows),
        "architecture": arch,
        "weights_bytes": sum(int(r["bytes"]) for r in rows),
        "read_per_token_bytes": read_per_token(rows),
        **kv_facts(kv_layers_of_file(metadata)),
        "max_context": int(meta_value(metadata, f"{arch}.context_length", 0)) or None,
        "n_tensors": len(rows),
        "source": f"this run's GGUF: tensors.csv (bytes), metadata ({arch}.*)",
    }


def published_model(p: Published, quant: str) -> dict:
    """A published model in one storage, as the fit table needs it."""
    tensors = storage_types(p.arch, quant)
    rows = [
        {"name": n, "shape": s, "type": t, "elements": math.prod(s), "bytes": type_bytes(t, math.prod(s))}
        for n, s, t in tensors
    ]
    counts: dict[str, int] = {}
    for _, _, t in tensors:
        counts[t] = counts.get(t, 0) + 1
    return {
        "key": f"{p.key}_{slug(quant)}",
        "model": p.arch.name,
        "quant": quant,
        "architecture": "llama",
        "weights_bytes": weights_bytes(tensors),
        "read_per_token_bytes": read_per_token(rows),
        **kv_facts(
            configs.kv_layers(p.arch.n_layers, p.arch.n_kv_heads, p.arch.head_dim, p.arch.head_dim, KV_CACHE_TYPE)
        ),
        "max_context": p.max_context,
        "n_tensors": len(tensors),
        "tensor_types": " ".join(f"{t}x{n}" for t, n in sorted(counts.items())),
        "source": f"{p.arch.source}; context: {p.context_source}",
    }


def models_table(model_entry: dict) -> list[dict]:
    """This run's model, then every published model in every storage."""
    return [model_entry] + [published_model(p, q) for p in PUBLISHED_MODELS for q in QUANTS]


# --- 2. the devices ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    key: str
    name: str
    memory_bytes: int | None
    bandwidth_gbps: float | None
    source: str


# Published devices. Memory in binary GB (spec sheets' "GB" of memory), bandwidth in decimal GB/s.
DEVICES = (
    Device(
        "laptop_16gb",
        "16 GB laptop (MacBook Air M4)",
        16 * GiB,
        120.0,
        "Apple's specifications: MacBook Air 13-inch (M4, 2025) with 16GB unified memory; "
        "Apple M4: 120GB/s memory bandwidth",
    ),
    Device(
        "dgx_spark",
        "DGX Spark",
        128 * GiB,
        273.0,
        "NVIDIA DGX Spark specifications: 128 GB LPDDR5x unified memory, 273 GB/s; "
        "the course (the lesson 3 text) quotes the 273 GB/s peak",
    ),
    Device("h100_sxm", "H100 SXM 80 GB", 80 * GiB, 3350.0, "NVIDIA H100 datasheet: H100 SXM, 80GB HBM3, 3.35TB/s"),
    Device("h200", "H200 141 GB", 141 * GiB, 4800.0, "NVIDIA H200 datasheet: 141GB HBM3e, 4.8TB/s"),
)


def _positive(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def measured_devices(timing_summary: Mapping | None, gpu_summary: Mapping | None) -> tuple[list[Device], dict]:
    """This machine (always listed; None where the timing stage did not measure) and this run's GPU
    (listed only when the GPU job measured one), with a few metrics saying what was found."""
    cpu = timing_summary or {}
    cpu_machine = cpu.get("machine") if isinstance(cpu.get("machine"), Mapping) else {}
    memory = _positive(cpu_machine.get("memory_bytes"))
    bandwidth = _positive(cpu.get("stream_copy_gbps"))
    devices = [
        Device(
            "this_machine",
            "this machine",
            int(memory) if memory else None,
            bandwidth,
            "measured by this run's timing stage: machine.memory_bytes, stream_copy_gbps"
            + (f" ({cpu_machine['cpu_model']})" if cpu_machine.get("cpu_model") else ""),
        )
    ]
    gpu = gpu_summary or {}
    gpu_machine = gpu.get("machine") if isinstance(gpu.get("machine"), Mapping) else {}
    gpu_memory = _positive(gpu_machine.get("memory_bytes"))
    if gpu.get("status") == "measured" and gpu_memory:
        devices.append(
            Device(
                "gpu",
                f"this run's GPU ({gpu_machine.get('name') or 'unnamed'})",
                int(gpu_memory),
                _positive(gpu.get("stream_copy_gbps")),
                "measured by this run's GPU job: machine.memory_bytes, stream_copy_gbps",
            )
        )
        status = "measured"
    else:
        status = "no GPU on this run" + (f" ({gpu['skipped']})" if gpu.get("skipped") else "")
    found = {
        "this_machine_memory_bytes": devices[0].memory_bytes,
        "this_machine_bandwidth_gbps": bandwidth,
        "this_machine_cpu_model": cpu_machine.get("cpu_model"),
        "gpu_status": status,
        "gpu_memory_bytes": int(gpu_memory) if status == "measured" else None,
        "gpu_bandwidth_gbps": _positive(gpu.get("stream_copy_gbps")) if status == "measured" else None,
    }
    return devices, found


def read_summary(path) -> tuple[dict, list[str]]:
    """A timing stage's summary.json, or {} and a note saying it was not found (nothing is filled in)."""
    if path and Path(path).is_file():
        return json.loads(Path(path).read_text(encoding="utf-8")), []
    return {}, [f"summary not found: {path}"]


def devices_table(devices: Sequence[Device]) -> list[dict]:
    return [
        {
            "device": d.key,
            "name": d.name,
            "memory_bytes": d.memory_bytes,
            "memory_gib": None if d.memory_bytes is None else d.memory_bytes / GiB,
            "bandwidth_gbps": d.bandwidth_gbps,
            "source": d.source,
        }
        for d in devices
    ]

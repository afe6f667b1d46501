"""Lesson 7, "The hardware fit": which model runs where, and how fast it could go there.

A model runs on a device when its weights and its KV cache fit in the device's memory, and then
each generated token (batch 1) has to stream the weights once and the whole KV cache once, so

    memory needed          = weights + KV cache at the context length
    tokens/s ceiling       = memory bandwidth / bytes read per token

What is computed, in the lesson's order:

  1. weights bytes, for this run's model from its own tensor table (tensors.csv: the bytes each
     tensor takes in the file, whatever the architecture) and for published configurations
     (the course's specimen deepseek-coder-6.7b, Llama-3-8B/70B, Llama-3.1-405B, from
     bytesup.model.configs) stored three ways: F16, Q8_0 and llama.cpp's Q4_K_M mix
     (``q4_k_m_types``: the per-tensor recipe of llama.cpp's src/llama-quant.cpp);
  2. the KV cache at 4k, 32k and 128k tokens of context (F16 cache, llama.cpp's default), capped
     at a model's published maximum context where that is smaller;
  3. the devices: this machine (memory and STREAM copy bandwidth measured by the timing stage),
     this run's GPU when one was measured, and published devices (``DEVICES``);
  4. the fit table: every (model, storage, context, device) with memory needed, whether it fits,
     what is left, and the tokens/s ceiling.

Counting rules (each one a function below):
  * bytes of a tensor = its number of blocks x bytes per block, from gguf-py's GGML_QUANT_SIZES
    (configs.type_bytes); norm vectors stay F32 in every storage, as llama.cpp's converter writes them;
  * bytes read per token = every weight once, except the token embedding table, of which a
    token reads one row; a model with tied embeddings reads the whole table again as its output
    head, on top of that row (param_counts.per_token_reads, the capstone's rule);
  * KV cache bytes = 2 (K and V) x blocks x KV heads x head size x 2 bytes (F16) per token of context;
  * memory sizes on spec sheets ("16 GB", "80 GB") are binary gigabytes (2**30 bytes): memory
    is built in powers of two. Bandwidths are decimal (1 GB/s = 1e9 bytes/s), as STREAM counts.

What the fit leaves out, so a near fit is optimistic: the runtime's compute buffers and
activations, the operating system's and driver's share of the memory, and the file's metadata
(the vocabulary, a megabyte or so). What the ceiling leaves out: the arithmetic (decode at batch 1
is memory-bound; the capstone shows why), and that no real kernel reaches the full bandwidth.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

from bytesup.gguf.extract import parse_shape
from bytesup.lessons import LessonInputError, figure
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.ffn_walk import meta_value
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model import configs
from bytesup.model import param_counts as pc

SPEC = LessonSpec(
    id="07_the_hardware_fit",
    title="The hardware fit",
    kind=SERIES,
    position=7,
    source=(
        "Lesson 7 of the LLM Basics series (its text is not among the course files here; the devices' "
        "figures are their published specifications, the DGX Spark's from the course)"
    ),
    reads=("metadata_json", "tensors_csv", "timing_summary", "gpu_summary"),
    tables=("fit_table.csv", "models.csv", "devices.csv"),
    figures={
        "what_fits_where.png": (
            "What fits where at 4k tokens of context: weights + F16 KV cache against each device's memory; "
            "a cell that fits shows its tokens/s ceiling (bandwidth / bytes read per token), amber when under a "
            "tenth of the memory is left; one that does not fit shows how much memory it needs"
        ),
    },
    headlines=(
        Headline("model_weights_bytes", "this model's weights, from its tensor table", unit="bytes", fmt=",d"),
        Headline(
            "model_4k_ceiling_this_machine_tps", "this model at 4k context: tokens/s ceiling on this machine", fmt=".0f"
        ),
        Headline(
            "model_4k_left_this_machine_bytes",
            "this model at 4k context: memory left on this machine",
            unit="bytes",
            fmt=",d",
        ),
        Headline(
            "deepseek_coder_6_7b_q8_0_weights_bytes",
            "deepseek-coder-6.7b Q8_0 weights (the course's specimen)",
            unit="bytes",
            fmt=",d",
        ),
        Headline(
            "deepseek_coder_6_7b_q4_k_m_weights_bytes",
            "deepseek-coder-6.7b Q4_K_M weights (llama.cpp's recipe)",
            unit="bytes",
            fmt=",d",
        ),
        Headline("llama3_8b_q4_k_m_weights_bytes", "Llama-3-8B Q4_K_M weights", unit="bytes", fmt=",d"),
        Headline(
            "deepseek_coder_6_7b_q8_0_4k_fits_this_machine", "deepseek-coder-6.7b Q8_0 at 4k context fits this machine"
        ),
        Headline(
            "deepseek_coder_6_7b_q8_0_4k_ceiling_this_machine_tps",
            "deepseek-coder-6.7b Q8_0 at 4k: ceiling on this machine",
            unit="tokens/s",
            fmt=".2f",
        ),
        Headline(
            "deepseek_coder_6_7b_q8_0_4k_ceiling_dgx_spark_tps",
            "deepseek-coder-6.7b Q8_0 at 4k: ceiling on the DGX Spark",
            unit="tokens/s",
            fmt=".1f",
        ),
        Headline("fits_this_machine_4k_count", "published (model, storage) pairs that fit this machine at 4k context"),
        Headline("this_machine_memory_bytes", "this machine's memory (measured)", unit="bytes", fmt=",d"),
        Headline(
            "this_machine_bandwidth_gbps", "this machine's STREAM copy bandwidth (measured)", unit="GB/s", fmt=".1f"
        ),
    ),
    architectures=None,  # any file: this run's model is counted from its own tensor table only
    runs_model=False,
)

GiB = 2**30  # memory capacities on spec sheets
GB = 1e9  # bandwidths, and the "GB" of tables for a reader
CONTEXTS = {"4k": 4096, "32k": 32768, "128k": 131072}
QUANTS = ("F16", "Q8_0", "Q4_K_M")
KV_CACHE_TYPE = "F16"  # llama.cpp's default cache type (--cache-type-k/-v f16)


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


# --- 1. what a tensor costs ------------------------------------------------------------------------


def block_size(type_name: str) -> int:
    """Weights per block of a ggml type (gguf-py's GGML_QUANT_SIZES): 256 for the K-quants, 32 for Q8_0."""
    return GGML_QUANT_SIZES[GGMLQuantizationType[type_name]][0]


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of the layers that get more bits: the first eighth, the last eighth and
    every third layer in between (src/llama-quant.cpp, ``use_more_bits``; integer division as in C)."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


# What llama.cpp falls back to when a row's length is not a whole number of the type's blocks
# (src/llama-quant.cpp, tensor_type_fallback): a 32-weight type of about as many bits.
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def fallback(type_name: str, row_length: int) -> str:
    if row_length % block_size(type_name) == 0:
        return type_name
    other = FALLBACK[type_name]
    return other if row_length % block_size(other) == 0 else "F16"


def q4_k_m_types(tensors: Sequence[tuple[str, tuple[int, ...]]], n_heads: int = 0, n_kv_heads: int = 0) -> list[str]:
    """The ggml type llama.cpp's quantizer gives each tensor for LLAMA_FTYPE_MOSTLY_Q4_K_M.

    A transcription of ``llama_tensor_get_type_impl`` and ``tensor_type_fallback`` in llama.cpp's
    src/llama-quant.cpp (ggml-org/llama.cpp), for a model without experts, read for the Q4_K_M branch:

      * vectors (norms, 1-D) are not quantized: F32;
      * output.weight, and token_embd.weight when there is no output.weight (tied embeddings):
        Q6_K, or Q8_0 when a row is not a whole number of 256-weight blocks;
      * attn_v.weight: Q6_K in the "use more bits" layers (counted over the attn_v tensors in
        order), else Q4_K; in a 70B llama (80 blocks with grouped-query attention: llama.cpp's
        LLM_TYPE_70B, src/llama-model.cpp) Q4_K becomes Q5_K, attn_v being 8 times smaller there;
      * ffn_down.weight: Q6_K in the "use more bits" layers, else Q4_K;
      * every other matrix (token_embd of an untied model, attn_q, attn_k, attn_output, ffn_gate,
        ffn_up): Q4_K;
      * then the fallback for rows that are not whole 256-weight blocks: Q4_K -> Q5_0, Q6_K -> Q8_0.

    ``tensors``: (GGUF name, numpy-order shape) in file order; a row's length is the last dimension.
    """
    names = [name for name, _ in tensors]
    tied = "output.weight" not in names
    n_attn_v = sum("attn_v.weight" in n for n in names)
    n_ffn_down = sum("ffn_down" in n for n in names)
    n_blocks = len({int(m.group(1)) for n in names if (m := re.match(r"blk\.(\d+)\.", n))})
    is_70b = n_blocks == 80 and 0 < n_kv_heads < n_heads
    i_attn_v = i_ffn_down = 0
    types = []
    for name, shape in tensors:
        if len(shape) < 2 or not name.endswith("weight") or "_norm.weight" in name:
            types.append("F32")
            continue
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            kind = "Q6_K" if shape[-1] % block_size("Q4_K") == 0 else "Q8_0"
        elif "attn_v.weight" in name:
            kind = "Q6_K" if use_more_bits(i_attn_v, n_attn_v) else "Q4_K"
            if is_70b and kind == "Q4_K":
                kind = "Q5_K"
            i_attn_v += 1
        elif "ffn_down" in name:
            kind = "Q6_K" if use_more_bits(i_ffn_down, n_ffn_down) else "Q4_K"
            i_ffn_down += 1
        else:
            kind = "Q4_K"
        types.append(fallback(kind, shape[-1]))
    return types


def storage_types(a: configs.Architecture, quant: str) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, ggml type) of every tensor of a published model stored as F16, Q8_0 or Q4_K_M.

    F16 and Q8_0 store every matrix in that type and the norm vectors in F32 (llama.cpp's
    converter); Q4_K_M follows ``q4_k_m_types``.
    """
    shapes = configs.llama_tensor_shapes(a)
    if quant == "Q4_K_M":
        types = q4_k_m_types(shapes, a.n_heads, a.n_kv_heads)
    elif quant in ("F16", "Q8_0"):
        types = [quant if len(shape) == 2 else "F32" for _, shape in shapes]
    else:
        raise ValueError(f"storage {quant!r}: expected one of {', '.join(QUANTS)}")
    return [(name, shape, t) for (name, shape), t in zip(shapes, types)]


def weights_bytes(tensors: Sequence[tuple[str, tuple[int, ...], str]]) -> int:
    """Σ over the tensors of type_bytes(type, number of weights)."""
    return sum(configs.type_bytes(t, math.prod(shape)) for _, shape, t in tensors)


def read_per_token(rows: Sequence[Mapping]) -> int:
    """Bytes one generated token reads from a tensor table (param_counts.per_token_reads: every tensor
    once, one row of token_embd, the whole table again as a tied output head)."""
    return sum(r["bytes_read"] for r in pc.per_token_reads(rows))


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


def model_kv_bytes_per_token(metadata: Mapping) -> int:
    """K and V bytes per token of context for this run's model, from its metadata: blocks x KV heads
    x (key length + value length) x 2 bytes. For a model with sliding-window layers (Gemma 3) this
    is the full-attention upper bound; llama.cpp keeps only the window for those layers."""
    arch = meta_value(metadata, "general.architecture")
    n_embd = int(meta_value(metadata, f"{arch}.embedding_length"))
    n_head = int(meta_value(metadata, f"{arch}.attention.head_count"))
    n_kv = int(meta_value(metadata, f"{arch}.attention.head_count_kv", n_head))
    k_len = int(meta_value(metadata, f"{arch}.attention.key_length", n_embd // n_head))
    v_len = int(meta_value(metadata, f"{arch}.attention.value_length", k_len))
    blocks = int(meta_value(metadata, f"{arch}.block_count"))
    return configs.kv_bytes(blocks, n_kv, k_len, v_len, KV_CACHE_TYPE)


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
        "kv_bytes_per_token": model_kv_bytes_per_token(metadata),
        "max_context": int(meta_value(metadata, f"{arch}.context_length", 0)) or None,
        "n_tensors": len(rows),
        "source": f"this run's GGUF: tensors.csv (bytes), metadata ({arch}.*)",
    }


def published_model(p: Published, quant: str) -> dict:
    """A published model in one storage, as the fit table needs it."""
    tensors = storage_types(p.arch, quant)
    rows = [
        {"name": n, "shape": s, "type": t, "elements": math.prod(s), "bytes": configs.type_bytes(t, math.prod(s))}
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
        "kv_bytes_per_token": configs.kv_bytes_per_token(p.arch, KV_CACHE_TYPE),
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


# --- 3. the fit ---------------------------------------------------------------------------------------


def kv_cache_bytes(kv_bytes_per_token: int, context: int) -> int:
    """The whole cache at `context` tokens."""
    return kv_bytes_per_token * context


def ceiling_tps(bandwidth_gbps: float | None, bytes_per_token: int) -> float | None:
    """tokens/s ceiling: bandwidth / bytes read per token."""
    if bandwidth_gbps is None or bytes_per_token <= 0:
        return None
    return bandwidth_gbps * GB / bytes_per_token


FIT_COLUMNS = (
    "model_key",
    "model",
    "quant",
    "context",
    "context_tokens",
    "context_capped",
    "device",
    "device_name",
    "weights_bytes",
    "kv_cache_bytes",
    "total_bytes",
    "total_gb",
    "device_memory_bytes",
    "fits",
    "left_bytes",
    "read_per_token_bytes",
    "bandwidth_gbps",
    "ceiling_tps",
)


def fit_rows(models: Sequence[Mapping], devices: Sequence[Device]) -> list[dict]:
    """One row per (model, storage, context, device): memory needed, fits, what is left, the ceiling.

    The context is capped at the model's published maximum (context_capped says when); the ceiling is
    for the last token of that context, when the whole cache is read along with the weights.
    """
    rows = []
    for m in models:
        for label, requested in CONTEXTS.items():
            cap = m.get("max_context")
            tokens = min(requested, cap) if cap else requested
            kv = kv_cache_bytes(m["kv_bytes_per_token"], tokens)
            total = m["weights_bytes"] + kv
            read = m["read_per_token_bytes"] + kv
            for d in devices:
                fits = None if d.memory_bytes is None else total <= d.memory_bytes
                rows.append(
                    {
                        "model_key": m["key"],
                        "model": m["model"],
                        "quant": m["quant"],
                        "context": label,
                        "context_tokens": tokens,
                        "context_capped": tokens < requested,
                        "device": d.key,
                        "device_name": d.name,
                        "weights_bytes": m["weights_bytes"],
                        "kv_cache_bytes": kv,
                        "total_bytes": total,
                        "total_gb": total / GB,
                        "device_memory_bytes": d.memory_bytes,
                        "fits": fits,
                        "left_bytes": None if d.memory_bytes is None else d.memory_bytes - total,
                        "read_per_token_bytes": read,
                        "bandwidth_gbps": d.bandwidth_gbps,
                        "ceiling_tps": ceiling_tps(d.bandwidth_gbps, read),
                    }
                )
    return rows


def find_row(rows: Sequence[Mapping], model_key: str, context: str, device: str) -> dict | None:
    return next(
        (r for r in rows if r["model_key"] == model_key and r["context"] == context and r["device"] == device), None
    )


# --- the published file sizes the recipe is checked against ------------------------------------------


def published(claim_id: str) -> float:
    """A published number from this lesson's claims file (one place for it)."""
    for c in claims_mod.load_claims(SPEC.id):
        if c.claim_id == claim_id:
            return claims_mod.parse_published(c.published)
    raise KeyError(f"claims/{SPEC.id}.yaml has no claim {claim_id!r}")


# --- the whole lesson ---------------------------------------------------------------------------------


def run(
    metadata: Mapping,
    tensor_rows: Sequence[Mapping],
    *,
    timing_summary: Mapping | None = None,
    gpu_summary: Mapping | None = None,
    model: str = "this model",
) -> tuple[dict, dict]:
    """(metrics, tables): every number the lesson reports, and its tables computed once:
    "models" (models_table), "devices" (Device list), "fit" (fit_rows)."""
    models = models_table(this_model(metadata, tensor_rows, model))
    devices, metrics = measured_devices(timing_summary, gpu_summary)
    devices += list(DEVICES)
    rows = fit_rows(models, devices)

    m0 = models[0]
    metrics.update(
        {
            "model": model,
            "model_architecture": m0["architecture"],
            "model_quant": m0["quant"],
            "model_weights_bytes": m0["weights_bytes"],
            "model_read_per_token_bytes": m0["read_per_token_bytes"],
            "model_kv_bytes_per_token": m0["kv_bytes_per_token"],
            "model_max_context": m0["max_context"],
            "kv_cache_type": KV_CACHE_TYPE,
            "contexts": dict(CONTEXTS),
        }
    )
    for m in models[1:]:
        metrics[f"{m['key']}_weights_bytes"] = m["weights_bytes"]
        metrics[f"{m['key']}_read_per_token_bytes"] = m["read_per_token_bytes"]
    for p in PUBLISHED_MODELS:
        metrics[f"{p.key}_kv_bytes_per_token"] = configs.kv_bytes_per_token(p.arch, KV_CACHE_TYPE)
        metrics[f"{p.key}_max_context"] = p.max_context
    for d in DEVICES:
        metrics[f"{d.key}_memory_bytes"] = d.memory_bytes
        metrics[f"{d.key}_bandwidth_gbps"] = d.bandwidth_gbps
    metrics["dgx_spark_memory_gb"] = metrics["dgx_spark_memory_bytes"] / GiB  # as the spec sheet writes it

    # The headline facts, read off the fit table.
    def fact(prefix: str, model_key: str, context: str = "4k"):
        for device in ("this_machine", "dgx_spark"):
            r = find_row(rows, model_key, context, device)
            metrics[f"{prefix}_{context}_ceiling_{device}_tps"] = r["ceiling_tps"] if r else None
        r = find_row(rows, model_key, context, "this_machine")
        metrics[f"{prefix}_{context}_fits_this_machine"] = r["fits"] if r else None
        metrics[f"{prefix}_{context}_left_this_machine_bytes"] = r["left_bytes"] if r else None
        metrics[f"{prefix}_{context}_total_bytes"] = r["total_bytes"] if r else None

    fact("model", "model")
    fact(f"{SPECIMEN_KEY}_q8_0", f"{SPECIMEN_KEY}_q8_0")
    fact("llama3_8b_q4_k_m", "llama3_8b_q4_k_m")
    at_4k = [r for r in rows if r["device"] == "this_machine" and r["context"] == "4k" and r["model_key"] != "model"]
    metrics["fits_this_machine_4k_count"] = (
        sum(bool(r["fits"]) for r in at_4k) if at_4k[0]["fits"] is not None else None
    )
    metrics["fits_this_machine_4k_of"] = len(at_4k)
    metrics["fits_this_machine_4k"] = [f"{r['model']} {r['quant']}" for r in at_4k if r["fits"]]
    metrics["context_capped"] = sorted(
        {
            f"{r['model']} {r['context']} -> {r['context_tokens']}"
            for r in rows
            if r["context_capped"] and r["device"] == devices[0].key
        }
    )

    # The Q4_K_M recipe and the Q8_0 layout checked against the specimen's published file sizes:
    # a GGUF file is its tensors plus a header (metadata, the vocabulary, alignment padding), and
    # the same converter writes the same header whatever the storage.
    for quant, claim_id in (("q8_0", "specimen.q8_0_file_bytes"), ("q4_k_m", "specimen.q4_k_m_file_bytes")):
        file_bytes = int(published(claim_id))
        metrics[f"{SPECIMEN_KEY}_{quant}_file_bytes_published"] = file_bytes
        metrics[f"{SPECIMEN_KEY}_{quant}_header_bytes"] = file_bytes - metrics[f"{SPECIMEN_KEY}_{quant}_weights_bytes"]
    return metrics, {"models": models, "devices": devices, "fit": rows}


def compute(metadata: Mapping, tensor_rows: Sequence[Mapping], **kwargs) -> dict:
    """The metrics of ``run`` alone."""
    return run(metadata, tensor_rows, **kwargs)[0]


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None):
    """Check the lesson's claims (published device figures and file sizes) against this run's metrics."""
    context = claims_mod.run_context(model, sha256, metadata)
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- the figure ---------------------------------------------------------------------------------------


def _gib(n: float) -> str:
    return f"{n / GiB:,.0f} GiB" if n >= 100 * GiB else f"{n / GiB:.1f} GiB"


TIGHT = 0.10  # the figure marks a fit with less than this share of the device's memory left


def plot_what_fits_where(rows: Sequence[Mapping], context: str = "4k", title: str = ""):
    """A grid: one row per (model, storage), one column per device. Green: weights + KV cache fit;
    the cell shows the tokens/s ceiling. Amber: fits with under a tenth of the memory left (the
    runtime's buffers and the OS may not). Red: does not fit; the cell shows the memory it needs.
    Grey: nothing measured."""
    import matplotlib.colors as mcolors

    rows = [r for r in rows if r["context"] == context]
    models = list(dict.fromkeys((r["model_key"], f"{r['model']} {r['quant']}") for r in rows))
    devices = list(dict.fromkeys((r["device"], r["device_name"]) for r in rows))
    grid = {(r["model_key"], r["device"]): r for r in rows}

    def state(r):
        if r["fits"] is None:
            return 1
        if not r["fits"]:
            return 0
        return 2 if r["left_bytes"] < TIGHT * r["device_memory_bytes"] else 3

    fig, ax = figure(figsize=(9.0, 6.5))
    cells = [[state(grid[(m, d)]) for d, _ in devices] for m, _ in models]
    cmap = mcolors.ListedColormap(["#f4b6b0", "#dddddd", "#f7d98b", "#b9e3b0"])
    ax.imshow(cells, cmap=cmap, vmin=0, vmax=3, aspect="auto")
    for i, (m, _) in enumerate(models):
        for j, (d, _) in enumerate(devices):
            r = grid[(m, d)]
            if r["fits"] is None:
                text = "not measured"
            elif r["fits"]:
                tps = r["ceiling_tps"]
                text = "fits" if tps is None else f"{tps:,.0f} tok/s" if tps >= 10 else f"{tps:.1f} tok/s"
                if cells[i][j] == 2:
                    text += f"\n(tight: {_gib(r['left_bytes'])} left)"
            else:
                text = f"needs {_gib(r['total_bytes'])}"
            ax.text(j, i, text, ha="center", va="center", fontsize=7.5 if cells[i][j] != 2 else 6.5)
    ax.set_xticks(range(len(devices)), [_device_label(n, grid, d) for d, n in devices], fontsize=7.5)
    ax.set_yticks(range(len(models)), [label for _, label in models], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_xticks([j - 0.5 for j in range(1, len(devices))], minor=True)
    ax.set_yticks([i - 0.5 for i in range(1, len(models))], minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel(
        f"weights + F16 KV cache at {context} context. Green: fits, with the tokens/s ceiling "
        f"(bandwidth / bytes per token);\namber: fits with under {TIGHT:.0%} of the memory left; "
        "red: does not fit, with the memory it needs",
        fontsize=8,
    )
    if title:
        ax.set_title(title, fontsize=10, pad=34)
    fig.tight_layout()
    return fig


def _device_label(name: str, grid: Mapping, device: str) -> str:
    r = next(v for (m, d), v in grid.items() if d == device)
    mem = "memory ?" if r["device_memory_bytes"] is None else _gib(r["device_memory_bytes"])
    bw = r["bandwidth_gbps"]
    bw = "? GB/s" if bw is None else f"{bw:,.0f} GB/s" if bw >= 100 else f"{bw:.1f} GB/s"
    return f"{name.replace(' (', chr(10) + '(')}\n{mem}, {bw}"

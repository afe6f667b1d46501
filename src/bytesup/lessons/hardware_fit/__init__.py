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
    (bytesup.gguf.sizes.type_bytes); norm vectors stay F32 in every storage, as llama.cpp's
    converter writes them;
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

The lesson's parts, by concern: storage (what a tensor costs), catalog (the models and devices),
fit_table (the fit and its ceiling) and figures; this module holds the SPEC and ``run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.lessons import claims as claims_mod
from bytesup.lessons.hardware_fit.catalog import (
    DEVICES,
    PUBLISHED_MODELS,
    SPECIMEN_KEY,
    measured_devices,
    models_table,
    this_model,
)
from bytesup.lessons.hardware_fit.fit_table import CONTEXTS, find_row, fit_rows
from bytesup.lessons.hardware_fit.storage import KV_CACHE_TYPE, GiB
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model import configs
from bytesup.timing.ceiling import STORED

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
        Headline(
            "model_kv_cache_4k_bytes",
            "this model's KV cache at 4k context (F16, layer by layer)",
            unit="bytes",
            fmt=",d",
        ),
        Headline(
            "model_kv_cache_32k_bytes",
            "this model's KV cache at 32k context (capped at its maximum)",
            unit="bytes",
            fmt=",d",
        ),
        Headline(
            "model_kv_cache_32k_if_every_layer_grew_bytes",
            "the same if every layer kept every position (sliding-window models only)",
            unit="bytes",
            fmt=",d",
        ),
        Headline("this_machine_memory_bytes", "this machine's memory (measured)", unit="bytes", fmt=",d"),
        Headline(
            "this_machine_bandwidth_gbps", "this machine's STREAM copy bandwidth (measured)", unit="GB/s", fmt=".1f"
        ),
    ),
    architectures=None,  # any file: this run's model is counted from its own tensor table only
    runs_model=False,
)


# --- the published file sizes the recipe is checked against ------------------------------------------


def published(claim_id: str) -> float:
    """A published number from this lesson's claims file (one place for it)."""
    return claims_mod.published_value(SPEC.id, claim_id)


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
            "model_sliding_window": m0["sliding_window"],
            "model_kv_global_layers": m0["kv_global_layers"],
            "model_kv_sliding_layers": len(m0["kv_layers"]) - m0["kv_global_layers"],
            "model_max_context": m0["max_context"],
            "kv_cache_type": KV_CACHE_TYPE,
            "contexts": dict(CONTEXTS),
            # how every ceiling of the fit table is counted (bytesup.timing.ceiling)
            "ceiling_weights": STORED,
            "ceiling_context": "4k",
            "ceiling_context_tokens": CONTEXTS["4k"],
        }
    )
    # the cache layer by layer: a sliding-window model keeps only its window on the sliding layers,
    # so at long contexts its cache is far below the every-layer-grows count (bytes per token x context)
    cap = m0["max_context"]
    metrics["model_context_capped_at"] = cap if cap and cap < max(CONTEXTS.values()) else None
    for label in CONTEXTS:
        r = find_row(rows, "model", label, devices[0].key)
        metrics[f"model_kv_cache_{label}_bytes"] = r["kv_cache_bytes"]
        every_layer = m0["kv_bytes_per_token"] * r["context_tokens"]
        metrics[f"model_kv_cache_{label}_if_every_layer_grew_bytes"] = (
            every_layer if m0["sliding_window"] is not None else None
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

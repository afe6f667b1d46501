"""Whole-model timing: the project's own NumPy decoder at batch 1 (decode) and N tokens at once
(prefill), beside a STREAM copy measured in the same job, so the capstone can say which fraction
of the memory ceiling a real decoder reaches on this machine.

    decode: one new token per forward pass with the KV cache. Every weight is read once per
            token, so the ceiling is  tokens/s = STREAM copy bandwidth / bytes of weights read
            per token  (float32 bytes when the weights are resident as float32, as here).
    prefill: N prompt tokens in one pass. Each weight, once read, serves N tokens: tokens/s
            grows with N until the arithmetic, not memory, sets the pace.

Where llama-cpp-python is installed (the `llama` extra) the same file is run through llama.cpp
with the same threads, and its decode is set against the quantized file's own ceiling (file
bytes per token). Where it is not, the summary says how to add it.

Timing discipline as bytesup.timing.cpu: warm-up, repeats, medians with their spread, the machine's
other load recorded, and threads pinned by the rule (BLAS limited with threadpoolctl).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from bytesup.gguf.file import GGUFFile, UnsupportedTypeError
from bytesup.model import llama_cpp_ref
from bytesup.model.arch import supported
from bytesup.model.forward import Model, flops_per_token
from bytesup.timing.cpu import (
    BUSY_OTHER_FRACTION,
    CpuShare,
    machine_facts,
    settings,
    stream,
    stream_bytes_for,
    summarize,
    write_csv,
    write_json,
)

log = logging.getLogger(__name__)

DECODE_FRACTION_TARGET = 0.60  # the goal for the default model, resident float32
PROMPT_IDS_SEED = 1234  # which token ids feed the timed passes (any valid ids will do)

PREFILL_COLUMNS = ["engine", "n", "median_s", "tokens_per_s", "gflops", "rel_iqr", "noisy", "repeats"]


def prompt_ids(vocab: int, n: int, seed: int) -> np.ndarray:
    """n token ids drawn evenly from the vocabulary (reproducible; they need not make sense)."""
    return np.random.default_rng(seed).integers(3, vocab, size=n)


def time_decode(model, n_tokens: int, warmup: int, prompt_len: int = 8, seed: int = PROMPT_IDS_SEED) -> dict:
    """Per-token seconds of `n_tokens` decode steps after a short prompt (greedy: the next
    input is the argmax, as in generation), after `warmup` untimed steps."""
    spec = model.spec
    cache = model.new_cache(prompt_len + warmup + n_tokens)
    logits = model.forward(prompt_ids(spec.vocab, prompt_len, seed), cache)
    nxt = int(np.argmax(logits[-1]))
    for _ in range(warmup):
        nxt = int(np.argmax(model.forward([nxt], cache)[-1]))
    times = []
    for _ in range(n_tokens):
        t0 = time.perf_counter()
        logits = model.forward([nxt], cache)
        times.append(time.perf_counter() - t0)
        nxt = int(np.argmax(logits[-1]))
    return {"times": times, "context_end": cache.n}


def time_prefill(model, n: int, repeats: int, warmup: int, seed: int = PROMPT_IDS_SEED) -> list[float]:
    """Seconds of one prefill pass of n tokens into a fresh cache, `repeats` times."""
    ids = prompt_ids(model.spec.vocab, n, seed)
    out = []
    for i in range(warmup + repeats):
        cache = model.new_cache(n)
        t0 = time.perf_counter()
        model.forward(ids, cache)
        if i >= warmup:
            out.append(time.perf_counter() - t0)
    return out


def llama_cpp_timing(
    gguf_path: str | Path, threads: int, n_tokens: int, prefill_sizes, repeats: int, warmup: int, vocab: int
) -> dict:
    """llama.cpp's decode and prefill on the same file and threads, or {'skipped': why}."""

    usable, why = llama_cpp_ref.status(gguf_path)
    if not usable:
        return {"skipped": why}
    from llama_cpp import Llama

    n_ctx = max(max(prefill_sizes), 16 + warmup + n_tokens) + 8
    llm = Llama(
        model_path=llama_cpp_ref.model_path(gguf_path),  # a split model: its first part by llama.cpp's name
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=max(prefill_sizes),
        logits_all=False,
        verbose=False,
    )
    try:
        ids = [int(i) for i in prompt_ids(vocab, 8, PROMPT_IDS_SEED)]
        llm.reset()
        llm.eval(ids)
        nxt = ids[-1]
        times = []
        for step in range(warmup + n_tokens):
            t0 = time.perf_counter()
            llm.eval([nxt])
            if step >= warmup:
                times.append(time.perf_counter() - t0)
        prefill = {}
        for n in prefill_sizes:
            batch = [int(i) for i in prompt_ids(vocab, n, PROMPT_IDS_SEED)]
            samples = []
            for i in range(warmup + repeats):
                llm.reset()
                t0 = time.perf_counter()
                llm.eval(batch)
                if i >= warmup:
                    samples.append(time.perf_counter() - t0)
            prefill[n] = samples
    finally:
        llm.close() if hasattr(llm, "close") else None
    import llama_cpp

    return {"version": getattr(llama_cpp, "__version__", "unknown"), "decode_times": times, "prefill": prefill}


def run_decode(
    gguf_path: str | Path, cfg: dict | None = None, threads: int = 1, resident_budget_bytes: int = 2000 * 2**20
) -> dict:
    """The decode timing job: {'summary': dict, 'prefill': rows}."""

    cfg = settings(cfg)
    with GGUFFile(gguf_path) as f:
        refusal = supported(f.metadata, f.tensor_names, path=gguf_path)
    if refusal:
        return {"summary": {"status": "skipped", "skipped": refusal}, "prefill": []}
    try:
        measured = _measure(gguf_path, cfg, max(int(threads), 1), resident_budget_bytes)
    except UnsupportedTypeError as err:  # a tensor no dequantizer reads: no whole-model pass here
        return {
            "summary": {"status": "skipped", "skipped": f"the forward pass cannot read the file: {err}"},
            "prefill": [],
        }
    return measured


def _measure(gguf_path, cfg: dict, threads: int, resident_budget_bytes: int) -> dict:

    reps, warm, noisy = int(cfg["repeats"]), int(cfg["warmup"]), float(cfg["noisy_spread"])
    load_before = list(os.getloadavg())
    share = CpuShare()
    with (
        threadpool_limits(limits=threads, user_api="blas"),
        Model.from_gguf(gguf_path, resident_budget_bytes=resident_budget_bytes) as model,
    ):
        facts = machine_facts(threads)
        spec = model.spec
        streaming = model.mode != "resident"
        n_tokens = int(cfg["decode_tokens"]) if not streaming else min(int(cfg["decode_tokens"]), 3)
        sizes = [int(n) for n in cfg["prefill_sizes"] if n <= spec.context_length]
        if streaming:  # every pass dequantizes the whole file: keep the streaming run short
            sizes = [n for n in sizes if n <= 8] or sizes[:1]
        log.info("model %s: %s weights, %d decode steps, prefill N = %s", spec.arch, model.mode, n_tokens, sizes)

        array_bytes = stream_bytes_for(facts["llc_bytes"], cfg["stream_bytes"])

        def stream_copy() -> dict:
            return next(r for r in stream(array_bytes, threads, reps, warm, noisy) if r["kernel"] == "copy")

        # STREAM copy just before and just after the decode: the ceiling takes the better of the two,
        # so a moment of contention during one copy cannot flatter the decoder
        copies = [stream_copy()]
        decode = time_decode(model, n_tokens, max(warm, 1))
        d_stats = summarize(decode["times"], noisy)
        copies.append(stream_copy())
        copy = max(copies, key=lambda r: r["gbps"])
        prefill_rows = []
        for n in sizes:
            stats = summarize(time_prefill(model, n, reps if not streaming else 3, 1 if not streaming else 0), noisy)
            prefill_rows.append(
                {
                    "engine": "bytesup",
                    "n": n,
                    **stats,
                    "tokens_per_s": n / stats["median_s"],
                    "gflops": n * flops_per_token(spec, n) / stats["median_s"] / 1e9,
                }
            )
        wb = model.weight_bytes_per_token()
        llama = (
            llama_cpp_timing(gguf_path, threads, n_tokens, sizes, min(reps, 5), 1, spec.vocab)
            if not streaming
            else {"skipped": "the model's float32 weights exceed the resident budget"}
        )
    load_after = list(os.getloadavg())

    bytes_per_token = wb.file_bytes if streaming else wb.float32_bytes
    ceiling = copy["gbps"] * 1e9 / bytes_per_token
    tps = 1.0 / d_stats["median_s"]
    summary = {
        "status": "measured",
        "engine": "bytesup (NumPy)",
        "weights": model_mode_text(streaming),
        "threads": threads,
        "decode_tokens": n_tokens,
        "decode_median_s": d_stats["median_s"],
        "decode_rel_iqr": d_stats["rel_iqr"],
        "decode_noisy": d_stats["noisy"],
        "decode_tokens_per_s": tps,
        "decode_bytes_per_token": bytes_per_token,
        "decode_file_bytes_per_token": wb.file_bytes,
        "decode_float32_bytes_per_token": wb.float32_bytes,
        "decode_gbps": bytes_per_token * tps / 1e9,
        "stream_copy_gbps": copy["gbps"],
        "stream_copy_rel_iqr": copy["rel_iqr"],
        "stream_copy_before_after_gbps": [r["gbps"] for r in copies],
        "decode_ceiling_tokens_per_s": ceiling,
        "decode_fraction_of_ceiling": tps / ceiling,
        "decode_flops_per_token": flops_per_token(spec, decode["context_end"]),
        "prefill_tokens_per_s": {str(r["n"]): r["tokens_per_s"] for r in prefill_rows},
        "prefill_gflops": {str(r["n"]): r["gflops"] for r in prefill_rows},
        "target": {
            "name": "decode_fraction_of_stream_ceiling",
            "goal": DECODE_FRACTION_TARGET,
            "measured": tps / ceiling,
            "met": tps / ceiling >= DECODE_FRACTION_TARGET,
            "applies": not streaming,
        },
        "machine": facts,
        "settings": {k: cfg[k] for k in ("repeats", "warmup", "noisy_spread", "decode_tokens", "prefill_sizes")},
        "counting": {
            "decode": "bytes per token = every weight the step reads once (all blocks, final norm, the whole "
            "output head, one embedding row), float32 when resident, as stored when streaming; "
            "tokens/s = 1 / median seconds per step; GB/s = bytes per token x tokens/s / 1e9",
            "ceiling": "STREAM copy GB/s x 1e9 / bytes per token; the copy is measured in this job just before "
            "and just after the decode, and the better of the two sets the ceiling. A decode reads "
            "and does not write its weights, so it can pass a copy's counted bandwidth (fraction > 1)",
            "prefill": "tokens/s = N / median seconds of one N-token pass into a fresh cache; GFLOP/s from "
            "bytesup.model.forward.flops_per_token at context N (an upper count: causal attention)",
        },
    }
    if "skipped" in llama:
        summary["llama_cpp"] = {"skipped": llama["skipped"]}
    else:
        l_stats = summarize(llama["decode_times"], noisy)
        l_tps = 1.0 / l_stats["median_s"]
        l_ceiling = copy["gbps"] * 1e9 / wb.file_bytes
        summary["llama_cpp"] = {
            "version": llama["version"],
            "decode_tokens_per_s": l_tps,
            "decode_rel_iqr": l_stats["rel_iqr"],
            "decode_bytes_per_token": wb.file_bytes,
            "decode_gbps": wb.file_bytes * l_tps / 1e9,
            "decode_ceiling_tokens_per_s": l_ceiling,
            "decode_fraction_of_ceiling": l_tps / l_ceiling,
        }
        for n, samples in llama["prefill"].items():
            stats = summarize(samples, noisy)
            prefill_rows.append(
                {
                    "engine": "llama.cpp",
                    "n": n,
                    **stats,
                    "tokens_per_s": n / stats["median_s"],
                    "gflops": n * flops_per_token(spec, n) / stats["median_s"] / 1e9,
                }
            )
        summary["llama_cpp"]["prefill_tokens_per_s"] = {
            str(r["n"]): r["tokens_per_s"] for r in prefill_rows if r["engine"] == "llama.cpp"
        }
    summary["load_average_before"] = load_before
    summary["load_average_after"] = load_after
    summary["other_processes_cpu_fraction"] = other = share.other_fraction()
    summary["machine_shared"] = bool(other is not None and other > BUSY_OTHER_FRACTION)
    return {"summary": summary, "prefill": prefill_rows}


def model_mode_text(streaming: bool) -> str:
    return (
        "streamed: dequantized block by block from the file at every pass"
        if streaming
        else "resident: dequantized once to float32"
    )


def write_decode_results(result: dict, summary: str | Path, prefill: str | Path) -> None:
    write_json(summary, result["summary"])
    write_csv(prefill, result["prefill"], PREFILL_COLUMNS)

"""The capstone's step 4: the whole model, timed (decode at batch 1, prefill of N tokens) and which limit binds.

The timing_decode job (bytesup.timing.decode) measured, in one job: the decoder at batch 1 against the
machine's read ceiling (the best of STREAM copy, a threaded sum and a BLAS gemv); llama.cpp on a float32
copy of the same model, in turns with ours; the decode again at contexts up to 8,192 with the KV cache's
bytes beside the weights'; a streamed step split into dequantization and the rest; and the product that
reads Q8_0 blocks directly, on the specimen's FFN shape. `decode_metrics` takes those numbers as they are
written and works out what follows; a key the job did not write is None, never made up."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.lessons.decode_memory_bound.accounting import GB
from bytesup.model.configs import DEEPSEEK_CODER_6_7B
from bytesup.model.weights import LAYOUTS
from bytesup.timing.context import DECODE_CONTEXTS, KV_VISIBLE_SHARE, context_for_share, kv_bytes_read
from bytesup.timing.results import number

# --- 4. the whole model, timed: decode at batch 1, prefill of N tokens ---------------------------
#
# The timing_decode job ran the project's own NumPy decoder (and llama.cpp where installed) on the
# whole model and measured the read ceiling in the same job. Its decode.json holds the measured
# tokens/s and the bytes a token reads; prefill.csv holds tokens/s for N tokens in one pass.

ENGINE, LLAMA_CPP = "bytesup", "llama.cpp"  # the `engine` column of prefill.csv
WHOLE_MODEL_COLUMNS = (
    "engine",
    "phase",
    "n",
    "context",
    "tokens_per_s",
    "bytes_per_pass",
    "flops_per_pass",
    "intensity",
    "gflops",
    "gbps",
    "speedup_over_n1",
    "growth_vs_proportional",
    "fraction_of_sweep_peak",
    "noisy",
)
# The keys this lesson takes from decode.json for each engine (None in metrics.json when not measured).
DECODE_KEYS = (
    "decode_tokens_per_s",
    "decode_bytes_per_token",
    "decode_ceiling_tokens_per_s",
    "decode_fraction_of_read_ceiling",
    "decode_gbps",
)


def _prefill_by_n(rows: Sequence[Mapping], engine: str, fallback: Mapping | None) -> dict[int, dict]:
    """N -> {tokens_per_s, gflops, median_s, noisy} of one engine, from prefill.csv (else decode.json's maps)."""
    out = {}
    for r in rows:
        n, tps = number(r.get("n")), number(r.get("tokens_per_s"))
        if (r.get("engine") or ENGINE) == engine and n and tps:
            out[int(n)] = {
                "tokens_per_s": tps,
                "gflops": number(r.get("gflops")),
                "median_s": number(r.get("median_s")),
                "noisy": {"true": True, "false": False}.get(str(r.get("noisy")).strip().lower()),
            }
    if not out and isinstance(fallback, Mapping):  # an older prefill.csv: the summary's own maps
        for n, tps in (fallback.get("prefill_tokens_per_s") or {}).items():
            g = (fallback.get("prefill_gflops") or {}).get(n)
            if number(tps):
                out[int(n)] = {"tokens_per_s": number(tps), "gflops": number(g), "median_s": None, "noisy": None}
    return dict(sorted(out.items()))


def measured_bound(tps: float | None, bytes_per_token, read_gbps, prefill: Mapping[int, Mapping]) -> dict:
    """Which limit decode at batch 1 meets, read from the measurements alone.

    A pass of N tokens reads the weights once and does N tokens' arithmetic, so its seconds per
    token are about  memory_floor / N + arithmetic  with
        memory_floor = bytes per token / read ceiling   (the ceiling's own time)
        arithmetic   = seconds per token at the largest N - memory_floor / N   (what batching cannot share)
    Decode (N = 1) is memory-bound when memory_floor >= arithmetic; the two are equal at
    N = memory_floor / arithmetic (`crossover_n`), where prefill stops growing in proportion to N.
    (memory_floor + arithmetic) x decode tokens/s is the share of a decode step the two explain;
    what is left is per-step overhead (Python, small operations, other processes on the CPUs).
    """
    out = {
        "memory_floor_ms": None,
        "arithmetic_ms_per_token": None,
        "bound": None,
        "crossover_n": None,
        "largest_n": None,
        "memory_share_of_decode_time": None,
        "explained_share_of_decode_time": None,
    }
    b, bw = number(bytes_per_token), number(read_gbps)
    if not (b and bw):
        return out
    mem = b / (bw * GB)
    out["memory_floor_ms"] = 1e3 * mem
    if tps:
        out["memory_share_of_decode_time"] = mem * tps  # memory floor / seconds per decoded token
    if not prefill:
        return out
    n = max(prefill)
    arith = 1 / prefill[n]["tokens_per_s"] - mem / n
    out["largest_n"] = n
    if arith <= 0:  # the largest N ran at the memory roof: arithmetic not seen
        out["bound"] = "memory"
        return out
    out.update(
        arithmetic_ms_per_token=1e3 * arith, bound="memory" if mem >= arith else "arithmetic", crossover_n=mem / arith
    )
    if tps:  # how much of a measured decode step the two terms account for; the rest is overhead
        out["explained_share_of_decode_time"] = (mem + arith) * tps
    return out


def whole_model_points(
    engine: str, tps, bytes_per_token, flops_per_token, prefill: Mapping[int, Mapping], peak_gflops=None
) -> list[dict]:
    """whole_model_timing.csv rows of one engine: decode, then prefill by N, each as a roofline point.

    decode:  intensity = FLOPs per token / bytes per token; GFLOP/s = FLOPs per token x tokens/s
    prefill: a pass of N tokens reads the weights once: intensity = FLOPs of the pass / bytes per
             token (KV cache and activations left out); GFLOP/s as the timing job counted it.
    """
    b, f = number(bytes_per_token), number(flops_per_token)
    peak = number(peak_gflops)
    rows = []
    if tps and b and f:
        g = f * tps / 1e9
        rows.append(
            {
                "engine": engine,
                "phase": "decode",
                "n": 1,
                "tokens_per_s": tps,
                "bytes_per_pass": int(b),
                "flops_per_pass": f,
                "intensity": f / b,
                "gflops": g,
                "gbps": b * tps / GB,
                "speedup_over_n1": 1.0,
                "growth_vs_proportional": 1.0,
                "fraction_of_sweep_peak": g / peak if peak else None,
                "noisy": None,
            }
        )
    first = prefill.get(min(prefill)) if prefill else None
    for n, p in prefill.items():
        t = p["tokens_per_s"]
        g = p["gflops"]
        flops = g * 1e9 * n / t if g else (f * n if f else None)  # FLOPs of the pass of N tokens
        speedup = t / first["tokens_per_s"] if first else None
        rows.append(
            {
                "engine": engine,
                "phase": "prefill",
                "n": n,
                "tokens_per_s": t,
                "bytes_per_pass": int(b) if b else None,
                "flops_per_pass": flops,
                "intensity": flops / b if flops and b else None,
                "gflops": g,
                "gbps": b * t / n / GB if b else None,
                "speedup_over_n1": speedup,
                "growth_vs_proportional": speedup / (n / min(prefill)) if speedup else None,
                "fraction_of_sweep_peak": g / peak if g and peak else None,
                "noisy": p["noisy"],
            }
        )
    return rows


def _engine_metrics(
    prefix: str, record: Mapping, prefill: Mapping[int, Mapping], copy_gbps, read_gbps, flops_per_token, peak_gflops
) -> dict:
    """One engine's numbers: decode.json's as written, then what follows from them (the memory floor
    at the read ceiling `read_gbps`; the achieved GB/s also over STREAM copy, for comparison)."""
    m = {f"{prefix}{k}": number(record.get(k)) for k in DECODE_KEYS}
    b = m[f"{prefix}decode_bytes_per_token"]
    m[f"{prefix}decode_bytes_per_token"] = int(b) if b is not None else None
    tps = m[f"{prefix}decode_tokens_per_s"]
    f = number(flops_per_token)
    m[f"{prefix}decode_gflops"] = f * tps / 1e9 if f and tps else None
    m[f"{prefix}decode_intensity"] = f / b if f and b else None  # FLOPs per byte of weights at batch 1
    gbps = m[f"{prefix}decode_gbps"]
    m[f"{prefix}decode_gbps_over_stream_copy"] = gbps / copy_gbps if gbps and copy_gbps else None
    m[f"{prefix}prefill_tokens_per_s"] = {str(n): p["tokens_per_s"] for n, p in prefill.items()}
    m[f"{prefix}prefill_gflops"] = {str(n): p["gflops"] for n, p in prefill.items()}
    best = max(prefill, key=lambda n: prefill[n]["tokens_per_s"]) if prefill else None
    m[f"{prefix}prefill_best_n"] = best
    m[f"{prefix}prefill_best_tokens_per_s"] = prefill[best]["tokens_per_s"] if best else None
    m[f"{prefix}prefill_best_over_decode"] = prefill[best]["tokens_per_s"] / tps if best and tps else None
    peak = number(peak_gflops)
    m[f"{prefix}prefill_best_gflops_fraction_of_sweep_peak"] = (
        prefill[best]["gflops"] / peak if best and peak and prefill[best]["gflops"] else None
    )
    bound = measured_bound(tps, b, read_gbps, prefill)
    m.update({f"{prefix}decode_{k}": v for k, v in bound.items()})
    return m


def _mapping(record: Mapping, key: str) -> Mapping:
    value = record.get(key)
    return value if isinstance(value, Mapping) else {}


def _target(record: Mapping, name: str) -> Mapping:
    """One row of decode.json's targets (bytesup.timing.measure.target), or {} when it has none by that name."""
    rows = record.get("targets") if isinstance(record.get("targets"), list) else []
    return next((t for t in rows if isinstance(t, Mapping) and t.get("name") == name), {})


def peer_metrics(decode: Mapping) -> dict:
    """llama.cpp on the float32 copy of the same model, in turns with ours: its tokens/s, and ours over it."""
    f32 = _mapping(decode, "llama_cpp_f32")
    measured = bool(f32) and "skipped" not in f32
    target = _target(decode, "decode_over_llama_cpp_f32")
    gbps, ceiling = number(f32.get("decode_gbps")), number(decode.get("decode_read_ceiling_gbps"))
    return {
        "llama_cpp_f32_status": "measured" if measured else ("skipped" if f32 else None),
        "llama_cpp_f32_skipped": f32.get("skipped"),
        "llama_cpp_f32_decode_tokens_per_s": number(f32.get("decode_tokens_per_s")),
        "llama_cpp_f32_decode_gbps": gbps,
        "llama_cpp_f32_fraction_of_read_ceiling": gbps / ceiling if gbps and ceiling else None,
        "llama_cpp_f32_ours_tokens_per_s": number(f32.get("ours_tokens_per_s")),
        "decode_over_llama_cpp_f32": number(decode.get("decode_over_llama_cpp_f32")),
        "decode_over_llama_cpp_f32_goal": number(target.get("target")),
        "decode_over_llama_cpp_f32_met": target.get("met"),
    }


def context_metrics(decode: Mapping, specimen: Mapping | None = None) -> dict:
    """Decode across context: this model's measured tokens/s and the KV cache's share of the bytes per
    token at each context, and where the cache reaches KV_VISIBLE_SHARE of them; the same share computed
    for the specimen's shapes (deepseek-coder-6.7b, Q8_0 weights as stored, an F16 cache as llama.cpp keeps
    it) from `specimen` (its accounting summary: bytes_per_token)."""
    rows = [r for r in decode.get("decode_by_context") or [] if isinstance(r, Mapping)]
    m = {
        "decode_contexts": [int(r["context"]) for r in rows],
        "decode_tokens_per_s_by_context": {str(r["context"]): number(r.get("tokens_per_s")) for r in rows},
        "decode_kv_bytes_by_context": {str(r["context"]): number(r.get("kv_bytes_per_token")) for r in rows},
        "decode_kv_share_by_context": {str(r["context"]): number(r.get("kv_share_of_bytes")) for r in rows},
        "decode_context_notes": list(decode.get("decode_context_notes") or []),
        "decode_kv_visible_context": decode.get("decode_kv_visible_context"),
        "decode_kv_half_context": decode.get("decode_kv_half_context"),
        "kv_visible_share": KV_VISIBLE_SHARE,
    }
    first, last = (rows[0], rows[-1]) if rows else ({}, {})
    t0, t1 = number(first.get("tokens_per_s")), number(last.get("tokens_per_s"))
    m["decode_longest_context"] = int(last["context"]) if rows else None
    m["decode_slowdown_at_longest_context"] = t0 / t1 if t0 and t1 and len(rows) > 1 else None
    a, w = DEEPSEEK_CODER_6_7B, number((specimen or {}).get("bytes_per_token"))
    share = {}
    for c in (min(cc, a.context_length) for cc in DECODE_CONTEXTS):
        kv = kv_bytes_read(a, c, "F16")
        share[str(c)] = kv / (w + kv) if w else None
    m["deepseek_q8_0_kv_share_by_context"] = share
    for key, s in (("visible", KV_VISIBLE_SHARE), ("half", 0.5)):
        m[f"deepseek_q8_0_kv_{key}_context"] = context_for_share(a, int(w), s, a.context_length, "F16") if w else None
    return m


def streamed_metrics(decode: Mapping, specimen: Mapping | None = None) -> dict:
    """A streamed decode step split into dequantization and the rest (which bounds it), and the product
    that reads Q8_0 blocks directly: its GB/s against the read ceiling, and the tokens/s it would give
    the specimen (its weights per token at that product's weights per second)."""
    split, q8 = _mapping(decode, "streamed"), _mapping(decode, "q8_0_product")
    weights = number((specimen or {}).get("weights_read"))
    per_s, ceiling = number(q8.get("weights_per_s")), number(decode.get("decode_read_ceiling_gbps"))
    bpw = number(q8.get("bytes_per_weight"))
    return {
        "decode_streamed_tokens_per_s": number(split.get("tokens_per_s")),
        "decode_streamed_step_s": number(split.get("step_median_s")),
        "decode_streamed_dequant_s": number(split.get("dequant_median_s")),
        "decode_streamed_dequant_share": number(split.get("dequant_share")),
        "decode_streamed_dequant_gbps": number(split.get("dequant_gbps")),
        "decode_streamed_bound": split.get("bound"),
        "q8_0_product_gbps": number(q8.get("gbps")),
        "q8_0_product_fraction_of_read_ceiling": number(q8.get("fraction_of_read_ceiling")),
        "q8_0_product_int8_to_float32_share": number(q8.get("int8_to_float32_share")),
        "q8_0_product_shape": q8.get("shape"),
        "deepseek_q8_0_tokens_per_s_q8_product": per_s / weights if per_s and weights else None,
        "deepseek_q8_0_ceiling_read_q8_resident_tps": ceiling * GB / (weights * bpw)
        if ceiling and weights and bpw
        else None,
    }


def context_points(decode: Mapping) -> list[dict]:
    """whole_model_timing.csv rows of the decode across context: one roofline point per context (bytes =
    weights + the KV cache at that context; FLOPs at the mean context the timed steps attended to)."""
    out = []
    for r in decode.get("decode_by_context") or []:
        b, f, tps = number(r.get("bytes_per_token")), number(r.get("flops_per_token")), number(r.get("tokens_per_s"))
        if not (b and f and tps):
            continue
        out.append(
            {
                "engine": ENGINE,
                "phase": "decode",
                "n": 1,
                "context": int(r["context"]),
                "tokens_per_s": tps,
                "bytes_per_pass": int(b),
                "flops_per_pass": f,
                "intensity": f / b,
                "gflops": f * tps / 1e9,
                "gbps": b * tps / GB,
                "noisy": r.get("noisy"),
            }
        )
    return out


def decode_metrics(
    decode: Mapping | None, prefill_rows: Sequence[Mapping] | None, peak_gflops=None, specimen: Mapping | None = None
) -> tuple[dict, list[dict], list[str]]:
    """(metrics, whole_model_timing rows, notes) from decode.json and prefill.csv. `specimen`: the
    specimen's accounting summary (bytes_per_token, weights_read), for what is computed at its shapes.

    A skipped record (an architecture the forward pass does not follow) or a missing one leaves
    every measured key None and says why in `decode_skipped`; nothing is made up.
    """
    decode, prefill_rows = dict(decode or {}), list(prefill_rows or [])
    status = decode.get("status") or "missing"
    skipped = (
        decode.get("skipped")
        if status == "skipped"
        else (None if status == "measured" else "no decode.json: the timing_decode job did not run")
    )
    measured = status == "measured"
    record = decode if measured else {}
    copy = number(record.get("stream_copy_gbps"))
    read = number(record.get("decode_read_ceiling_gbps"))
    flops = number(record.get("decode_flops_per_token"))
    ours = _prefill_by_n(prefill_rows, ENGINE, decode) if measured else {}
    m = {
        "decode_status": status,
        "decode_skipped": skipped,
        "decode_engine": record.get("engine"),
        "decode_weights": record.get("weights"),
        "decode_threads": record.get("threads"),
        "decode_stream_copy_gbps": copy,
        "decode_read_ceiling_gbps": read,
        "decode_read_ceiling_kernel": record.get("decode_read_ceiling_kernel"),
        "decode_read_ceiling_rel_iqr": number(record.get("decode_read_ceiling_rel_iqr")),
        "decode_flops_per_token": flops,
    }
    m.update(_engine_metrics("", record, ours, copy, read, flops, peak_gflops))
    target = _target(record, "decode_fraction_of_read_ceiling")
    m["decode_target_goal"] = number(target.get("target"))
    m["decode_target_met"] = target.get("met")
    m["decode_target_applies"] = target.get("met") is not None if target else None  # None: streamed weights
    # the step's products alone, timed in turns with it: how fast BLAS reads these matrices, and their share of a step
    products = _mapping(record, "decode_products")
    m["decode_products_gbps"] = number(products.get("gbps"))
    m["decode_products_fraction_of_read_ceiling"] = number(products.get("fraction_of_read_ceiling"))
    m["decode_products_share_of_step"] = number(products.get("share_of_step"))
    m["decode_products_over_llama_cpp_f32"] = number(products.get("over_llama_cpp_f32"))
    # the weights' layout in memory (bytesup.model.weights.LAYOUTS): the one a trial chose, and a step in each
    layout = _mapping(record, "decode_layout")
    m["decode_layout"] = layout.get("chosen")
    medians = _mapping(layout, "median_s")
    for name in LAYOUTS:
        seconds = number(medians.get(name))
        m[f"decode_step_ms_{name.replace('-', '_')}"] = None if seconds is None else 1e3 * seconds
    m["decode_noisy"] = record.get("decode_noisy")
    m["decode_rel_iqr"] = number(record.get("decode_rel_iqr"))
    m["decode_machine_shared"] = record.get("machine_shared")
    m["decode_other_processes_cpu_fraction"] = number(record.get("other_processes_cpu_fraction"))

    llama = _mapping(record, "llama_cpp")
    l_measured = bool(llama) and "skipped" not in llama
    m["llama_cpp_status"] = "measured" if l_measured else ("skipped" if llama else None)
    m["llama_cpp_skipped"] = llama.get("skipped")
    m["llama_cpp_version"] = llama.get("version")
    theirs = (
        _prefill_by_n(prefill_rows, LLAMA_CPP, {"prefill_tokens_per_s": llama.get("prefill_tokens_per_s")})
        if l_measured
        else {}
    )
    m.update(_engine_metrics("llama_cpp_", llama if l_measured else {}, theirs, copy, read, flops, None))
    ours_tps, theirs_tps = m["decode_tokens_per_s"], m["llama_cpp_decode_tokens_per_s"]
    m["llama_cpp_over_bytesup_decode"] = theirs_tps / ours_tps if ours_tps and theirs_tps else None
    m.update(peer_metrics(record))
    m.update(context_metrics(record, specimen))
    m.update(streamed_metrics(record, specimen))

    rows = whole_model_points(ENGINE, ours_tps, m["decode_bytes_per_token"], flops, ours, peak_gflops)
    rows += whole_model_points(LLAMA_CPP, theirs_tps, m["llama_cpp_decode_bytes_per_token"], flops, theirs, peak_gflops)
    rows += context_points(record)
    notes = [] if measured else [f"whole-model timing not measured: {skipped}"]
    if measured and m["decode_machine_shared"]:
        notes.append(
            "whole-model timing ran while other processes used the CPUs (machine_shared): "
            "its tokens/s are below this machine's"
        )
    return m, rows, notes

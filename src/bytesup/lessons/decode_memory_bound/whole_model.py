"""The capstone's step 4: the whole model, timed (decode at batch 1, prefill of N tokens) and which limit binds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.lessons.decode_memory_bound.accounting import GB
from bytesup.timing.results import number

# --- 4. the whole model, timed: decode at batch 1, prefill of N tokens ---------------------------
#
# The timing_decode job ran the project's own NumPy decoder (and llama.cpp where installed) on the
# whole model and measured a STREAM copy in the same job. Its decode.json holds the measured
# tokens/s and the bytes a token reads; prefill.csv holds tokens/s for N tokens in one pass.

ENGINE, LLAMA_CPP = "bytesup", "llama.cpp"  # the `engine` column of prefill.csv
WHOLE_MODEL_COLUMNS = (
    "engine",
    "phase",
    "n",
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
    "decode_fraction_of_ceiling",
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


def measured_bound(tps: float | None, bytes_per_token, copy_gbps, prefill: Mapping[int, Mapping]) -> dict:
    """Which limit decode at batch 1 meets, read from the measurements alone.

    A pass of N tokens reads the weights once and does N tokens' arithmetic, so its seconds per
    token are about  memory_floor / N + arithmetic  with
        memory_floor = bytes per token / STREAM copy bandwidth   (the ceiling's own time)
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
    b, copy = number(bytes_per_token), number(copy_gbps)
    if not (b and copy):
        return out
    mem = b / (copy * GB)
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
    prefix: str, record: Mapping, prefill: Mapping[int, Mapping], copy_gbps, flops_per_token, peak_gflops
) -> dict:
    """One engine's numbers: decode.json's as written, then what follows from them."""
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
    bound = measured_bound(tps, b, copy_gbps, prefill)
    m.update({f"{prefix}decode_{k}": v for k, v in bound.items()})
    return m


def decode_metrics(
    decode: Mapping | None, prefill_rows: Sequence[Mapping] | None, peak_gflops=None
) -> tuple[dict, list[dict], list[str]]:
    """(metrics, whole_model_timing rows, notes) from decode.json and prefill.csv.

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
    copy = number(decode.get("stream_copy_gbps")) if measured else None
    flops = number(decode.get("decode_flops_per_token")) if measured else None
    ours = _prefill_by_n(prefill_rows, ENGINE, decode) if measured else {}
    m = {
        "decode_status": status,
        "decode_skipped": skipped,
        "decode_engine": decode.get("engine") if measured else None,
        "decode_weights": decode.get("weights") if measured else None,
        "decode_threads": decode.get("threads") if measured else None,
        "decode_stream_copy_gbps": copy,
        "decode_flops_per_token": flops,
    }
    m.update(_engine_metrics("", decode if measured else {}, ours, copy, flops, peak_gflops))
    target = decode.get("target") if measured and isinstance(decode.get("target"), Mapping) else {}
    m["decode_target_goal"] = number(target.get("goal"))
    m["decode_target_met"] = target.get("met") if measured else None
    m["decode_target_applies"] = target.get("applies") if measured else None
    m["decode_noisy"] = decode.get("decode_noisy") if measured else None
    m["decode_rel_iqr"] = number(decode.get("decode_rel_iqr")) if measured else None
    m["decode_machine_shared"] = decode.get("machine_shared") if measured else None
    m["decode_other_processes_cpu_fraction"] = number(decode.get("other_processes_cpu_fraction")) if measured else None

    llama = decode.get("llama_cpp") if measured and isinstance(decode.get("llama_cpp"), Mapping) else {}
    l_measured = bool(llama) and "skipped" not in llama
    m["llama_cpp_status"] = "measured" if l_measured else ("skipped" if llama else None)
    m["llama_cpp_skipped"] = llama.get("skipped")
    m["llama_cpp_version"] = llama.get("version")
    theirs = (
        _prefill_by_n(prefill_rows, LLAMA_CPP, {"prefill_tokens_per_s": llama.get("prefill_tokens_per_s")})
        if l_measured
        else {}
    )
    m.update(_engine_metrics("llama_cpp_", llama if l_measured else {}, theirs, copy, flops, None))
    ours_tps, theirs_tps = m["decode_tokens_per_s"], m["llama_cpp_decode_tokens_per_s"]
    m["llama_cpp_over_bytesup_decode"] = theirs_tps / ours_tps if ours_tps and theirs_tps else None

    rows = whole_model_points(ENGINE, ours_tps, m["decode_bytes_per_token"], flops, ours, peak_gflops)
    rows += whole_model_points(LLAMA_CPP, theirs_tps, m["llama_cpp_decode_bytes_per_token"], flops, theirs, peak_gflops)
    notes = [] if measured else [f"whole-model timing not measured: {skipped}"]
    if measured and m["decode_machine_shared"]:
        notes.append(
            "whole-model timing ran while other processes used the CPUs (machine_shared): "
            "its tokens/s are below this machine's"
        )
    return m, rows, notes

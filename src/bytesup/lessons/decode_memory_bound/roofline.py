"""The capstone's steps 2 and 3: tokens/s ceilings from bandwidth alone, and the timing sweep on a roofline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.gguf.sizes import type_bytes
from bytesup.lessons.decode_memory_bound.accounting import GB, Accounting
from bytesup.timing.ceiling import STORED, ms_per_token, tokens_per_s
from bytesup.timing.results import number


def ceilings(accounts: Sequence[Accounting], bw_rows: Sequence[Mapping]) -> list[dict]:
    """decode_ceilings.csv: the ceiling (bytesup.timing.ceiling.tokens_per_s) of each model's weights as
    stored with an empty cache (context 0), per model and bandwidth."""
    out = []
    for acc in accounts:
        b = acc.summary["bytes_per_token"]
        for bw in bw_rows:
            g = bw["gbps"]
            tps = tokens_per_s(g, b)
            out.append(
                {
                    "model": acc.label,
                    "bytes_per_token": b,
                    "bandwidth": bw["bandwidth"],
                    "source": bw["source"],
                    "gbps": g,
                    "tokens_per_s_ceiling": tps,
                    "weights": STORED,
                    "context_tokens": 0,
                    "ms_per_token_floor": ms_per_token(tps),
                    "note": bw["note"],
                }
            )
    return out


# --- 3. the roofline -----------------------------------------------------------------------------

ROOFLINE_COLUMNS = (
    "device",
    "dtype",
    "op",
    "n",
    "flops",
    "bytes",
    "intensity",
    "gflops",
    "median_s",
    "noisy",
    "derived",
)
# The timing sweep's dtype names -> bytes per element, from gguf-py's table (bytesup.gguf.sizes.type_bytes).
ITEMSIZE = {
    name: type_bytes(ggml, 1) for name, ggml in (("fp32", "F32"), ("float32", "F32"), ("bf16", "BF16"), ("fp16", "F16"))
}


def roofline_points(sweep: Sequence[Mapping], device: str) -> tuple[list[dict], list[str]]:
    """One point per row of a timing sweep: (arithmetic intensity, achieved GFLOP/s).

    intensity = flops / bytes with the timing job's counting (bytes = weights + X read + Y written).
    A missing flops or bytes column is worked out from rows, cols, n and the item size, a missing
    gflops from flops / median_s; `derived` names what was worked out, and notes say so. A row that
    cannot be placed is left out, with a note.
    """
    notes: list[str] = []
    if not sweep:
        return [], notes
    have = set(sweep[0])
    for col in ("flops", "bytes", "gflops"):
        if col not in have:
            notes.append(f"{device} sweep.csv has no column {col!r}")
    points = []
    for raw in sweep:
        n, rows, cols = (number(raw.get(k)) for k in ("n", "rows", "cols"))
        dtype = raw.get("dtype") or "fp32"
        itemsize = number(raw.get("itemsize")) or ITEMSIZE.get(str(dtype).lower())
        flops, nbytes, gflops, median = (number(raw.get(k)) for k in ("flops", "bytes", "gflops", "median_s"))
        derived = []
        if flops is None and None not in (n, rows, cols):
            flops, derived = 2 * rows * cols * n, derived + ["flops"]
        if nbytes is None and None not in (n, rows, cols, itemsize):
            nbytes, derived = (rows * cols + cols * n + rows * n) * itemsize, derived + ["bytes"]
        if gflops is None and flops and median:
            gflops, derived = flops / median / 1e9, derived + ["gflops"]
        if not (flops and nbytes and gflops):
            notes.append(f"{device} sweep row n={raw.get('n')!r} ({dtype}): not enough columns to place it")
            continue
        points.append(
            {
                "device": device,
                "dtype": dtype,
                "op": raw.get("op") or ("matvec" if n == 1 else "matmul"),
                "n": int(n) if n is not None else None,
                "flops": flops,
                "bytes": nbytes,
                "intensity": flops / nbytes,
                "gflops": gflops,
                "median_s": median,
                "noisy": {"true": True, "false": False}.get(str(raw.get("noisy")).strip().lower()),
                "derived": " ".join(derived),
            }
        )
    points.sort(key=lambda p: (p["dtype"], p["n"] or 0))
    if any(p["derived"] for p in points):
        notes.append(f"{device}: some roofline values worked out from other columns (see 'derived')")
    return points, notes


def roofs(points: Sequence[Mapping], bandwidth_gbps) -> dict:
    """The two roofs of one device: measured bandwidth (sloped) and the sweep's best GFLOP/s (flat)."""
    best = max(points, key=lambda p: p["gflops"], default=None)
    bw = number(bandwidth_gbps)
    peak = best["gflops"] if best else None
    return {
        "bandwidth_gbps": bw,
        "peak_gflops": peak,  # the best the sweep reached: a measured peak, not a datasheet number
        "peak_at_n": best["n"] if best else None,
        "peak_dtype": best["dtype"] if best else None,
        "ridge_intensity": peak / bw if peak and bw else None,  # FLOPs/byte where the two roofs meet
    }


def roofline_ceiling(summary: Mapping, rf: Mapping) -> dict:
    """Tokens/s allowed by each roof for one model's decode step, and which roof is lower.

    memory: bandwidth / bytes per token; compute: measured peak / FLOPs per token. The lower one
    binds. 'memory' means the token waits for bytes, not for arithmetic.
    """
    b, f = summary["bytes_per_token"], summary["decode_flops_per_token"]
    mem = rf["bandwidth_gbps"] * GB / b if rf.get("bandwidth_gbps") and b else None
    comp = rf["peak_gflops"] * 1e9 / f if rf.get("peak_gflops") and f else None
    bound = None if mem is None or comp is None else ("memory" if mem <= comp else "compute")
    return {
        "memory_ceiling_tps": mem,
        "compute_ceiling_tps": comp,
        "bound": bound,
        "compute_over_memory_ceiling": comp / mem if mem and comp else None,
    }


def bound_table(accounts: Sequence[Accounting], all_roofs: Mapping[str, Mapping]) -> list[dict]:
    """Per device and model: decode's intensity at batch 1 against the ridge, both ceilings, which binds."""
    rows = []
    for dev, rf in all_roofs.items():
        for acc in accounts:
            c = roofline_ceiling(acc.summary, rf)
            rows.append(
                {
                    "device": dev,
                    "model": acc.label,
                    "decode FLOPs/byte": acc.summary["decode_intensity"],
                    "ridge FLOPs/byte": rf["ridge_intensity"],
                    "memory ceiling tok/s": c["memory_ceiling_tps"],
                    "compute ceiling tok/s": c["compute_ceiling_tps"],
                    "bound": c["bound"],
                }
            )
    return rows


def flops_per_weight_n1(sweep: Sequence[Mapping], points: Sequence[Mapping]) -> float | None:
    """FLOPs the timing job counted for its N = 1 row, per weight of the matrix (rows x cols)."""
    p1 = next((p for p in points if p["n"] == 1 and str(p["dtype"]).lower() in ("fp32", "float32")), None)
    raw = next((r for r in sweep if number(r.get("n")) == 1), None)
    if p1 is None or raw is None:
        return None
    rows, cols = number(raw.get("rows")), number(raw.get("cols"))
    return p1["flops"] / (rows * cols) if rows and cols else None


def point_metrics(points: Sequence[Mapping], prefix: str) -> dict:
    """Counts the course quotes from the sweep: FLOPs per weight at N = 1, the work at N = 256 over N = 1."""
    fp32 = [p for p in points if str(p["dtype"]).lower() in ("fp32", "float32")] or list(points)
    by_n = {p["n"]: p for p in fp32}
    p1, p256 = by_n.get(1), by_n.get(256)
    out = {
        f"{prefix}_matvec_intensity": p1["intensity"] if p1 else None,
        f"{prefix}_matvec_gflops": p1["gflops"] if p1 else None,
        f"{prefix}_work_256_over_1": p256["flops"] / p1["flops"] if p1 and p256 else None,
    }
    return out

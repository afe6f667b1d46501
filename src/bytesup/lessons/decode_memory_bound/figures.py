"""The capstone's figures: bytes per token by group, the roofline, prefill against N."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.gguf.sizes import type_bytes
from bytesup.lessons import figure, legend_below, si_label
from bytesup.lessons.decode_memory_bound.accounting import Accounting
from bytesup.lessons.decode_memory_bound.whole_model import ENGINE, LLAMA_CPP

# --- figures -------------------------------------------------------------------------------------


def plot_bytes_per_token(accounts: Sequence[Accounting], title: str = ""):
    """Where each model's bytes per token go: one 100 % bar per model, its total under its name."""
    fig, ax = figure(figsize=(6.4, 2.8 + 1.1 * len(accounts)))
    colours = ["C0", "C1", "C2", "C4", "0.6"]
    for i, acc in enumerate(accounts):
        total = acc.summary["bytes_per_token"]
        left = 0.0
        for (group, b), colour in zip(acc.summary["bytes_by_group"].items(), colours):
            share = b / total
            ax.barh(i, share, height=0.5, left=left, color=colour, label=group if i == 0 else None)
            if share > 0.12:  # written where it fits inside its segment
                ax.text(left + share / 2, i, f"{100 * share:.0f}%", ha="center", va="center")
            left += share

    for i, acc in enumerate(accounts):  # each model's name and total above its bar: the bars get the width
        ax.text(0, i - 0.3, f"{acc.label}: {si_label(acc.summary['bytes_per_token'], 'B')}", va="bottom")
    ax.set_yticks([])
    ax.set_ylim(len(accounts) - 0.5, -0.9)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the bytes a token reads")
    legend_below(fig, ax, ncol=1)
    if title:
        ax.set_title(title)
    return fig


FP32_MATVEC_INTENSITY = 2 / type_bytes("F32", 1)  # FLOPs per byte of a float32 matvec: 2 per 4-byte weight


def decode_markers(accounts: Sequence[Accounting]) -> list[tuple[str, float]]:
    """Where batch-1 decode sits on the roofline: fp32 weights (the sweep's), then each model's mix."""
    return [("fp32", FP32_MATVEC_INTENSITY)] + [
        (a.label, a.summary["decode_intensity"]) for a in accounts if a.summary["decode_intensity"]
    ]


WHOLE_MODEL_STYLE = {ENGINE: ("C2", "our NumPy decoder"), LLAMA_CPP: ("C1", "llama.cpp")}


def plot_roofline(
    points: Sequence[Mapping],
    all_roofs: Mapping[str, Mapping],
    warm_gbps=None,
    markers: Sequence[tuple[str, float]] = (("fp32", FP32_MATVEC_INTENSITY),),
    title: str = "",
    whole_model: Sequence[Mapping] = (),
    course: Sequence[Mapping] = (),
    course_gbps=None,
):
    """Achieved GFLOP/s against FLOPs per byte, log-log, under each device's two measured roofs.

    `markers` are (label, intensity) of batch-1 decode, drawn as dotted verticals (see decode_markers).
    `whole_model`: whole_model_points() rows (decode a star, prefill by N a line of diamonds) and
    context_points() rows (decode across context, a dotted line of triangles);
    `course`: course_points(), under a sloped roof at `course_gbps` (the DGX Spark's quoted peak).
    """
    import numpy as np

    fig, ax = figure(figsize=(6.4, 9.0))  # room under the axes for the legend: every line and point is named there
    whole_model = [w for w in whole_model if w.get("intensity") and w.get("gflops")]
    xs = (
        [p["intensity"] for p in points]
        + [v for _, v in markers]
        + [w["intensity"] for w in whole_model]
        + [c["intensity"] for c in course]
    )
    lo, hi = min(xs + [0.1]) / 2, max(xs + [10.0]) * 2
    x = np.geomspace(lo, hi, 200)
    styles = {"cpu": ("C0", "o"), "gpu": ("C3", "s")}
    for dev, rf in all_roofs.items():
        colour, marker = styles.get(dev, ("C2", "^"))
        bw, peak = rf["bandwidth_gbps"], rf["peak_gflops"]
        if bw:
            roof = bw * x if not peak else np.minimum(bw * x, peak)
            ax.plot(x, roof, color=colour, lw=1.5, label=f"{dev}: copy {bw:.0f} GB/s (sloped roof)")
        if peak:
            ax.axhline(
                peak,
                color=colour,
                lw=0.8,
                ls="--",
                label=f"{dev}: peak {peak:.0f} GFLOP/s (best of sweep, N = {rf['peak_at_n']})",
            )
        for dtype in sorted({p["dtype"] for p in points if p["device"] == dev}):
            mine = [p for p in points if p["device"] == dev and p["dtype"] == dtype]
            filled = dtype in ("fp32", "float32")
            ax.plot(
                [p["intensity"] for p in mine],
                [p["gflops"] for p in mine],
                marker,
                color=colour,
                mfc=colour if filled else "white",
                ls="none",
                label=f"{dev} {dtype} sweep: one point per N",
            )
            for p in mine:  # N written at the sweep's two ends only: the points between follow in order
                if p["n"] == 1 or (p["n"] and p["n"] == max(q["n"] for q in mine)):
                    ax.annotate(
                        f"N={p['n']}",
                        (p["intensity"], p["gflops"]),
                        textcoords="offset points",
                        xytext=(4, -10),
                    )
    if course_gbps:
        ax.plot(
            x,
            course_gbps * x,
            color="0.45",
            lw=1.0,
            ls="-.",
            label=f"DGX Spark: quoted {course_gbps:.0f} GB/s (course)",
        )
    if course:
        ax.plot(
            [c["intensity"] for c in course],
            [c["gflops"] for c in course],
            "P",
            color="0.45",
            ls="none",
            label="DGX Spark CPU (course): ffn_gate fp32, N = 1, 256",
        )
        for c in course:
            ax.annotate(
                f"N={c['n']}",
                (c["intensity"], c["gflops"]),
                textcoords="offset points",
                xytext=(-46, 4),
                color="0.35",
            )
    for engine, (colour, name) in WHOLE_MODEL_STYLE.items():
        short = {ENGINE: "whole model, ours"}.get(engine, f"whole model, {name}")
        dec = [w for w in whole_model if w["engine"] == engine and w["phase"] == "decode" and w.get("context") is None]
        pre = [w for w in whole_model if w["engine"] == engine and w["phase"] == "prefill"]
        ctx = sorted((w for w in whole_model if w["engine"] == engine and w.get("context") is not None),
                     key=lambda w: w["context"])  # fmt: skip
        if len(ctx) > 1:  # decode across context: the KV cache's bytes move the point left and down
            ax.plot([w["intensity"] for w in ctx], [w["gflops"] for w in ctx], "v:", color=colour, ms=5, lw=0.8,
                    label=f"{short}: decode at contexts {ctx[0]['context']:,} to {ctx[-1]['context']:,}")  # fmt: skip
        if pre:
            ax.plot(
                [w["intensity"] for w in pre],
                [w["gflops"] for w in pre],
                "D-",
                color=colour,
                ms=4,
                lw=0.8,
                label=f"{short}: prefill, one point per N",
            )
        if dec:
            ax.plot(
                [dec[0]["intensity"]],
                [dec[0]["gflops"]],
                "*",
                color=colour,
                ms=12,
                mec="k",
                mew=0.5,
                label=f"{short}: decode, {dec[0]['tokens_per_s']:.1f} tokens/s",
            )
    if warm_gbps:
        x_warm = FP32_MATVEC_INTENSITY
        ax.plot(
            [x_warm], [x_warm * warm_gbps], "x", color="C0", label=f"cpu matvec, warm (in cache): {warm_gbps:.0f} GB/s"
        )
    names = ", ".join(n for n, _ in markers)  # batch-1 decode of each model: one dotted vertical, named once
    for k, (_, v) in enumerate(markers):
        ax.axvline(v, color="0.55", lw=1.0, ls=":", label=f"batch-1 decode:\n{names}" if k == 0 else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity, FLOPs per byte moved")
    ax.set_ylabel("achieved GFLOP/s")
    legend_below(fig, ax)
    if title:
        ax.set_title(title)
    return fig


def plot_prefill(
    whole_model: Sequence[Mapping], ceiling_tps=None, peak_gflops=None, llama_ceiling_tps=None, title: str = ""
):
    """Prefill tokens/s against N, log-log, under the two limits of our decoder.

    memory: N x the decode ceiling (a pass reads the weights once for N tokens; it grows in
    proportion to N); arithmetic: the sweep's measured peak / FLOPs per token at that N. Measured
    points follow the lower of the two; where they stop growing with N, arithmetic has taken over.
    """
    import numpy as np

    fig, ax = figure()
    pre = [w for w in whole_model if w["phase"] == "prefill"]
    ns = sorted({w["n"] for w in pre}) or [1]
    x = np.geomspace(min(ns), max(ns), 100)
    for engine, (colour, name) in WHOLE_MODEL_STYLE.items():
        mine = [w for w in pre if w["engine"] == engine]
        if mine:
            ax.plot(
                [w["n"] for w in mine],
                [w["tokens_per_s"] for w in mine],
                "D-",
                color=colour,
                ms=5,
                label=f"{name}: measured prefill",
            )
        dec = next((w for w in whole_model if w["engine"] == engine and w["phase"] == "decode"), None)
        if dec:
            ax.plot(
                [1],
                [dec["tokens_per_s"]],
                "*",
                color=colour,
                ms=12,
                mec="k",
                mew=0.5,
                label=f"{name}: decode, one token per pass with the KV cache",
            )
    if ceiling_tps:
        ax.plot(
            x,
            ceiling_tps * x,
            color="C2",
            lw=1.2,
            ls="--",
            label=f"memory limit, ours: N x {ceiling_tps:.1f} tokens/s (STREAM copy / float32 bytes)",
        )
    if llama_ceiling_tps:
        ax.plot(
            x,
            llama_ceiling_tps * x,
            color="C1",
            lw=1.2,
            ls="--",
            label=f"memory limit, llama.cpp: N x {llama_ceiling_tps:.1f} tokens/s (copy / file bytes)",
        )
    ours = [w for w in pre if w["engine"] == ENGINE and w["flops_per_pass"]]
    if peak_gflops and ours:
        ax.plot(
            [w["n"] for w in ours],
            [peak_gflops * 1e9 * w["n"] / w["flops_per_pass"] for w in ours],
            color="C0",
            lw=1.2,
            ls=":",
            label=f"arithmetic limit: sweep's peak {peak_gflops:.0f} GFLOP/s / FLOPs per token",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N, tokens in one forward pass")
    ax.set_ylabel("tokens per second")
    legend_below(fig, ax)
    if title:
        ax.set_title(title)
    return fig

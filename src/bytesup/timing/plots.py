"""The sweep figure: time and GFLOP/s against N, with this run's own limits as lines.

Plotting is split from timing (STYLE: split compute from plotting) so that a change of
colour never re-times anything. Inputs are the timing jobs' summary.json and sweep.csv.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def read_sweep(path: str | Path) -> list[dict]:
    """Rows of a sweep.csv as numbers (an empty file, e.g. a skipped GPU job, gives [])."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    keep = ("n", "median_s", "p25_s", "p75_s", "gflops", "bytes", "flops")
    return [{k: float(r[k]) for k in keep if r.get(k) not in (None, "")} | {"dtype": r.get("dtype", "")} for r in rows]


def roof_bandwidth(summary: dict) -> tuple[float | None, str]:
    """The memory roof's GB/s and its name: the read ceiling (best of copy, sum, dot and gemv by rows or columns) where the
    summary has one, else STREAM copy (a summary written before the read kernels)."""
    if summary.get("read_ceiling_gbps"):
        return summary["read_ceiling_gbps"], f"read ceiling ({summary.get('read_ceiling_kernel')})"
    return summary.get("stream_copy_gbps"), "copy bandwidth"


def plot_sweep(devices: dict[str, tuple[dict, list[dict]]], out_png: str | Path) -> None:
    """devices: name -> (summary, sweep rows). Left: median time per N; right: GFLOP/s per N,
    with the memory roof (the read ceiling x the op's FLOPs per byte) and the best
    measured GFLOP/s as lines."""
    fig, (ax_t, ax_f) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    for (device, (summary, rows)), colour in zip(devices.items(), ("tab:blue", "tab:orange", "tab:green")):
        for dtype in sorted({r["dtype"] for r in rows}):
            pts = sorted((r for r in rows if r["dtype"] == dtype), key=lambda r: r["n"])
            if not pts:
                continue
            n = [r["n"] for r in pts]
            label = f"{device} {dtype}"
            ax_t.plot(n, [r["median_s"] * 1e3 for r in pts], "o-", color=colour, label=label)
            if all("p25_s" in r and "p75_s" in r for r in pts):
                ax_t.fill_between(
                    n,
                    [r["p25_s"] * 1e3 for r in pts],
                    [r["p75_s"] * 1e3 for r in pts],
                    color=colour,
                    alpha=0.2,
                    linewidth=0,
                )
            ax_f.plot(n, [r["gflops"] for r in pts], "o-", color=colour, label=f"{label} measured")
            roof_gbps, roof_name = roof_bandwidth(summary)
            if roof_gbps and all("flops" in r and "bytes" in r for r in pts):
                roof = [roof_gbps * r["flops"] / r["bytes"] for r in pts]
                ax_f.plot(n, roof, "--", color=colour, alpha=0.7, label=f"{device} {roof_name} \u00d7 FLOP/byte")
            ax_f.axhline(
                max(r["gflops"] for r in pts),
                color=colour,
                linestyle=":",
                alpha=0.8,
                label=f"{device} {dtype} best measured",
            )
    for ax in (ax_t, ax_f):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens N (N = 1 is a matvec)")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_ylabel("median time (ms), band: 25-75 %")
    ax_f.set_ylabel("GFLOP/s")
    ax_t.set_title("time grows far slower than the work")
    ax_f.set_title("throughput against this machine's limits")
    ax_t.legend(fontsize=8)
    ax_f.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out_png, metadata={"Software": None})
    plt.close(fig)


def sweep_figure(cpu_summary, cpu_sweep, gpu_summary, gpu_sweep, out_png) -> None:
    devices = {"CPU": (json.loads(Path(cpu_summary).read_text()), read_sweep(cpu_sweep))}
    gpu = json.loads(Path(gpu_summary).read_text())
    gpu_rows = read_sweep(gpu_sweep)
    if gpu_rows and "skipped" not in gpu:
        devices["GPU"] = (gpu, gpu_rows)
    plot_sweep(devices, out_png)

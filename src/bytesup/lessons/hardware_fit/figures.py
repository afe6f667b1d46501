"""Lesson 7's figure: what fits where."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

from bytesup.lessons import MIN_FONT_PT, figure
from bytesup.lessons.hardware_fit.storage import GiB

# --- the figure ---------------------------------------------------------------------------------------


def _gib(n: float) -> str:
    return f"{n / GiB:,.0f} GiB" if n >= 100 * GiB else f"{n / GiB:.1f} GiB"


TIGHT = 0.10  # the figure marks a fit with less than this share of the device's memory left


def _rate(tps: float) -> str:
    """A tokens/s ceiling in a few characters: 0.7, 18, 305k, 3.7M."""
    for suffix, scale in (("M", 1e6), ("k", 1e3)):
        if tps >= scale:
            return f"{tps / scale:.3g}{suffix}"
    return f"{tps:.2g}" if tps < 10 else f"{tps:.0f}"


def plot_what_fits_where(rows: Sequence[Mapping], context: str = "4k", title: str = ""):
    """A grid: one row per (model, storage), one column per device. Green: weights + KV cache fit;
    the cell shows the tokens/s ceiling. Amber: fits with under a tenth of the memory left (the
    runtime's buffers and the OS may not). Red: does not fit; the cell shows the memory it needs.
    Grey: nothing measured. Short texts in every cell, so that the grid reads on a phone."""
    import matplotlib.colors as mcolors

    rows = [r for r in rows if r["context"] == context]
    models = list(dict.fromkeys((r["model_key"], f"{r['model']}\n{r['quant']}") for r in rows))
    devices = list(dict.fromkeys((r["device"], r["device_name"]) for r in rows))
    grid = {(r["model_key"], r["device"]): r for r in rows}

    def state(r):
        if r["fits"] is None:
            return 1
        if not r["fits"]:
            return 0
        return 2 if r["left_bytes"] < TIGHT * r["device_memory_bytes"] else 3

    fig, ax = figure(figsize=(6.4, 3.4 + 0.62 * len(models)))
    cells = [[state(grid[(m, d)]) for d, _ in devices] for m, _ in models]
    cmap = mcolors.ListedColormap(["#f4b6b0", "#dddddd", "#f7d98b", "#b9e3b0"])
    ax.imshow(cells, cmap=cmap, vmin=0, vmax=3, aspect="auto")
    for i, (m, _) in enumerate(models):
        for j, (d, _) in enumerate(devices):
            r = grid[(m, d)]
            if r["fits"] is None:
                text = "?"
            elif r["fits"]:
                text = "fits" if r["ceiling_tps"] is None else _rate(r["ceiling_tps"])
            else:
                text = _gib(r["total_bytes"])  # what it would need
            ax.text(j, i, text, ha="center", va="center", fontsize=MIN_FONT_PT)
    ax.set_xticks(range(len(devices)), [_device_label(n, grid, d) for d, n in devices], fontsize=MIN_FONT_PT)
    ax.set_yticks(range(len(models)), [label for _, label in models], fontsize=MIN_FONT_PT)
    ax.xaxis.tick_top()
    ax.set_xticks([j - 0.5 for j in range(1, len(devices))], minor=True)
    ax.set_yticks([i - 0.5 for i in range(1, len(models))], minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="minor", length=0)
    fig.supxlabel(
        f"green: fits, its tokens/s ceiling; amber: under {TIGHT:.0%} left\nred: does not fit, the memory it needs"
    )
    ax.set_title(title or f"weights + F16 KV cache at {context} context")
    return fig


def _device_label(name: str, grid: Mapping, device: str) -> str:
    """The device's name, its memory and its bandwidth, each on a line short enough for a narrow column."""
    r = next(v for (m, d), v in grid.items() if d == device)
    mem = "?" if r["device_memory_bytes"] is None else _gib(r["device_memory_bytes"])
    bw = r["bandwidth_gbps"]
    bw = "? GB/s" if bw is None else f"{bw:,.0f} GB/s" if bw >= 100 else f"{bw:.1f} GB/s"
    words = textwrap.wrap(name.replace("(", "").replace(")", ""), 10)
    return "\n".join([*words, mem, bw])

"""Lesson 7's figure: what fits where."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bytesup.lessons import figure
from bytesup.lessons.hardware_fit.storage import GiB

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

"""Lesson 6's figures: attention weights, the KV cache's size against context, decode time with and without it."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np

from bytesup.lessons import figure, legend_below, si_label
from bytesup.lessons.attention_kv.by_hand import causal_mask, kv_head, shown_heads, token_label
from bytesup.model.arch import ArchSpec
from bytesup.model.configs import kv_cache_bytes

# --- figures ------------------------------------------------------------------------------------


TITLE_CHARS = 48  # the heatmaps' title wraps here
CELL_VALUES_UP_TO = 4  # tokens: a heatmap of more shows its colours only (the weights are in the tables)


def plot_attention(attention: Sequence[np.ndarray], tokens: Sequence[str], spec: ArchSpec, title: str = ""):
    """Heatmaps of attention weights over the prompt (rows: queries, columns: keys), one under the other:
    of the shown heads (by_hand.shown_heads), the first block's first head, a middle block's middle
    head and the last block's last head."""
    blocks = sorted({b for b, _ in shown_heads(spec)})
    heads = sorted({h for _, h in shown_heads(spec)})
    pairs = list(zip(blocks, heads))
    n = len(tokens)
    labels = [token_label(t) for t in tokens]
    fig, axes = figure(len(pairs), 1, figsize=(6.4, 1.2 + 4.0 * len(pairs)), squeeze=False)
    image = None
    for ax, (b, h) in zip(axes[:, 0], pairs):
        a = np.asarray(attention[b][h], dtype=np.float64)
        shown = np.ma.masked_where(causal_mask(n), a)  # the masked future stays blank
        image = ax.imshow(shown, vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"block {b}, head {h} (reads K/V head {kv_head(h, spec)})")
        ax.set_xticks(range(n), labels, rotation=60, ha="right")
        ax.set_yticks(range(n), labels)
        ax.set_ylabel("query")
        if n <= CELL_VALUES_UP_TO:  # each weight written in its cell while they fit
            for i in range(n):
                for j in range(i + 1):
                    colour = "white" if a[i, j] < 0.6 else "black"
                    ax.text(j, i, f"{a[i, j]:.2f}", ha="center", va="center", fontsize="small", color=colour)
    axes[-1, 0].set_xlabel("key: the token looked at")
    fig.colorbar(image, ax=axes[:, 0], shrink=0.35, label="attention weight", location="right")
    if title:
        fig.suptitle(textwrap.fill(title, TITLE_CHARS))  # the prompt in the title can be long
    return fig


def plot_kv_size(rows: Sequence[Mapping], title: str = ""):
    """Cache size (F16) against context length, log-log, counted layer by layer (kv_size_table's
    kv_layers: a sliding-window layer stops growing at its window, so that model's curve bends
    there), with each model's weights as a dashed line and the context where the cache reaches them."""
    from matplotlib.ticker import FuncFormatter

    fig, ax = figure()
    for i, r in enumerate(rows):
        colour = f"C{i}"
        t = np.unique(np.concatenate([np.geomspace(1, r["context_length"], 300).astype(int), [r["context_length"]]]))
        what = f"{r['kv_bytes_per_token_f16']:,} B/token"
        if r["sliding_window"]:
            what = f"only {r['global_layers']} of {r['blocks']} layers grow past {r['sliding_window']:,} tokens"
        ax.plot(t, kv_cache_bytes(r["kv_layers"], t), color=colour, lw=2.5, label=f"{r['model']}: {what}")
        ax.axhline(
            r["weights_bytes"], color=colour, ls="--", lw=1.2, label=f"its weights: {si_label(r['weights_bytes'], 'B')}"
        )
        if r["sliding_window"]:  # where the sliding layers stop growing
            w = r["sliding_window"]
            ax.plot([w], [kv_cache_bytes(r["kv_layers"], w)], "s", color=colour, ms=7)
        tokens = r["cache_equals_weights_tokens"]
        if tokens is not None:  # the cache outgrows the weights here
            ax.plot([tokens], [r["weights_bytes"]], "o", color=colour, ms=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [2**k for k in range(0, 1 + int(math.log2(max(r["context_length"] for r in rows))), 3)]
    ax.set_xticks(ticks, [f"{t // 1024}k" if t >= 1024 else str(t) for t in ticks])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: si_label(v, "B")))
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("KV cache, F16")
    ax.grid(True, which="major", alpha=0.3)
    # the legend under the axes, off the curves; dots: the cache as large as the weights, squares: a window
    legend_below(fig, ax)
    if title:
        ax.set_title(title)
    return fig


def plot_timing(rows: Sequence[Mapping], title: str = ""):
    """Seconds per generated token, with and without the cache, against the context length."""
    fig, ax = figure()
    if rows:
        n = [r["context"] for r in rows]
        for key, label, colour in (
            ("recompute", "without the cache: whole prefix recomputed", "C3"),
            ("cached", "with the KV cache: one token through the model", "C0"),
        ):
            med = np.array([r[f"{key}_median_s"] for r in rows])
            lo = med - np.array([r[f"{key}_min_s"] for r in rows])
            hi = np.array([r[f"{key}_max_s"] for r in rows]) - med
            ax.errorbar(n, med, yerr=[lo, hi], marker="o", color=colour, capsize=3, label=f"{label} (median, min-max)")
        ax.set_xticks(n)
        ax.set_ylim(bottom=0)
        legend_below(fig, ax)
    else:
        ax.text(0.5, 0.5, "not timed: the model streams its weights", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("seconds per generated token")
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    return fig

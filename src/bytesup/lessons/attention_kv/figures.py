"""Lesson 6's figures: attention weights, the KV cache's size against context, decode time with and without it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from bytesup.lessons import figure
from bytesup.lessons.attention_kv.by_hand import causal_mask, kv_head, shown_heads, token_label
from bytesup.lessons.attention_kv.cache import kv_cache_bytes
from bytesup.model.arch import ArchSpec

# --- figures ------------------------------------------------------------------------------------


def plot_attention(attention: Sequence[np.ndarray], tokens: Sequence[str], spec: ArchSpec, title: str = ""):
    """Heatmaps of the shown heads' attention weights over the prompt (rows: queries, columns: keys)."""
    pairs = shown_heads(spec)
    blocks = sorted({b for b, _ in pairs})
    heads = sorted({h for _, h in pairs})
    n = len(tokens)
    labels = [token_label(t) for t in tokens]
    fig, axes = figure(
        len(blocks), len(heads), figsize=(7.0, 1.2 + 2.0 * len(blocks)), squeeze=False, layout="constrained"
    )
    image = None
    for r, b in enumerate(blocks):
        for c, h in enumerate(heads):
            ax = axes[r][c]
            a = np.asarray(attention[b][h], dtype=np.float64)
            shown = np.ma.masked_where(causal_mask(n), a)  # the masked future stays blank
            image = ax.imshow(shown, vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_title(f"block {b}, head {h} (KV {kv_head(h, spec)})", fontsize=8)
            ax.set_xticks(range(n), labels if r == len(blocks) - 1 else [""] * n, rotation=60, fontsize=7, ha="right")
            ax.set_yticks(range(n), labels if c == 0 else [""] * n, fontsize=7)
            if n <= 8:
                for i in range(n):
                    for j in range(i + 1):
                        ax.text(
                            j,
                            i,
                            f"{a[i, j]:.2f}",
                            ha="center",
                            va="center",
                            fontsize=6,
                            color="white" if a[i, j] < 0.6 else "black",
                        )
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.supxlabel("key: the token looked at", fontsize=8)
    fig.supylabel("query: the token asking", fontsize=8)
    return fig


def _bytes_label(v: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} B"


def plot_kv_size(rows: Sequence[Mapping], title: str = ""):
    """Cache size (F16) against context length, log-log, with each model's weights as a dashed line."""
    from matplotlib.ticker import FuncFormatter

    fig, ax = figure()
    for i, r in enumerate(rows):
        colour = f"C{i}"
        t = np.unique(np.geomspace(16, r["context_length"], 200).astype(int))
        ax.plot(
            t,
            kv_cache_bytes(r["kv_bytes_per_token_f16"], t, r["sliding_window"]),
            color=colour,
            lw=2,
            label=f"{r['model']}: {r['kv_bytes_per_token_f16']:,} B/token ({r['kv_heads']} KV heads)",
        )
        ax.axhline(
            r["weights_bytes"],
            color=colour,
            ls="--",
            lw=1,
            label=f"{r['model']} weights, {r['weights_stored_as']}: {_bytes_label(r['weights_bytes'])}",
        )
        if r["cache_equals_weights_tokens"] <= r["context_length"]:  # the cache outgrows the weights here
            ax.plot(r["cache_equals_weights_tokens"], r["weights_bytes"], "o", color=colour, ms=5)
            ax.annotate(
                f"{r['cache_equals_weights_tokens']:,.0f}",
                (r["cache_equals_weights_tokens"], r["weights_bytes"]),
                textcoords="offset points",
                xytext=(-4, 6),
                ha="right",
                fontsize=7,
                color=colour,
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [2**k for k in range(4, 1 + int(math.log2(max(r["context_length"] for r in rows))), 2)]
    ax.set_xticks(ticks, [f"{t // 1024}k" if t >= 1024 else str(t) for t in ticks])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _bytes_label(v)))
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("KV cache (solid) and weights (dashed)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=6.5, loc="upper left")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
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
        ax.legend(fontsize=8, loc="upper left")
    else:
        ax.text(0.5, 0.5, "not timed: the model streams its weights", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("seconds per generated token")
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig

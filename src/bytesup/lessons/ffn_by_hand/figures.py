"""Lesson 3's figures: the gate values under the model's valve, FLOPs per step, and the FFN across tokens and blocks."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import numpy as np

from bytesup.lessons import figure, legend_below, si_label
from bytesup.lessons.ffn_by_hand.across import TURN_DEG
from bytesup.lessons.ffn_by_hand.cost import ACT_LABELS
from bytesup.model.forward import activation

LABEL_SPAN = 30  # a bar's count takes about this factor of the log axis after the bar's end
LABEL_CHARS = 24  # a bar's label wraps here: long step names (gemma3's per-head norms) would squeeze the bars

# --- figures ------------------------------------------------------------------------------------


def plot_gate_histogram(g: np.ndarray, title: str = "", act: str = "silu"):
    """Histogram of the gate values g, with the activation (SiLU, GELU-tanh) drawn over it and the valve bands shaded."""
    g = np.asarray(g, dtype=np.float64)
    fig, ax = figure()
    lo, hi = min(float(g.min()), -6.0), max(float(g.max()), 3.0)
    z = np.linspace(lo, hi, 2001)
    sz = activation(act)(z)
    name = ACT_LABELS[act]
    band = ax.get_xaxis_transform()  # x in data units, y from 0 to 1 of the axes: full-height bands
    ax.fill_between(
        z,
        0,
        1,
        where=np.abs(sz) < 0.1,
        transform=band,
        color="C1",
        alpha=0.15,
        lw=0,
        label=f"|{name}(g)| < 0.1: passes under a tenth",
    )
    ax.fill_between(
        z, 0, 1, where=np.abs(sz) < 0.01, transform=band, color="C3", alpha=0.3, lw=0, label=f"|{name}(g)| < 0.01: shut"
    )
    ax.hist(g, bins=np.linspace(lo, hi, 121), color="0.45", label=f"gate values g ({g.size:,})")
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("g = W_gate · xn")
    ax.set_ylabel("count")
    ax2 = ax.twinx()
    ax2.plot(z, sz, color="C0", label=f"{name}(g), right axis")
    ax2.set_ylim(-0.5, float(activation(act)(hi)) * 1.05)
    ax2.set_ylabel(f"{name}(g)")
    ax.tick_params(axis="x", pad=8)  # the x labels clear the count axis' 0 at the corner
    legend_below(fig, ax, ax2)
    if title:
        ax.set_title(title)
    return fig


def plot_flops(rows: list[dict], title: str = ""):
    """FLOPs per step of one block for one token, log scale: matvecs dwarf everything else. Each bar
    has its count written at its end (a log axis makes a 1000x gap look small); the course's model's
    count for the same step, where it has one, is a black tick on the bar's row."""
    from matplotlib.patches import Patch

    fig, ax = figure(figsize=(6.4, 2.4 + 0.5 * len(rows)))
    labels = [f"{r['step']} ({r['half']})" if r["step"] == "residual add" else r["step"] for r in rows]
    # a long step name takes two lines, not the axes' width
    labels = [textwrap.fill(label, LABEL_CHARS) for label in labels]
    colours = ["C0" if r["kind"] == "matvec" else "C1" for r in rows]
    y = range(len(rows))
    ax.barh(y, [r["flops"] for r in rows], color=colours)
    for i, r in enumerate(rows):
        # the count at the bar's end; after the course's tick where that tick would cross the text
        tick = r.get("course_flops") or 0
        at = tick * 1.3 if r["flops"] < tick < r["flops"] * LABEL_SPAN else r["flops"] * 1.15
        ax.text(at, i, si_label(r["flops"]), va="center")
    course = [(i, r["course_flops"]) for i, r in enumerate(rows) if r.get("course_flops")]
    if course:
        ax.plot([c for _, c in course], [i for i, _ in course], "|", color="k", ms=16, mew=2.5, ls="none")
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(right=max(max(r["flops"] for r in rows), max((c for _, c in course), default=0)) * 40)
    ax.set_xlabel("FLOPs per token (log scale)")
    handles = [Patch(color="C0", label="matvec"), Patch(color="C1", label="element by element")]
    if course:
        handles.append(ax.plot([], [], "|", color="k", ms=16, mew=2.5, ls="none", label="the course's model")[0])
    fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False)
    if title:
        fig.suptitle(title)  # centred on the figure: the axes sit right of the labels, narrower than the title
    return fig


def plot_across_blocks(rows: Sequence[Mapping], walk: Mapping | None = None, course: Mapping | None = None, title=""):
    """What the FFN half adds in every block of the real forward pass (across.block_rows): its length
    over the stream's (top, log scale) and the turn it gives the stream (bottom), medians over the
    passage's positions. `walk`: the lesson's own token through block 0 ({"ratio", "angle"}: the
    embedding straight into the FFN); `course`: the course's value for its token, marked the same way."""
    fig, (top, bottom) = figure(2, 1, figsize=(6.4, 6.4), sharex=True)
    blocks = [r["block"] for r in rows]
    top.plot(blocks, [r["ffn_over_h_median"] for r in rows], "o-", color="C0", label="this model, real forward pass")
    bottom.plot(blocks, [r["ffn_angle_deg_median"] for r in rows], "o-", color="C0")
    for marks, colour, symbol, what in (
        (walk, "C1", "s", "this model, the lesson's token"),
        (course, "C3", "*", "the course's model, its token"),
    ):
        if marks:
            top.plot([0], [marks["ratio"]], symbol, color=colour, ms=12, ls="none", label=f"{what} (block 0)")
            bottom.plot([0], [marks["angle"]], symbol, color=colour, ms=12, ls="none")
    bottom.axhline(TURN_DEG, color="0.5", ls="--", lw=1)  # past it the FFN adds more direction than it keeps
    bottom.text(blocks[-1], TURN_DEG + 1.5, f"{TURN_DEG:g}°", ha="right", va="bottom", color="0.4")
    top.set_yscale("log")
    top.set_ylabel("|FFN| / |stream|")
    bottom.set_ylabel("turn (degrees)")
    bottom.set_ylim(0, 90)
    bottom.set_xlabel("block")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    if title:
        top.set_title(title)
    legend_below(fig, top)  # under both panels
    return fig

"""Lesson 3b's figures: the slots' coefficients, the edit's drift, the parameter shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bytesup.lessons import figure, legend_below
from bytesup.lessons.ffn_stores.edit import Rome
from bytesup.lessons.ffn_stores.regroup import Slots
from bytesup.model import configs

# --- figures ------------------------------------------------------------------------------------


def plot_slots(s: Slots, curve: Mapping[int, float], top_k: int = 10, title: str = ""):
    """Top: every slot's coefficient a_i, the top ones marked. Bottom: how many slots rebuild the output
    (``curve`` from rebuild_curve)."""
    a = s.a.astype(np.float64)
    fig, (ax1, ax2) = figure(2, 1, figsize=(6.4, 9.0))  # one panel under the other: each as wide as a phone
    ax1.vlines(np.arange(a.size), 0, a, color="0.55", lw=0.5)
    top = s.order[:top_k]
    ax1.plot(top, a[top], "o", color="C3", ms=3, label=f"top {top_k} by |a|")
    ax1.axhline(0, color="k", lw=0.6)
    ax1.set_xlabel("slot i")
    ax1.set_ylabel(f"a_i = {s.walk.recipe.activation}(g_i) u_i")
    legend_below(fig, ax1)
    ax2.plot(list(curve), list(curve.values()), color="C0")
    ax2.set_xscale("log")
    ax2.set_ylim(0, 1.05)
    ax2.axhline(0.1, color="0.6", ls="--", lw=0.8)
    ax2.set_xlabel("slots kept (largest |a_i| first)")
    ax2.set_ylabel("|out - partial sum| / |out|")
    if title:
        fig.suptitle(title)
    return fig


def plot_rome(ro: Rome, title: str = ""):
    """Top: each key's drift against its overlap with k*, on the formula's line.
    Bottom: the sampled keys' relative drift, with C = I and with ROME's C = K K^T."""
    fig, (ax1, ax2) = figure(2, 1, figsize=(6.4, 10.0))  # one panel under the other: each as wide as a phone
    x = ro.overlap
    ax1.scatter(x, ro.drift_length, s=4, color="C0", lw=0, label="keys: measured |W_hat k - W k|")
    s = np.array([min(float(x.min()), 0.0), 0.0, 1.0])  # from the lowest overlap up to k* itself
    ax1.plot(s, np.abs(s) * ro.residual_length, color="C3", lw=0.8, label="|k*.k|/|k*|^2 x |v* - W k*|")
    n_named = len(ro.key_ids) - int(ro.metrics["rome_keys_sampled"])
    for j in range(n_named):
        # the named keys' labels alternate above and below their points, so that neighbours stay apart
        ax1.annotate(
            ro.key_names[j], (x[j], ro.drift_length[j]), xytext=(4, 6 if j % 2 else -18), textcoords="offset points"
        )
    ax1.plot([1.0], [ro.residual_length], "*", color="C1", ms=9, label="k* itself (moved onto v*)")
    ax1.set_xlabel("overlap k*.k / |k*|^2")
    ax1.set_ylabel("output drift")
    rel = ro.drift_length[n_named:] / ro.output_length[n_named:]
    rel_cov = ro.relative_drift_cov[n_named:]
    lo = max(min(float(rel.min()), float(rel_cov.min())), 1e-6)
    hi = max(float(rel.max()), float(rel_cov.max()), lo * 10)
    bins = np.geomspace(lo, hi, 50)
    ax2.hist(rel, bins=bins, color="C0", alpha=0.6, label="C = I")
    ax2.hist(rel_cov, bins=bins, color="C2", alpha=0.6, label="C = K K^T (ROME)")
    ax2.set_xscale("log")
    ax2.set_xlabel("|W_hat k - W k| / |W k|, sampled keys")
    ax2.set_ylabel("keys")
    legend_below(fig, ax1, ax2)
    if title:
        fig.suptitle(title)
    return fig


def plot_parameters(archs: Sequence[configs.Architecture], counted: Sequence[Mapping]):
    """Where each model's parameters are: attention, FFN, norms, embeddings and head, as shares."""
    parts = (
        ("FFN", lambda c: c["ffn_total"]),
        ("attention", lambda c: c["attention_total"]),
        ("norms", lambda c: c["layers"] * c["block_norms"] + c["output_norm"]),
        ("embeddings + head", lambda c: c["embeddings_and_head"] + c["positions"]),
    )
    fig, ax = figure()
    left = np.zeros(len(archs))
    for (label, f), colour in zip(parts, ("C3", "C0", "C2", "C7")):
        share = np.array([f(c) / c["total"] for c in counted])
        ax.barh(range(len(archs)), share, left=left, color=colour, label=label)
        for y, (l0, w) in enumerate(zip(left, share)):
            if w > 0.14:  # written where it fits inside its segment
                ax.text(l0 + w / 2, y, f"{100 * w:.0f} %", ha="center", va="center", color="w")
        left += share
    ax.set_yticks(range(len(archs)), [f"{a.name}\n{c['total']:,} params" for a, c in zip(archs, counted)])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of all parameters")
    legend_below(fig, ax, ncol=2)
    return fig

"""How the timing jobs summarize what they measure: median and spread of repeated times, and the
row of a target the report checks (what was asked, what was measured, met or not)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def summarize(times: Sequence[float], noisy_spread: float) -> dict:
    """Median and spread of per-call times. Spread = interquartile range / median."""
    t = np.asarray(times, dtype=float)
    if t.size == 0:
        raise ValueError("no timings to summarize")
    median = float(np.median(t))
    p25, p75 = (float(v) for v in np.percentile(t, [25, 75]))
    rel_iqr = (p75 - p25) / median if median > 0 else math.inf
    return {
        "repeats": int(t.size),
        "median_s": median,
        "p25_s": p25,
        "p75_s": p75,
        "min_s": float(t.min()),
        "max_s": float(t.max()),
        "rel_iqr": rel_iqr,
        "noisy": bool(rel_iqr > noisy_spread),
    }


def target(
    name: str,
    goal: float,
    measured: float | None,
    unit: str,
    met: bool | None,
    noisy: bool = False,
    note: str | None = None,
) -> dict:
    row = {"name": name, "target": goal, "measured": measured, "unit": unit, "met": met, "noisy": bool(noisy)}
    if note:
        row["note"] = note
    return row

"""How every timing job measures: the clock, repeats, median and spread, the row of a target the report
checks (what was asked, what was measured, met or not), and the files it writes.

Timing discipline (STYLE.md section 7, as nanoGPT's bench): warm up, repeat, report the median
with its spread; a figure whose spread is wider than `noisy_spread` is flagged `noisy`, not
dropped. On a device the clock waits for outstanding work before it reads (`WallTimer(sync)`,
or bytesup.timing.gpu's CUDA events); numpy's calls return when done.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bytesup.errors import BytesupError


class TimingError(BytesupError, RuntimeError):
    """An expected failure of a timing job; the message is one line for the user."""


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


class WallTimer:
    """Host wall clock. `sync` waits for outstanding device work (a no-op for numpy)."""

    def __init__(self, sync: Callable[[], None] | None = None):
        self._sync = sync or (lambda: None)
        self._t0 = 0.0

    def start(self) -> None:
        self._sync()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        self._sync()
        return time.perf_counter() - self._t0


def time_rotation(
    calls: Sequence[Callable[[], Any]], repeats: int, warmup: int, min_sample_s: float = 0.0, timer=None
) -> tuple[list[float], int]:
    """Per-call seconds of `repeats` samples, calling `calls` round-robin.

    Each call works on its own buffer, so rotating among them means no call finds its
    data left in cache by the one before. A sample runs enough calls to last at least
    `min_sample_s` (needed on a GPU, where one call can take microseconds), judged from
    one call timed after `warmup` untimed passes over all the calls (at least one pass).
    Returns (times, calls_per_sample).
    """
    timer = timer or WallTimer()
    turn = 0

    def run(count: int) -> float:
        nonlocal turn
        timer.start()
        for _ in range(count):
            calls[turn % len(calls)]()
            turn += 1
        return timer.stop()

    for _ in range(max(warmup, 1)):  # at least one pass: first-touch page faults, lazy init
        run(len(calls))
    one = run(1)
    per_sample = 1 if one <= 0 or one >= min_sample_s else min(math.ceil(min_sample_s / one), 100_000)
    return [run(per_sample) / per_sample for _ in range(repeats)], per_sample


# --- writing ----------------------------------------------------------------------------


def write_csv(path: str | Path, rows: list[dict], columns: Sequence[str] | None = None) -> None:
    columns = list(columns or [])
    for r in rows:
        columns += [k for k in r if k not in columns]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def write_json(path: str | Path, data: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")

"""Reading the timing stage's files (summary.json, sweep.csv) for the lessons that show them.

A file that is absent gives empties and a note saying so; nothing is filled in.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path

# How the course's machine (NVIDIA DGX Spark, GB10 chip, Arm Cortex-X925/A725 cores) might name
# itself in the timing stage's machine facts. A match only allows the comparison; it decides nothing.
COURSE_MACHINE_MARKERS = ("dgx spark", "gb10", "cortex-x925")


def number(text):
    """A finite float from a JSON or CSV value, or None (missing, empty, not a number, infinite)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def read_timing(summary_path: str | Path | None, sweep_path: str | Path | None) -> tuple[dict, list[dict], list[str]]:
    """(summary, sweep rows, notes on what is missing). Absent files give empties and a note."""
    notes: list[str] = []
    summary: dict = {}
    rows: list[dict] = []
    if summary_path and Path(summary_path).is_file():
        summary = json.loads(Path(summary_path).read_text(encoding="utf-8"))
    else:
        notes.append(f"timing summary not found: {summary_path}")
    if sweep_path and Path(sweep_path).is_file():
        with Path(sweep_path).open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    else:
        notes.append(f"timing sweep not found: {sweep_path}")
    return summary, rows, notes


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def course_machine(summary: Mapping) -> bool:
    """Did the timing run on the course's machine? Judged from the summary's 'machine' facts only."""
    text = " ".join(_strings(summary.get("machine", {}))).lower()
    return any(m in text for m in COURSE_MACHINE_MARKERS)

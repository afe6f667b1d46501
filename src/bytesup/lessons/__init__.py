"""The lessons: one module each, with its SPEC (bytesup.lessons.spec), and the registry of them.

A lesson that grows past about 600 lines is a package instead: its __init__ declares the SPEC and
the lesson's ``run``, and modules beside it hold the computations by concern.

A lesson module declares ``SPEC`` and exposes the computations its notebook calls; the notebook
writes what they return with the helpers below, so that every lesson writes metrics.json,
tables and figures the same deterministic way: sorted keys, plain Python numbers, no
timestamps, fixed figure size and resolution (``figure()`` makes a figure of that size).

``registry()`` finds every module of this package that has a SPEC, in course order.
Published numbers for each lesson live in ``claims/<lesson id>.yaml`` (see bytesup.lessons.claims).
"""

from __future__ import annotations

import csv
import functools
import importlib
import json
import pkgutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from bytesup.errors import BytesupError
from bytesup.lessons.spec import LessonSpec
from bytesup.run.files import plain  # lessons and their tests write metrics with it

FIGSIZE = (6.4, 4.8)  # inches; every lesson figure has the same size ...
DPI = 120  # ... and resolution, so PNG bytes depend only on the data
# Drawn to be read on a phone: a 6.4-inch figure shown 360 pixels wide keeps 14-point text about
# 11 pixels tall. Every text of a lesson figure is at least MIN_FONT_PT (tests hold them to it).
MIN_FONT_PT = 11.0
STYLE = {
    "font.size": 14,
    "axes.titlesize": 14,
    "axes.labelsize": 14,
    "xtick.labelsize": 12.5,
    "ytick.labelsize": 12.5,
    "legend.fontsize": 12,
    "figure.titlesize": 14,
    "lines.linewidth": 2.0,
    "lines.markersize": 7,
}


@functools.cache
def registry() -> dict:
    """Lesson id -> LessonSpec for every lesson module here, in course order (position, then id)."""
    specs = []
    for info in pkgutil.iter_modules(__path__):
        spec = getattr(importlib.import_module(f"{__name__}.{info.name}"), "SPEC", None)
        if isinstance(spec, LessonSpec):
            specs.append(spec)
    ids = [s.id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"two lesson modules declare the same id: {sorted(ids)}")
    return {s.id: s for s in sorted(specs, key=lambda s: (s.position, s.id))}


def lesson_module(lesson_id: str):
    """The module that declares a lesson's SPEC."""
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if getattr(getattr(module, "SPEC", None), "id", None) == lesson_id:
            return module
    raise KeyError(f"no lesson {lesson_id!r}; known: {', '.join(registry())}")


class LessonInputError(BytesupError, ValueError):
    """An input file that is missing, or lacks a key or tensor a lesson needs."""


class MissingTensorError(LessonInputError, KeyError):
    """A tensor the lesson needs was not extracted (a KeyError too, so `in` and .get() work)."""


DEFAULT_RESIDENT_BUDGET_MB = 2000  # the config schema's default for forward.resident_budget_mb


def resident_budget_bytes(forward: Mapping | None) -> int:
    """The config's forward.resident_budget_mb in bytes (the schema's default when absent): the
    model keeps float32 weights resident when they fit, else streams them (0 streams always)."""
    if forward is None:
        forward = {}
    if not isinstance(forward, Mapping):
        raise LessonInputError(f"forward = {forward!r}: use a mapping with resident_budget_mb")
    budget = forward.get("resident_budget_mb", DEFAULT_RESIDENT_BUDGET_MB)
    number = isinstance(budget, (int, float, np.integer, np.floating)) and not isinstance(budget, bool)
    if not number or not np.isfinite(budget) or budget < 0:
        raise LessonInputError(
            f"forward.resident_budget_mb = {budget!r}: use a number of MB, 0 or more (0 streams the weights)"
        )
    return int(budget * 2**20)


def read_json(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise LessonInputError(f"{path}: file not found; run the stage that writes it first")
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def metadata_values(document: Mapping) -> dict:
    """The flat {key: value} GGUF metadata from a metadata.json document.

    The extract stage writes {"format": "bytesup.metadata/1", "gguf": {...}, "metadata": {key: value},
    "types": {...}}; a plain {key: value} mapping is accepted as it is.
    """
    if str(document.get("format", "")).startswith("bytesup.metadata/"):
        inner = document.get("metadata")
        if not isinstance(inner, Mapping):
            raise LessonInputError("metadata.json: no 'metadata' mapping inside; re-run the extract stage")
        return dict(inner)
    return dict(document)


def read_metadata(path: str | Path) -> dict:
    """The GGUF metadata keys and values from the extract stage's metadata.json."""
    return metadata_values(read_json(path))


class TensorFiles(Mapping):
    """The extract stage's tensors, by GGUF name, loaded only when asked for.

    ``extract.json`` maps each name to a .npy file (a path relative to extract.json's folder).
    Arrays are memory-mapped read-only: the 113 MB embedding table of the default model costs
    nothing until a row of it is read.
    """

    def __init__(self, index_path: str | Path):
        self.index_path = Path(index_path)
        index = read_json(self.index_path)
        if not isinstance(index.get("tensors"), Mapping):
            raise LessonInputError(f"{self.index_path}: no 'tensors' mapping; re-run the extract stage")
        self._entries = index["tensors"]
        self._base = self.index_path.parent

    def __getitem__(self, name: str) -> np.ndarray:
        entry = self._entries.get(name)
        if entry is None:
            raise MissingTensorError(
                f"{self.index_path}: tensor {name!r} was not extracted; add it to the extract selection"
            )
        return np.load(self._base / entry["file"], mmap_mode="r")

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def write_metrics(metrics: Mapping, path: str | Path) -> Path:
    """metrics.json: sorted keys, two-space indent, plain numbers, a final newline."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(plain(metrics), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def write_table(rows: Sequence[Mapping], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """A CSV table; columns default to the first row's keys. Missing values are left empty."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(columns if columns is not None else (rows[0].keys() if rows else []))
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else plain(v)) for k, v in row.items()})
    return path


def figure(nrows: int = 1, ncols: int = 1, **kwargs):
    """A new matplotlib figure of the lessons' one size and type style (no screen needed): (fig, axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    kwargs.setdefault("layout", "constrained")  # room for every label; legend_below puts legends outside
    return plt.subplots(nrows, ncols, figsize=kwargs.pop("figsize", FIGSIZE), **kwargs)


def si_label(value: float, unit: str = "") -> str:
    """A figure's short label for a count or a size: three significant digits and a decimal prefix
    (2.05 k, 7.16 GB, 612 B)."""
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def legend_below(fig, *axes, ncol: int = 1):
    """One legend for `axes` (all of the figure's when none), under them: off the data."""
    handles, labels = [], []
    for ax in axes or fig.axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False)


def save_figure(fig, path: str | Path) -> Path:
    """Save a matplotlib figure as PNG without the 'Software' stamp, then close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png", metadata={"Software": None})
    plt.close(fig)
    return path

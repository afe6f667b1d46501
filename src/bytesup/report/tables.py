"""The run's CSV files as tables a learner reads: a caption in words, headers with units.

The words are in labels.yaml beside this module (one home for them): a caption per file, a
header (and, where the value needs one, a format) per column, shared by every file unless the
file names its own. Every non-empty cell is a citation of its file, formatted by the column's
format or the report's one rule for its quantity (bytesup.report.formats).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

import yaml

from bytesup.report.doc import Doc
from bytesup.report.formats import BYTE_UNITS, bytes_format

CELL_CHARS = 100  # longer cells are cut, with an ellipsis (claims are never cut)


@dataclass(frozen=True)
class Column:
    label: str
    fmt: str | None = None


def _column(entry) -> Column:
    return Column(entry, None) if isinstance(entry, str) else Column(entry["label"], entry.get("fmt"))


@dataclass(frozen=True)
class Labels:
    tables: dict
    columns: dict
    patterns: tuple

    def caption(self, path: str) -> str:
        """The table's caption; a file nobody captioned is named in words ('byte_accounting.csv' -> 'Byte accounting')."""
        name = PurePosixPath(path).name
        entry = self.tables.get(name) or {}
        if entry.get("caption"):
            return entry["caption"]
        words = PurePosixPath(path).stem.replace("_", " ")
        return words[:1].upper() + words[1:]

    def column(self, path: str, name: str) -> Column | None:
        """The column's header and format: the file's own, else the shared one, else a pattern's; None when unlabelled."""
        own = (self.tables.get(PurePosixPath(path).name) or {}).get("columns") or {}
        if name in own:
            return _column(own[name])
        if name in self.columns:
            return _column(self.columns[name])
        for pattern, label, fmt in self.patterns:
            m = pattern.fullmatch(name)
            if m:
                return Column(label.format(*m.groups()), fmt)
        return None

    def hidden(self, path: str) -> set[str]:
        """Columns a reader does not need (a join key), not shown."""
        return set((self.tables.get(PurePosixPath(path).name) or {}).get("hide") or ())

    def header(self, path: str, name: str) -> str:
        """A column's header: its label, or (unlabelled) its name when it is already words ("Llama 3 8B")."""
        column = self.column(path, name)
        return column.label if column else name.replace("_", " ")

    def unlabelled(self, path: str, name: str) -> bool:
        """A file's column name a reader would see as it is: no label, not hidden, not already words
        (a model's name, "Llama 3 8B", "GPT-2 small", is)."""
        words = "_" not in name and (" " in name or "-" in name or name != name.lower())
        return self.column(path, name) is None and name not in self.hidden(path) and not words


@functools.lru_cache(maxsize=1)
def labels() -> Labels:
    data = yaml.safe_load((resources.files("bytesup.report") / "labels.yaml").read_text(encoding="utf-8"))
    patterns = tuple((re.compile(p["match"]), p["label"], p.get("fmt")) for p in data.get("patterns", ()))
    return Labels(data.get("tables", {}), data.get("columns", {}), patterns)


_SHARE_ROW = re.compile(r"(^|[_\s])(fraction|share|probability)([_\s]|$)")
_SIZE_ROW = re.compile(r"(^|_)(mb|gb)(_|$)")  # a quantity named in MB or GB: ffn_gb_bf16


def row_format(row: dict, name: str) -> str | None:
    """A cell's format where its row says what it holds: a row of a claims table (its unit: a size
    in GB is written as every size is), a row of a table of quantities (one quantity a row: a share
    is a percentage)."""
    if name in ("published", "measured") and row.get("unit") in BYTE_UNITS:
        return bytes_format(row["unit"])
    if "quantity" in row and name != "quantity":
        quantity = row["quantity"] or ""
        if _SHARE_ROW.search(quantity):
            return "%"
        size = _SIZE_ROW.search(quantity)
        if size:
            return bytes_format(size.group(2).upper())
    return None


def csv_table(
    doc: Doc,
    path: str,
    max_rows: int | None,
    caption: str | None = None,
    cut: int | None = CELL_CHARS,
    css=None,
    columns: list[str] | None = None,
) -> bool:
    """A CSV file as a table with one footnote; every non-empty cell is a citation of the file.

    Shows its first `max_rows` rows (all with None) and says how many the file holds; an empty
    file draws nothing and returns False. `columns` picks and orders the columns (default: all).
    A cell is written by its column's format, else its row's (`row_format`), else the one rule.
    """
    L = doc.ledger
    rows = L.data(path)
    if not rows:
        return False
    words = labels()
    names = columns or [name for name in rows[0] if name not in words.hidden(path)]
    formats = [(words.column(path, name) or Column("")).fmt for name in names]
    shown = rows if max_rows is None else rows[:max_rows]
    note = L.note(path, None, "table")
    body, classes = [], []
    for i, row in enumerate(shown):
        cells, cls = [], []
        for name, fmt in zip(names, formats):
            raw = row.get(name) or ""
            fmt = fmt or row_format(row, name)
            if fmt is None and cut and len(raw) > cut:
                fmt = f"cut:{cut}"
            cells.append(L.cite(path, f"{i}/{name}", fmt, note=note) if raw != "" else "")
            cls.append(css(name, raw) if css else "")
        body.append(cells)
        classes.append(cls)
    doc.table([words.header(path, n) for n in names], body, classes, note=note, caption=caption or words.caption(path))
    if len(shown) < len(rows):
        doc.para("The table shows the file's first rows; it holds all ", L.cite(path, "rows"), ".")
    return True

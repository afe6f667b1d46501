"""Citations: every number in the report is read from a run output, never typed in.

A citation names a file, a key inside it, the file's sha256 and the rule that wrote it.
Keys are paths split on "/":
  JSON  "x_rms", "dequant/Q8_0/ratio", "targets/0/met"  (list items by index)
  CSV   "3/measured"               row 3 (0-based, header excluded), column "measured"
        "count/status=reproduced"  how many rows have that value in that column
        "rows"                     the number of data rows
The same reader serves the report (to write a number) and `bytesup verify` (to re-read it).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bytesup.provenance import sha256_file


class CitationError(KeyError):
    """A cited key is missing from its file."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0])


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def read_value(path: str | Path, key: str) -> Any:
    """The value stored under `key` in a JSON or CSV file (see the module docstring)."""
    path = Path(path)
    parts = key.split("/")
    if path.suffix == ".csv":
        rows = _read_csv(path)
        if parts == ["rows"]:
            return len(rows)
        if len(parts) == 2 and parts[0] == "count" and "=" in parts[1]:
            column, wanted = parts[1].split("=", 1)
            return sum(1 for row in rows if row.get(column) == wanted)
        if len(parts) == 2 and parts[0].isdigit():
            row = int(parts[0])
            if row >= len(rows) or parts[1] not in rows[row]:
                raise CitationError(f"{path}: no row {row} / column {parts[1]!r}")
            return _number_or_text(rows[row][parts[1]])
        raise CitationError(f"{path}: {key!r} is not a CSV citation key")
    value: Any = json.loads(path.read_text(encoding="utf-8"))
    for part in parts:
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise CitationError(f"{path}: no key {key!r}")
    return value


def _number_or_text(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def format_value(value: Any, fmt: str | None = None) -> str:
    """How a cited value is written in the report; verify formats the re-read value the same way."""
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "none"}[value]
    if fmt == "%":
        return f"{100 * float(value):.1f} %"
    if fmt:
        return format(value, fmt)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


@dataclass
class Source:
    path: str
    rule: str
    sha256: str = ""
    bytes: int = 0

    def hash(self) -> "Source":
        self.sha256 = sha256_file(self.path)
        self.bytes = Path(self.path).stat().st_size
        return self


@dataclass
class Citation:
    id: int
    file: str
    key: str
    fmt: str | None
    value: Any
    text: str


@dataclass
class Ledger:
    """The files a report may cite (with their producing rule) and every citation made."""

    sources: dict[str, Source] = field(default_factory=dict)
    citations: list[Citation] = field(default_factory=list)

    def add_source(self, path: str, rule: str) -> Source:
        if path not in self.sources:
            self.sources[path] = Source(str(path), rule).hash()
        return self.sources[path]

    def source(self, path: str) -> Source:
        try:
            return self.sources[path]
        except KeyError:
            raise CitationError(f"{path} is not an input of the report rule") from None

    def cite(self, path: str, key: str, fmt: str | None = None) -> Citation:
        self.source(path)
        value = read_value(path, key)
        citation = Citation(len(self.citations) + 1, path, key, fmt, value, format_value(value, fmt))
        self.citations.append(citation)
        return citation

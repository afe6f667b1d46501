"""Citations: every number in the report is read from a run output, never typed in.

A citation names a file, a key inside it, the file's sha256 and the rule that wrote it.
Keys are paths split on "/":
  JSON  "x_rms", "dequant/Q8_0/ratio", "targets/0/met"  (list items by index)
  CSV   "3/measured"               row 3 (0-based, header excluded), column "measured"
        "count/status=reproduced"  how many rows have that value in that column
        "rows"                     the number of data rows
The same reader serves the report (to write a number) and `bytesup verify` (to re-read it).

Paths are relative to the project root, except files the report rule writes into the report
folder itself (`in_report`): those are relative to that folder, so a report folder that is
moved or unpacked elsewhere still finds them. The report's own manifest.json is one of them
(`SELF`); it cannot hold its own hash, so it is cited but not hashed.

A citation is either a number in running text, with its own footnote, or a cell of a table,
whose footnote is the table's (`note`).
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bytesup.errors import BytesupError
from bytesup.gguf.file import printable
from bytesup.run.files import sha256_file

SELF = "manifest.json"  # the report's own manifest, beside index.html


class CitationError(BytesupError, KeyError):
    """A cited key is missing from its file."""


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def read_key(data: Any, key: str, where: str = "document") -> Any:
    """The value under `key` in parsed JSON data."""
    value = data
    for part in key.split("/"):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise CitationError(f"{where}: no key {key!r}")
    return value


def read_csv_key(rows: list[dict[str, str]], key: str, where: str = "table") -> Any:
    if key == "rows":
        return len(rows)
    head, _, rest = key.partition("/")
    if head == "count" and "=" in rest:
        column, wanted = rest.split("=", 1)
        return sum(1 for row in rows if row.get(column) == wanted)
    if head.isdigit() and rest:
        row = int(head)
        if row >= len(rows) or rest not in rows[row]:
            raise CitationError(f"{where}: no row {row} / column {rest!r}")
        return _number_or_text(rows[row][rest])
    raise CitationError(f"{where}: {key!r} is not a CSV citation key")


def read_value(path: str | Path, key: str) -> Any:
    """The value stored under `key` in a JSON or CSV file (see the module docstring)."""
    path = Path(path)
    if path.suffix == ".csv":
        return read_csv_key(_read_csv(path), key, str(path))
    return read_key(json.loads(path.read_text(encoding="utf-8")), key, str(path))


def _number_or_text(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def format_value(value: Any, fmt: str | None = None) -> str:
    """How a cited value is written in the report; verify formats the re-read value the same way.

    fmt: a format() spec (".3f"), "%" (a fraction as a percentage), "json" (compact JSON, for
    dicts), or "cut:N" (the text cut to N characters with a trailing ellipsis).
    Non-printable characters (a token's "\r", a lone surrogate) are shown escaped, as
    `bytesup inspect` shows them: a browser would turn "\r" into "\n" and lose the difference.
    """
    return printable(_format(value, fmt))


def _format(value: Any, fmt: str | None) -> str:
    if fmt and fmt.startswith("cut:"):
        text = format_value(value)
        limit = int(fmt[4:])
        return text if len(text) <= limit else text[: limit - 1] + "\u2026"
    if fmt == "json":
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "none"}[value]
    if fmt and fmt.endswith("%"):  # "%" and ".1%" alike: a fraction as a percentage, one way everywhere
        digits = fmt[1:-1] if fmt.startswith(".") else "1"
        return f"{100 * float(value):,.{digits}f} %"
    if fmt:
        if isinstance(value, (int, float)) and value == 0 and re.fullmatch(r"\.\d+[eEgG]", fmt):
            return "0"  # an exact zero is 0 in every notation (0.0e+00 reads as a measurement)
        if isinstance(value, (int, float)) and re.fullmatch(r"\.\d+f|d", fmt):
            fmt = "," + fmt  # thousands separated, as every count and byte size in the report
        return format(value, fmt)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return plain_float(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return format_value(value, "json")
    return str(value)


def plain_float(value: float) -> str:
    """The report's one rule for a float nobody gave a format: four significant digits, never
    scientific notation where a person reads the number (a whole float is a count: 53,084,160;
    12.83; 0.0854), thousands separated; only magnitudes below 0.001 keep an exponent (1e-06)."""
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == 0:
        return "0"
    if value.is_integer() or abs(value) >= 1e4:
        return f"{round(value):,}"
    if abs(value) < 1e-3:
        return f"{value:.3g}"
    digits = max(0, 3 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass
class Source:
    path: str  # as recorded: project-relative, or report-relative when in_report
    rule: str
    sha256: str = ""
    bytes: int = 0
    in_report: bool = False

    def hash(self, location: str | Path) -> Source:
        self.sha256 = sha256_file(location)
        self.bytes = Path(location).stat().st_size
        return self


@dataclass
class Citation:
    id: int
    file: str
    key: str
    fmt: str | None
    value: Any
    text: str
    note: int  # the footnote that names the source: its own, or its table's or figure's


@dataclass
class Note:
    """One footnote: a number's source (file and key), or a table's or figure's file (key None)."""

    id: int
    file: str
    key: str | None
    kind: str  # "number", "table" or "figure"


@dataclass
class Ledger:
    """The files a report may cite (with their producing rule), every citation and footnote made.

    report_dir: where files written into the report folder (`in_report`) are read from;
    root: where project-relative paths start (the project, or an unpacked archive's folder).
    formats: one format per quantity: {scope: {name: format}}, a name being the last part of a key
    (a JSON key or a CSV column) and a scope a folder of cited files ("" for all), used wherever that
    quantity is cited without a format of its own, so it reads the same everywhere it appears.
    Files are hashed when first cited, so files that are never cited need not exist.
    """

    report_dir: str | Path = "."
    root: str | Path = "."
    formats: dict[str, dict[str, str]] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    documents: dict[str, Any] = field(default_factory=dict)  # in-memory JSON (the manifest in the making)
    citations: list[Citation] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def location(self, path: str) -> Path:
        src = self.sources.get(path) or self._unknown(path)
        return Path(self.report_dir) / src.path if src.in_report else Path(self.root) / src.path

    def add_source(self, path: str, rule: str, in_report: bool = False) -> Source:
        if path not in self.sources:
            self.sources[path] = Source(str(path), rule, in_report=in_report)
        return self.sources[path]

    def add_document(self, name: str, data: Any, rule: str) -> Source:
        """A JSON document cited while it is being written (the manifest): read from memory, not hashed."""
        self.documents[name] = data
        self.sources[name] = Source(name, rule, sha256="", bytes=0, in_report=True)
        return self.sources[name]

    @staticmethod
    def _unknown(path: str):
        raise CitationError(f"{path} is not an input of the report rule")

    def source(self, path: str) -> Source:
        """The file's record, hashed on first use (the manifest, in memory, is not hashed)."""
        src = self.sources.get(path) or self._unknown(path)
        if not src.sha256 and path not in self.documents:
            src.hash(self.location(path))
        return src

    def fmt_for(self, path: str, key: str) -> str | None:
        name = key.rsplit("/", 1)[-1]
        for scope in sorted(self.formats, key=len, reverse=True):
            if (not scope or path.startswith(scope + "/")) and name in self.formats[scope]:
                return self.formats[scope][name]
        return None

    def read(self, path: str, key: str) -> Any:
        self.source(path)
        if path in self.documents:
            return read_key(self.documents[path], key, path)
        return read_value(self.location(path), key)

    def note(self, path: str, key: str | None, kind: str) -> Note:
        self.source(path)
        note = Note(len(self.notes) + 1, path, key, kind)
        self.notes.append(note)
        return note

    def cite(self, path: str, key: str, fmt: str | None = None, note: Note | None = None) -> Citation:
        """A number in running text (its own footnote), or with `note`, a cell of that note's table."""
        value = self.read(path, key)
        if fmt is None:
            fmt = self.fmt_for(path, key)
        if note is None:
            note = self.note(path, key, "number")
        elif note.file != path:
            raise CitationError(f"{path} → {key}: a cell of the table from {note.file} must cite that file")
        citation = Citation(len(self.citations) + 1, path, key, fmt, value, format_value(value, fmt), note.id)
        self.citations.append(citation)
        return citation

    def cited_files(self) -> list[Source]:
        """Every hashed source that a citation or footnote names, in the order first cited."""
        seen: dict[str, Source] = {}
        for path in [n.file for n in self.notes]:
            src = self.sources[path]
            if path not in seen and path not in self.documents:
                seen[path] = src
        return list(seen.values())


def note_line(note: Note | dict, source: Source | dict) -> str:
    """The footnote text; verify rebuilds it from the manifest and compares."""
    get = (lambda o, k: o[k]) if isinstance(note, dict) else getattr
    sget = (lambda o, k: o[k]) if isinstance(source, dict) else getattr
    file, key, kind = get(note, "file"), get(note, "key"), get(note, "kind")
    if file == SELF:
        where = f"this report's {SELF}, written by rule {sget(source, 'rule')}"
    else:
        where = f"sha256 {sget(source, 'sha256')[:12]}, rule {sget(source, 'rule')}"
        if sget(source, "in_report"):
            file = f"{file} (in this report's folder)"
    if kind == "number":
        return f"{file} \u2192 {key} ({where})"
    if kind == "table":
        return f"{file}, each cell read from its row and column or named key ({where})"
    return f"{file} ({where})"

"""Citations: every number in the report is read from a run output, never typed in.

A citation names a file, a key inside it, the file's sha256 and the rule that wrote it.
Keys are paths split on "/":
  JSON  "x_rms", "dequant/Q8_0/ratio", "targets/0/met"  (list items by index)
  CSV   "3/measured"               row 3 (0-based, header excluded), column "measured"
        "count/status=reproduced"  how many rows have that value in that column
        "count/lesson=x&status=y"  how many rows have both
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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bytesup.errors import BytesupError
from bytesup.report.formats import format_value, one_rule
from bytesup.run.files import sha256_file

SELF = "manifest.json"  # the report's own manifest, beside index.html
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?")
# A quantity named so is a share or a probability: written as a percentage, wherever it is cited.
SHARE = re.compile(r"(^|_)(fraction|share|prob|probability)(_|$)")


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
    if head == "count" and "=" in rest:  # count/status=reproduced, count/lesson=x&status=reproduced
        wanted = [condition.split("=", 1) for condition in rest.split("&")]
        return sum(1 for row in rows if all(row.get(column) == value for column, value in wanted))
    if head.isdigit() and rest:
        row = int(head)
        if row >= len(rows) or rest not in rows[row]:
            raise CitationError(f"{where}: no row {row} / column {rest!r}")
        return _number_or_text(rows[row][rest])
    raise CitationError(f"{where}: {key!r} is not a CSV citation key")


def parse(path: str | Path) -> Any:
    """A JSON file's data, or a CSV file's rows (a list of {column: text})."""
    path = Path(path)
    if path.suffix == ".csv":
        return _read_csv(path)
    return json.loads(path.read_text(encoding="utf-8"))


def lookup(data: Any, key: str, where: str, csv_file: bool) -> Any:
    """The value under `key` in parsed data (see `parse`)."""
    return read_csv_key(data, key, where) if csv_file else read_key(data, key, where)


def read_value(path: str | Path, key: str) -> Any:
    """The value stored under `key` in a JSON or CSV file (see the module docstring)."""
    return lookup(parse(path), key, str(path), Path(path).suffix == ".csv")


def _number_or_text(text: str) -> Any:
    """A CSV cell's value: an int, a float (thousands separated or not: "524,288"), a list of
    numbers ("[7, -1]"), else the text."""
    plain = text.replace(",", "") if _THOUSANDS.fullmatch(text) else text
    for kind in (int, float):
        try:
            return kind(plain)
        except ValueError:
            pass
    if text.startswith("[") and text.endswith("]"):
        try:
            items = json.loads(text)
        except ValueError:
            return text
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return items
    return text


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
    page: str = "index.html"  # the page it is on


@dataclass
class Note:
    """One footnote: a number's source (file and key), or a table's or figure's file (key None).
    Footnotes are numbered per page."""

    id: int
    file: str
    key: str | None
    kind: str  # "number", "table" or "figure"
    page: str = "index.html"


@dataclass
class Ledger:
    """The files a report may cite (with their producing rule), every citation and footnote made.

    report_dir: where files written into the report folder (`in_report`) are read from;
    root: where project-relative paths start (the project, or an unpacked archive's folder).
    formats: one format per quantity: {scope: {name: format}}, a name being the last part of a key
    (a JSON key or a CSV column) and a scope a folder of cited files ("" for all), used wherever that
    quantity is cited without a format of its own, so it reads the same everywhere it appears.
    Files are hashed when first cited, so files that are never cited need not exist; each is read
    and parsed once. `page` is the page being written: citations and footnotes are on it.
    """

    report_dir: str | Path = "."
    root: str | Path = "."
    formats: dict[str, dict[str, str]] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    documents: dict[str, Any] = field(default_factory=dict)  # in-memory JSON (the manifest in the making)
    citations: list[Citation] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    page: str = "index.html"
    _parsed: dict[str, Any] = field(default_factory=dict, repr=False)
    _page_notes: dict[str, int] = field(default_factory=dict, repr=False)
    _read: list[str] = field(default_factory=list, repr=False)  # the files hashed, in the order first read

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
            self._read.append(path)
        return src

    def fmt_for(self, path: str, key: str) -> str | None:
        """The quantity's one format: its scope's, else a share's or a probability's "%" (SHARE)."""
        name = key.rsplit("/", 1)[-1]
        for scope in sorted(self.formats, key=len, reverse=True):
            if (not scope or path.startswith(scope + "/")) and one_rule(self.formats[scope].get(name)):
                return self.formats[scope][name]
        return "%" if SHARE.search(name) else None

    def data(self, path: str) -> Any:
        """The file's parsed data (JSON data, or a CSV file's rows), read once."""
        self.source(path)
        if path in self.documents:
            return self.documents[path]
        if path not in self._parsed:
            self._parsed[path] = parse(self.location(path))
        return self._parsed[path]

    def read(self, path: str, key: str) -> Any:
        data = self.data(path)
        return lookup(data, key, path, path not in self.documents and path.endswith(".csv"))

    def has(self, path: str, key: str) -> bool:
        """Whether the file holds `key` with a value (not null)."""
        try:
            return self.read(path, key) is not None
        except CitationError:
            return False

    def note(self, path: str, key: str | None, kind: str) -> Note:
        self.source(path)
        number = self._page_notes.get(self.page, 0) + 1
        self._page_notes[self.page] = number
        note = Note(number, path, key, kind, self.page)
        self.notes.append(note)
        return note

    def cite(self, path: str, key: str, fmt: str | None = None, note: Note | None = None) -> Citation:
        """A number in running text (its own footnote), or with `note`, a cell of that note's table."""
        value = self.read(path, key)
        fmt = one_rule(fmt if fmt is not None else self.fmt_for(path, key))
        if note is None:
            note = self.note(path, key, "number")
        elif note.file != path:
            raise CitationError(f"{path} → {key}: a cell of the table from {note.file} must cite that file")
        text = format_value(value, fmt)
        citation = Citation(len(self.citations) + 1, path, key, fmt, value, text, note.id, self.page)
        self.citations.append(citation)
        return citation

    def cited_files(self) -> list[Source]:
        """Every file the pages read (a number cited from it, a table, a figure, or only looked at to
        decide what to show), in the order first read: the manifest hashes them, the archive holds them."""
        return [self.sources[path] for path in self._read]


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

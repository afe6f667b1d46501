"""`bytesup verify PATH`: does a report still say what its files say?

PATH is a report folder (report/<date>/) or its archive (report/<date>.zip). Verify

1. re-hashes every file the manifest lists (size and sha256);
2. re-reads every cited value from its file (or from the manifest, for facts about the run),
   formats it as the report does, and compares it with the manifest's text, with the number
   in index.html (each <span class="cite">: text, data-file, data-key) and in report.md
   (the text right before its footnote marker; tables with one footnote are rebuilt whole);
3. checks every footnote in both renderings, and that each embedded figure is byte for byte
   the cited PNG.

Cited paths are relative to a root: the archive's root, or for a folder the project that
holds it (two levels up from report/<date>/), or --root. Files written into the report
folder itself (in_report) are relative to the folder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tempfile
import zipfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

from bytesup.citations import SELF, CitationError, format_value, note_line, read_key, read_value
from bytesup.report_doc import cite_tip, esc_md, md_table, md_table_caption

MD_BOUNDARY = " \t\n(|"  # what may come right before a cited number in report.md


class VerifyError(Exception):
    """PATH is not a report (no manifest, unreadable archive): one line for the user."""


@dataclass
class Result:
    report: str
    files: int = 0
    numbers: int = 0
    figures: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        what = f"{self.files} files, {self.numbers} cited values, {self.figures} figures"
        if self.ok:
            return f"verify: OK: {self.report}: {what} re-read; the report matches its files"
        return f"verify: FAILED: {self.report}: {len(self.problems)} difference(s) in {what}"


class _ReportHTML(HTMLParser):
    """Collects cited spans, footnotes and figures from index.html."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.spans: dict[int, dict] = {}
        self.notes: dict[int, str] = {}
        self.figures: list[dict] = []
        self.duplicates: list[str] = []
        self._span: dict | None = None
        self._note: list | None = None
        self._in_ref = 0
        self._figure: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "span" and "cite" in (a.get("class") or "").split():
            self._span = {"id": a.get("id", ""), "file": a.get("data-file"), "key": a.get("data-key"),
                          "title": a.get("title"), "text": []}
        elif tag == "a" and (self._span is not None or self._note is not None):
            self._in_ref += 1
        elif tag == "li" and (a.get("id") or "").startswith("n"):
            self._note = [a["id"], []]
        elif tag == "figure":
            self._figure = {"file": a.get("data-file"), "note": a.get("data-note"), "src": None}
        elif tag == "img" and self._figure is not None:
            self._figure["src"] = a.get("src")

    def handle_endtag(self, tag):
        if tag == "a" and self._in_ref:
            self._in_ref -= 1
        elif tag == "span" and self._span is not None:
            span, self._span = self._span, None
            ident = span["id"][1:]
            if span["id"].startswith("c") and ident.isdigit():
                if int(ident) in self.spans:
                    self.duplicates.append(span["id"])
                span["text"] = "".join(span["text"])
                self.spans[int(ident)] = span
            else:
                self.duplicates.append(span["id"] or "(a cited span without id)")
        elif tag == "li" and self._note is not None:
            ident, text = self._note
            self._note = None
            if ident[1:].isdigit():
                self.notes[int(ident[1:])] = "".join(text).strip()
        elif tag == "figure" and self._figure is not None:
            self.figures.append(self._figure)
            self._figure = None

    def handle_data(self, data):
        if self._in_ref:
            return
        if self._span is not None:
            self._span["text"].append(data)
        elif self._note is not None:
            self._note[1].append(data)


def _md_number(md: str, want: str, marker: str) -> str | None:
    """None when report.md shows `want` right before the footnote marker (not its definition);
    else what it shows there."""
    at = md.find(marker)
    while at != -1 and md.startswith(":", at + len(marker)):
        at = md.find(marker, at + 1)
    if at == -1:
        return f"nothing (no {marker})"
    start = at - len(want)
    if start >= 0 and md[start:at] == want and (start == 0 or md[start - 1] in MD_BOUNDARY):
        return None
    begin = at
    while begin > 0 and md[begin - 1] not in MD_BOUNDARY:
        begin -= 1
    return repr(md[begin:at])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _inside(root: Path, rel: str) -> Path | None:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        return None
    return root / p


def verify_folder(report_dir: Path, root: Path | None = None, label: str | None = None) -> Result:
    report_dir = Path(report_dir)
    root = Path(root) if root is not None else report_dir.parent.parent
    result = Result(label or str(report_dir))
    problems = result.problems
    try:
        manifest = json.loads((report_dir / "manifest.json").read_text(encoding="utf-8"))
        html = (report_dir / "index.html").read_text(encoding="utf-8")
        md = (report_dir / "report.md").read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise VerifyError(f"{report_dir}: not a report folder (no {Path(err.filename).name})") from None
    except (OSError, ValueError) as err:
        raise VerifyError(f"{report_dir}: cannot read the report ({err})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("citations"), list):
        raise VerifyError(f"{report_dir}/manifest.json: not a bytesup report manifest (no citations)")

    # 1. the files
    files: dict[str, dict] = {}
    for entry in manifest.get("files", []):
        path = entry["path"]
        files[path] = entry
        base = report_dir if entry.get("in_report") else root
        location = _inside(base, path)
        if location is None:
            problems.append(f"{path}: a cited path must stay inside the report or project")
            continue
        if not location.is_file():
            problems.append(f"{path}: missing (looked in {location})")
            continue
        if location.stat().st_size != entry["bytes"]:
            problems.append(f"{path}: {location.stat().st_size} bytes, the manifest says {entry['bytes']}")
        digest = _sha256(location)
        if digest != entry["sha256"]:
            problems.append(f"{path}: sha256 {digest[:12]}, the manifest says {entry['sha256'][:12]}"
                            " (the file changed)")
        result.files += 1
    self_source = {"path": SELF, "rule": "report", "sha256": ""}

    def source(path: str) -> dict | None:
        return self_source if path == SELF else files.get(path)

    def reread(c: dict):
        if c["file"] == SELF:
            return read_key(manifest, c["key"], SELF)
        entry = files[c["file"]]
        location = _inside(report_dir if entry.get("in_report") else root, c["file"])
        if location is None:
            raise ValueError("the path leaves the report or project")
        return read_value(location, c["key"])

    # 2. the numbers: file -> manifest text -> index.html, report.md
    page = _ReportHTML()
    page.feed(html)
    page.close()
    for dup in page.duplicates:
        problems.append(f"index.html: cited span {dup} appears more than once or has no id")
    notes = {n["id"]: n for n in manifest.get("notes", [])}
    table_notes = {t["note"] for t in manifest.get("tables", [])}
    expected_text: dict[int, str] = {}
    for c in manifest["citations"]:
        cid, where = c["id"], f"citation {c['id']} ({c['file']} \u2192 {c['key']})"
        src = source(c["file"])
        if src is None:
            problems.append(f"{where}: its file is not in the manifest's file list")
            continue
        try:
            text = format_value(reread(c), c.get("format"))
        except (CitationError, OSError, ValueError) as err:
            problems.append(f"{where}: cannot re-read: {err}")
            continue
        result.numbers += 1
        expected_text[cid] = text
        shown = []  # where the report says something else than the file
        if text != c["text"]:
            shown.append(f"manifest.json {c['text']!r}")
        span = page.spans.get(cid)
        if span is None:
            shown.append("index.html nothing (the number is missing)")
        else:
            if span["text"] != text:
                shown.append(f"index.html {span['text']!r}")
            if span["file"] != c["file"] or span["key"] != c["key"]:
                problems.append(f"index.html: {where} is labelled {span['file']} \u2192 {span['key']}")
            if span["title"] != cite_tip(c, src):
                problems.append(f"index.html: {where} has the hover text {span['title']!r},"
                                f" expected {cite_tip(c, src)!r}")
        if c.get("note") not in table_notes:
            md_shown = _md_number(md, esc_md(text), f"[^{c['note']}]")
            if md_shown is not None:
                shown.append(f"report.md {md_shown}")
        if shown:
            problems.append(f"{where}: the file gives {text!r}; the report shows " + ", ".join(shown))
    extra = set(page.spans) - {c["id"] for c in manifest["citations"]}
    for cid in sorted(extra):
        problems.append(f"index.html: cited span c{cid} is not in the manifest")

    # tables with one footnote: rebuilt whole in Markdown
    cites = {c["id"]: c for c in manifest["citations"]}
    for table in manifest.get("tables", []):
        rows = []
        for row in table["rows"]:
            cells = []
            for cell in row:
                if isinstance(cell, int):
                    cells.append(esc_md(expected_text.get(cell, cites.get(cell, {}).get("text", ""))))
                else:
                    cells.append(esc_md(cell))
            rows.append(cells)
        caption = md_table_caption(table["caption"], table["note"]) + "\n\n"
        want = md_table([esc_md(h) for h in table["header"]], rows).split("\n")
        at = md.find(caption)
        what = f"report.md: the table from {table['file']} (footnote {table['note']})"
        if at == -1:
            problems.append(f"{what} is missing")
            continue
        got = md[at + len(caption):].split("\n")[: len(want)]
        for i, (line, wanted) in enumerate(zip(got + [""] * len(want), want)):
            if line != wanted:
                row = "header" if i < 2 else f"row {i - 2}"
                problems.append(f"{what}, {row}: shows {line!r}, the file gives {wanted!r}")

    # 3. footnotes and figures
    for ident, n in notes.items():
        src = source(n["file"])
        if src is None:
            problems.append(f"footnote {ident}: {n['file']} is not in the manifest's file list")
            continue
        line = note_line(n, src)
        if page.notes.get(ident) != line:
            problems.append(f"index.html: footnote {ident} reads {page.notes.get(ident)!r}, expected {line!r}")
        if f"[^{ident}]: {esc_md(line)}" not in md:
            problems.append(f"report.md: footnote {ident} differs from {line!r}")
    for fig in manifest.get("figures", []):
        shown = [f for f in page.figures if f["file"] == fig["file"] and f["note"] == str(fig["note"])]
        entry = files.get(fig["file"])
        if not shown or entry is None:
            problems.append(f"index.html: the figure {fig['file']} is missing")
            continue
        src = shown[0]["src"] or ""
        prefix = "data:image/png;base64,"
        try:
            data = base64.b64decode(src[len(prefix):], validate=True) if src.startswith(prefix) else b""
        except ValueError:  # binascii.Error: not base64
            data = b""
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            problems.append(f"index.html: the figure {fig['file']} is not the cited file (sha256 differs)")
        if f"](<{fig['md_link']}>)" not in md:
            problems.append(f"report.md: the link to figure {fig['file']} is missing")
        result.figures += 1
    return result


def _safe_extract(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            p = PurePosixPath(info.filename)
            if p.is_absolute() or ".." in p.parts:
                raise VerifyError(f"{archive}: member {info.filename!r} would land outside the archive's folder")
        zf.extractall(dest)


def verify_path(path: str | Path, root: str | Path | None = None) -> Result:
    """Verify a report folder or archive (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        return verify_folder(path, Path(root) if root else None)
    if path.is_file() and zipfile.is_zipfile(path):
        with tempfile.TemporaryDirectory(prefix="bytesup-verify-") as tmp:
            try:
                _safe_extract(path, Path(tmp))
            except (zipfile.BadZipFile, OSError) as err:
                raise VerifyError(f"{path}: cannot unpack ({err})") from None
            found = sorted(Path(tmp).glob("report/*/manifest.json"))
            if len(found) != 1:
                raise VerifyError(f"{path}: expected one report/<date>/manifest.json inside, found {len(found)}")
            return verify_folder(found[0].parent, Path(tmp), label=f"{path} ({found[0].parent.relative_to(tmp)})")
    if not path.exists():
        raise VerifyError(f"{path}: no such file or folder")
    raise VerifyError(f"{path}: neither a report folder nor a .zip archive")

"""One lesson in the report: its section of the page, and its data page.

The section reads as a page of the course (STYLE §17): what the course says beside what this
model shows, for the lesson's headline numbers (the course's value and the model it is about,
this run's value, the verdict); then the narrative (bytesup/lessons/narrative/<lesson>.md, its
numbers cited inline); then the figures that carry the lesson and at most two short tables.
Everything else (every table in full, every number, every claim) is on the lesson's data page,
data/<lesson>.html, one click away, cited and re-rendered by `bytesup verify` like the page.
What the section shows is the lesson's SPEC: `compare`, `key_figures`, `key_tables`.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import PurePosixPath

from bytesup.lessons import registry
from bytesup.lessons.claims import SPECIMEN_NAME, SPECIMEN_QUANT, ClaimsError, load_claims
from bytesup.lessons.claims import STATUSES as CLAIM_STATUSES
from bytesup.lessons.spec import COMPARE, KEY_TABLE_ROWS, LessonSpec, parameter
from bytesup.report.citations import Ledger
from bytesup.report.doc import Doc, Link, Strong
from bytesup.report.formats import BYTE_UNITS, bytes_format
from bytesup.report.tables import csv_table

DATA = "data"  # inside the report folder: one data page per lesson
DATA_ROWS = 200  # a data page shows a long file's first rows (the file, in the archive, holds them all)

# The model or machine a claim is about, from what it requires (bytesup.lessons.claims).
SPECIMEN = f"{SPECIMEN_NAME.removesuffix('-instruct')} {SPECIMEN_QUANT}"
COURSE_SUBJECT = {
    frozenset(): "any model",  # arithmetic: the same on every model
    frozenset({"specimen"}): SPECIMEN,
    frozenset({"dgx-spark"}): "the DGX Spark",
    frozenset({"specimen", "dgx-spark"}): f"{SPECIMEN} on the DGX Spark",
}
# What each claims verdict means, shown beside every full table of claims.
VERDICTS = (
    (
        "reproduced",
        "this run's number rounds to the number the course printed (or lies within the claim's"
        " stated tolerance), whichever model ran",
    ),
    (
        "specimen differs",
        "the course's number is about its own model or machine, this run used another one,"
        " and the two differ beyond the tolerance: agreement was not expected",
    ),
    ("not reproduced", "the number should have matched and did not, or nothing was measured"),
)


def data_page(lesson: str) -> str:
    """Where a lesson's data page sits inside the report folder."""
    return f"{DATA}/{lesson}.html"


def title(lesson: str) -> str:
    spec = registry().get(lesson)
    return spec.heading if spec is not None else lesson


def css_status(status: str) -> str:
    return "status-" + status.replace(" ", "-")


# -- the narrative: one template per lesson, its numbers cited inline -------------------------

_SLOT = re.compile(r"\{([a-z0-9_]+:)?([^{}]+)\}")


def _slot(m: re.Match) -> tuple[str, str]:
    """(output name, key) of a {key} or {output:key} slot; a bare key is the lesson's metrics.json."""
    return (m.group(1) or "metrics_json:")[:-1], m.group(2)


_UNIT_AFTER = re.compile(r"^ ?(bytes|kB|MB|GB|TB)\b")


def narrative_template(lesson: str) -> str | None:
    """bytesup/lessons/narrative/<lesson>.md, or None for a lesson without one."""
    path = resources.files("bytesup.lessons") / "narrative" / f"{lesson}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def template_slots(template: str) -> list[tuple[str, str]]:
    """(output name, key) of every number a template cites, comments aside."""
    lines = [line for line in template.splitlines() if not line.strip().startswith("#")]
    return [_slot(m) for line in lines for m in _SLOT.finditer(line)]


def narrative(template: str, files: dict, ledger: Ledger) -> list[tuple[str, list]]:
    """Blocks ("para" or "quote", pieces) from a template (syntax: bytesup/lessons/narrative/README.md).

    One sentence a line, a blank line between paragraphs, '#' lines are comments. {key} cites the
    lesson's metrics.json, {output:key} another of its files. **words** are bold. A line starting
    with '>' is text a model wrote, a block of its own, its line breaks kept. A sentence whose
    number this run lacks is left out, whole. A unit typed after a size that prints its own unit
    ("{x} MB" where x prints "96.58 MB") is dropped.
    """
    blocks, current = [], []
    for line in template.splitlines() + [""]:
        line = line.strip()
        if line.startswith("#"):
            continue
        if not line or line.startswith(">"):
            if current:
                blocks.append(("para", current))
            current = []
            if line.startswith(">"):
                pieces = _sentence(line[1:].strip(), files, ledger, fmt="text")
                if pieces is not None:
                    blocks.append(("quote", pieces))
            continue
        pieces = _sentence(line, files, ledger)
        if pieces is not None:
            current += ([" "] if current else []) + pieces
    return blocks


def _sentence(line: str, files: dict, ledger: Ledger, fmt: str | None = None) -> list | None:
    """One sentence's pieces, or None when a number it cites is missing or null."""
    slots = [_slot(m) for m in _SLOT.finditer(line)]
    if any(name not in files or not ledger.has(files[name], key) for name, key in slots):
        return None  # every number first: a sentence left out leaves no footnote behind
    out = []
    for i, part in enumerate(line.split("**")):
        pieces = [p for p in _cited(part, files, ledger, fmt) if p != ""]
        out += ([Strong(tuple(pieces))] if pieces else []) if i % 2 else pieces
    return out


def _cited(text: str, files: dict, ledger: Ledger, fmt: str | None) -> list:
    pieces, at = [], 0
    for m in _SLOT.finditer(text):
        name, key = _slot(m)
        citation = ledger.cite(files[name], key, fmt)
        rest = text[m.end() :]
        pieces += [text[at : m.start()], citation]
        at = m.end()
        if (citation.fmt or "").startswith("bytes"):
            unit = _UNIT_AFTER.match(rest)
            at += unit.end() if unit else 0
    pieces.append(text[at:])
    return pieces


# -- the course beside this model --------------------------------------------------------------


def _claims(lesson: str) -> dict:
    try:
        return {c.claim_id: c for c in load_claims(lesson)}
    except ClaimsError:
        return {}


def compared(spec: LessonSpec | None, claims: dict, rows: list[dict]) -> list[str]:
    """The claim ids the section compares: the SPEC's `compare`, else all of them when they are
    few, else those about its headline numbers (in the headlines' order), then the others."""
    ids = [row.get("claim_id") for row in rows]
    if spec is not None and spec.compare is not None:
        return [c for c in spec.compare if c in ids]
    if len(ids) <= COMPARE:
        return ids
    order = {h.key: i for i, h in enumerate(spec.headlines)} if spec else {}
    about = sorted((c for c in ids if c in claims and claims[c].metric in order), key=lambda c: order[claims[c].metric])
    return (about + [c for c in ids if c not in about])[:COMPARE]


def claim_label(claim, spec: LessonSpec | None, description: str = "") -> str:
    """A few words for a claim: its own label, its metric's headline label, or its description's first words."""
    if claim is not None and claim.label:
        return claim.label
    for h in spec.headlines if spec and claim else ():
        if h.key == claim.metric:
            return h.label
    text = claim.description if claim is not None else description
    words = re.sub(r"\s*\([^()]*\)", "", re.split(r"(?<=[a-z)])\. | - ", text)[0]).strip().rstrip(".")
    return words if len(words) <= 70 else words[:69].rsplit(" ", 1)[0] + "\u2026"


def course_beside_model(doc: Doc, lesson: str, spec: LessonSpec | None, files: dict) -> None:
    """The section's first table: for each compared claim, the course's value and the model it is
    about, this run's value, and the verdict; then how many claims the data page holds."""
    L = doc.ledger
    path = files.get("claims_csv")
    rows = L.data(path) if path else []
    claims = _claims(lesson)  # the claims file says what each claim is about; a lesson without one, its CSV alone
    picked = compared(spec, claims, rows) if rows else []
    if not picked:
        return
    index = {row.get("claim_id"): i for i, row in enumerate(rows)}
    metrics = files.get("metrics_json")
    headlines = {h.key for h in spec.headlines} if spec else set()
    from_metrics = {  # this run's number as the narrative shows it: a headline in the claim's unit (or its share)
        c
        for c in picked
        if c in claims
        and metrics
        and claims[c].metric in headlines
        and (claims[c].scale == 1 or (claims[c].unit == "%" and claims[c].scale == 100))
        and L.has(metrics, claims[c].metric)
    }
    claims_note = L.note(path, None, "table")
    metrics_note = L.note(metrics, None, "table") if from_metrics else None
    table, css = [], []
    for cid in picked:
        claim, i = claims.get(cid), index[cid]
        unit = rows[i].get("unit", "")
        course_fmt = bytes_format(unit) if unit in BYTE_UNITS else None
        if cid in from_metrics:
            percent = unit == "%" and claim.scale == 100
            value = L.cite(metrics, claim.metric, "%" if percent else None, note=metrics_note)
            shown_unit = "" if unit in BYTE_UNITS or percent else unit
        else:
            value = L.cite(path, f"{i}/measured", course_fmt, note=claims_note) if rows[i].get("measured") else "\u2014"
            shown_unit = "" if unit in BYTE_UNITS else unit
        label = claim_label(claim, spec, rows[i].get("description", "")) + (f" ({shown_unit})" if shown_unit else "")
        subject = COURSE_SUBJECT.get(frozenset(claim.requires), ", ".join(claim.requires)) if claim else "\u2014"
        table.append(
            [
                label,
                L.cite(path, f"{i}/published", course_fmt, note=claims_note),
                subject,
                value,
                L.cite(path, f"{i}/status", note=claims_note),
            ]
        )
        css.append(["", "", "subject", "", css_status(rows[i].get("status", ""))])
    notes = [claims_note] + ([metrics_note] if metrics_note else [])
    doc.table(
        ["", "the course", "about", "this model", "verdict"],
        table,
        css,
        note=notes,
        caption="The course's numbers beside this model's",
    )
    counts = []
    for status in CLAIM_STATUSES:
        counts += [", " if counts else "", L.cite(path, f"count/status={status}"), f" {status}"]
    doc.para(
        "Of the ",
        L.cite(path, "rows"),
        " numbers the course prints for this lesson: ",
        *counts,
        "; all of them are on the ",
        Link("lesson's data page", doc.page_href(data_page(lesson), "claims")),
        ".",
    )


# -- the section and the data page -------------------------------------------------------------


def _figures(spec: LessonSpec | None, files: dict, key: bool) -> list[tuple[str, str]]:
    """(output name, caption) of the lesson's figures: the key ones (key=True) or the others."""
    if spec is None:  # a lesson the registry does not know: every figure it wrote, in the section
        return (
            [(n, n.removesuffix("_png").replace("_", " ")) for n in sorted(files) if n.endswith("_png")] if key else []
        )
    chosen = spec.figures if spec.key_figures is None else spec.key_figures
    return [
        (parameter(name), caption)
        for name, caption in spec.figures.items()
        if (name in chosen) == key and parameter(name) in files
    ]


def _tables(spec: LessonSpec | None, files: dict) -> list[str]:
    if spec is None:
        return [n for n in sorted(files) if n.endswith("_csv") and n != "claims_csv"]
    return [parameter(name) for name in spec.tables if parameter(name) in files]


def section(doc: Doc, lesson: str, files: dict, refused: str | None, notebook: str | None) -> None:
    """One lesson's section of the page (see the module docstring)."""
    spec = registry().get(lesson)
    doc.heading(2, title(lesson), anchor=lesson, toc=title(lesson))
    if spec is not None:
        doc.para(f"Source: {spec.source}.", css="source")
    if refused:
        doc.para(f"Not run for this model: {refused}.")
        return
    course_beside_model(doc, lesson, spec, files)
    template = narrative_template(lesson)
    for kind, pieces in narrative(template, files, doc.ledger) if template else ():
        (doc.quote if kind == "quote" else doc.para)(*pieces)
    doc.figure_grid([(files[name], caption) for name, caption in _figures(spec, files, key=True)])
    for name in spec.key_tables if spec else ():
        if parameter(name) in files:
            csv_table(doc, files[parameter(name)], KEY_TABLE_ROWS)
    links = [Link("its data page", doc.page_href(data_page(lesson)))]
    if notebook:
        links += [" and in ", Link("the executed notebook", doc.page_href(notebook))]
    doc.para(
        "Every number, table and claim of this lesson is on ",
        *links[:1],
        *([", every step of its arithmetic", *links[1:]] if notebook else []),
        ".",
    )


def file_ref(doc: Doc, path: str, text: str | None = None) -> list:
    """A file named by a link and a footnote (a file the report cites whole, not a number in it)."""
    note = doc.ledger.note(path, None, "file")
    return [Link(text or PurePosixPath(path).name, doc.href(path)), note]


def write_data_page(doc: Doc, lesson: str, files: dict, notebook: str | None) -> None:
    """The lesson's data page: every headline number, every table (long ones cut), the figures the
    section leaves out, and the course's numbers in full."""
    L = doc.ledger
    spec = registry().get(lesson)
    doc.heading(1, title(lesson), " \u00b7 data")
    back = [Link("its section of the report", doc.page_href("index.html", lesson))]
    if notebook:
        back += [
            "; every step of the arithmetic is in ",
            *file_ref(doc, notebook, "the executed notebook"),
            " (a page rendered from ",
            *file_ref(doc, files["notebook"]),
            ")",
        ]
    doc.para("Everything this lesson wrote in this run, for ", *back, ".")
    metrics = files.get("metrics_json")
    if metrics:
        numbers = _numbers(spec, L.data(metrics))
        if numbers:
            doc.heading(2, "Its numbers", anchor="numbers", toc="Its numbers")
            note = L.note(metrics, None, "table")
            doc.table(
                ["quantity", "value"],
                [[label, L.cite(metrics, key, note=note)] for label, key in numbers],
                note=note,
                caption="The lesson's main numbers",
            )
    tables = _tables(spec, files)
    if tables:
        doc.heading(2, "Its tables", anchor="tables", toc="Its tables")
        for name in tables:
            csv_table(doc, files[name], DATA_ROWS)
    others = _figures(spec, files, key=False)
    if others:
        doc.heading(2, "Its other figures", anchor="figures", toc="Its other figures")
        doc.figure_grid([(files[name], caption) for name, caption in others])
    path = files.get("claims_csv")
    if path and L.data(path):
        doc.heading(2, "The course's numbers against this run", anchor="claims", toc="The course's numbers")
        doc.terms(list(VERDICTS))
        csv_table(
            doc,
            path,
            None,
            cut=None,
            columns=["description", "published", "measured", "unit", "tolerance", "status"],
            css=lambda col, raw: css_status(raw) if col == "status" else "",
        )
    doc.notes()


def _numbers(spec: LessonSpec | None, data: dict) -> list[tuple[str, str]]:
    """(label with unit, key) of a lesson's headline numbers present in its metrics.json: its SPEC's,
    else every top-level scalar (a lesson the registry does not know is labelled by its keys)."""
    if spec is not None and spec.headlines:
        return [(headline_text(h), h.key) for h in spec.headlines if data.get(h.key) is not None]
    return [(k, k) for k, v in data.items() if isinstance(v, (int, float, bool)) and v is not None]


def headline_text(h) -> str:
    """A headline's label with its unit, unless its value prints its own (a size in MB, a share in %)."""
    return h.label if h.unit in BYTE_UNITS or not h.unit else f"{h.label} ({h.unit})"

"""One page of the report, two renderings: a self-contained HTML page and Markdown.

The report is several pages (index.html, and one data page per lesson under data/); each is a
Doc, numbering its own footnotes, with links between them relative to where it sits.

Everything that is not markup is escaped here, once: text from a GGUF file (tensor names,
metadata, token strings) is hostile until proven otherwise. The HTML carries a Content
Security Policy that forbids scripts and every network request, so even a missed escape
could not run code or phone home.

Each cited number is a <span class="cite"> carrying its file and key (data-file, data-key),
a hover title with file, key, sha256 and rule, and, in running text, a link to its footnote.
In Markdown a number in running text is followed by its footnote ([^3]); a table has one
footnote for all its cells. `bytesup verify` reads both renderings back (see verify.py), so
the markup written here is part of the report's format: change it there too.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import quote

from bytesup.gguf.file import printable
from bytesup.report.citations import SELF, Citation, Ledger, Note, Source, note_line
from bytesup.report.glossary import Glossary

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

STYLE = """
*{box-sizing:border-box} html{overflow-x:hidden}
body{font:16px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;overflow-wrap:break-word}
.layout{max-width:84rem;margin:0 auto;padding:0 1rem}
nav.toc{font-size:14px;border-bottom:1px solid #ccc;padding:.5rem 0}
nav.toc ol{margin:.3rem 0;padding-left:2rem} nav.toc a{color:#245;text-decoration:none}
nav.toc a:hover,nav.toc a:focus{text-decoration:underline}
@media (min-width:64rem){.layout{display:grid;grid-template-columns:15rem minmax(0,1fr);gap:2rem}
 nav.toc{position:sticky;top:0;max-height:100vh;overflow-y:auto;border:0;padding-top:2rem}}
@media (max-width:63.99rem){nav.toc ol{columns:2 11rem;column-gap:1.5rem} nav.toc li{break-inside:avoid}}
main{min-width:0;max-width:60rem} body.data main{max-width:none}
h1,h2,h3{line-height:1.25} h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2rem} p{margin:.75em 0}
p.source{color:#555;font-size:14px;margin-top:-.4rem}
.scroll{overflow-x:auto;max-width:100%;margin:.8rem 0}
table{border-collapse:collapse;font-size:14px;line-height:1.35;max-width:100%}
td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}
td.long{overflow-wrap:anywhere} td.subject{white-space:nowrap}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
caption{text-align:left;font-size:14px;color:#555;caption-side:top;padding-bottom:.2rem}
@media (max-width:40rem){table.stack,table.stack tbody,table.stack tr{display:block;width:100%}
 table.stack thead{display:none} table.stack caption{display:block}
 table.stack tr{border:1px solid #ccc;margin:.4rem 0}
 table.stack td{display:inline-block;border:0;padding:.1rem .5rem;white-space:normal}
 table.stack td:first-child{display:block;background:#f7f7f7} table.stack td.num{text-align:left}
 table.stack td[data-label]::before{content:attr(data-label) ": ";color:#555;font-size:13px}
 table.stack td:empty{display:none}}
.cite{color:inherit;text-decoration:underline dotted #888;position:relative}
.cite:hover::after,.cite:focus::after{content:attr(data-tip);position:absolute;left:0;top:1.6em;z-index:2;
 background:#333;color:#fff;font-size:12px;padding:.2rem .4rem;border-radius:3px;white-space:normal;width:max-content;
 max-width:min(30rem,80vw);overflow-wrap:anywhere}
.ref{font-size:70%;vertical-align:super;text-decoration:none;color:#36c}
a.term{color:inherit;text-decoration:underline dashed #36c}
figure{margin:1rem 0} figure img{max-width:100%;height:auto;border:1px solid #ddd} figcaption{font-size:14px;color:#555}
.figures{columns:2 24rem;column-gap:1.2rem;margin:1rem 0} .figures figure{break-inside:avoid;margin:0 0 1rem}
.figures.one{columns:auto;max-width:30rem}
blockquote.generated{margin:1rem 0;padding:.5rem 1rem;border-left:4px solid #89a;background:#f6f7fa}
blockquote.generated strong{font-weight:600;color:#345}
.status-reproduced{color:#060} .status-not-reproduced{color:#b00;font-weight:bold} .status-specimen-differs{color:#850}
.met-yes{color:#060} .met-no{color:#b00;font-weight:bold}
dl.verdicts{font-size:14px} dl.verdicts dt{font-weight:bold;float:left;margin-right:.4rem}
dl.glossary dt{font-weight:bold;margin-top:.6rem} dl.glossary dd{margin-left:1.5rem}
details.notes{margin:1rem 0} details.notes summary{cursor:pointer;font-weight:bold}
details.notes ol{font-size:11px;color:#444;overflow-wrap:anywhere;columns:2 24rem;column-gap:2rem;margin:.5rem 0}
details.notes li{break-inside:avoid} code{font-size:90%}
@media print{nav.toc{display:none} .layout{display:block} .scroll{overflow:visible} .cite::after{display:none}
 details.notes::details-content{content-visibility:visible;display:block} a{color:inherit}
 figure,tr{break-inside:avoid} h2,h3{break-after:avoid}}
"""

# Characters that start Markdown syntax (emphasis, code, links, images, headings, tables).
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>])")


def esc_html(text: object) -> str:
    """HTML-escape, with non-printable characters shown escaped (\\n, \\x00), never raw."""
    return html.escape(printable(str(text)), quote=True)


def esc_md(text: object) -> str:
    """Markdown-escape and HTML-escape: no link, autolink, image, emphasis or raw tag survives.

    <, > and & become entities (so no raw HTML), then every Markdown punctuation mark gets a
    backslash. Quotes are left alone: an entity like &#x27; would lose its '#' to the escape.
    A bare 'javascript:...' is no link in Markdown: links need [..](..) or <..>, both escaped.
    """
    text = printable(str(text))  # one line: a newline is shown as \\n
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def cite_tip(c: Citation | dict, src: Source | dict) -> str:
    """The hover text of a cited number: file, key, sha256, rule."""
    get = (lambda o, k: o[k]) if isinstance(c, dict) else getattr
    sget = (lambda o, k: o[k]) if isinstance(src, dict) else getattr
    file, key = get(c, "file"), get(c, "key")
    if file == SELF:
        return f"{file} \u2192 {key} \u00b7 this report's manifest \u00b7 rule {sget(src, 'rule')}"
    return f"{file} \u2192 {key} \u00b7 sha256 {sget(src, 'sha256')[:12]} \u00b7 rule {sget(src, 'rule')}"


def md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table from already escaped cells."""
    return "\n".join([md_row(header), "|" + "---|" * len(header)] + [md_row(r) for r in rows])


FIGURE_COLOURS = 128  # a plot has few colours; 128 keep its antialiased edges


def page_png(path) -> bytes:
    """The figure as the page embeds it: its plain margins cropped (no empty bands) and its colours
    reduced to a palette, about a third of the bytes; the figure's file, linked beside it, stays the
    original. Deterministic for a given Pillow, so verify can redo it and compare."""
    st = os.stat(path)
    return _page_png(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _page_png(path: str, mtime_ns: int, size: int) -> bytes:  # the report renders twice: convert once
    from PIL import Image, ImageChops

    with Image.open(path) as im:
        rgb = im.convert("RGB")
    box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, rgb.getpixel((0, 0)))).getbbox()
    if box:
        pad = 4
        box = (max(0, box[0] - pad), max(0, box[1] - pad), min(rgb.width, box[2] + pad), min(rgb.height, box[3] + pad))
        rgb = rgb.crop(box)
    out = io.BytesIO()
    rgb.quantize(colors=FIGURE_COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        out,
        "PNG",
        optimize=False,  # zlib's harder search: 9 % fewer bytes, twice the time, in every build and verify
    )
    return out.getvalue()


@dataclass(frozen=True)
class Link:
    """A link in running text (a lesson's notebook, a data page, a glossary entry): text, a relative
    href, and a class ("term" for a glossary entry)."""

    text: str
    href: str
    css: str = ""


@dataclass(frozen=True)
class Strong:
    """Words in bold (a prompt, before what the model wrote)."""

    pieces: tuple


def url(path: str) -> str:
    """A relative link target: each part percent-encoded, the slashes kept."""
    return "/".join(quote(part) for part in path.split("/"))


@dataclass
class Doc:
    """One page of the report as a list of blocks, rendered twice.

    `page` is where it sits in the report folder ("index.html", "data/<lesson>.html"): links to
    the cited files (two folders up from the report folder, in the archive), to the report's own
    files and to the other pages are made relative to it. `glossary` links a term to its
    definition the first time the page's running text uses it.
    """

    ledger: Ledger
    title: str
    page: str = "index.html"
    glossary: Glossary | None = None
    html_parts: list[str] = field(default_factory=list)
    md_parts: list[str] = field(default_factory=list)
    toc: list[tuple[str, str]] = field(default_factory=list)  # (anchor, title) of each section
    tables: list[dict] = field(default_factory=list)  # for the manifest: tables read from one file
    figures: list[dict] = field(default_factory=list)
    linked: set[str] = field(default_factory=set)  # glossary terms already linked on this page

    @property
    def _back(self) -> str:
        return "../" * self.page.count("/")

    def href(self, path: str) -> str:
        """The link to a cited file, relative to this page."""
        src = self.ledger.sources[path]
        return url(self._back + (path if src.in_report else UP + path))

    def page_href(self, page: str, anchor: str | None = None) -> str:
        """The link to a page of the report (or a place on it), relative to this page."""
        target = "" if page == self.page else url(self._back + page)
        return target + (f"#{anchor}" if anchor else "")

    # -- inline pieces: str (escaped here), Link, Strong, Note (a footnote marker) and Citation ----------------------
    def _cite_html(self, c: Citation, ref: bool) -> str:
        tip = cite_tip(c, self.ledger.source(c.file))
        marker = f'<a class="ref" href="#n{c.note}">{c.note}</a>' if ref else ""
        return (
            f'<a class="cite" href="{esc_html(self.href(c.file))}" data-tip="{esc_html(tip)}">'
            f"{_lines_html(c.text)}</a>{marker}"
        )

    def _cite_md(self, c: Citation, ref: bool) -> str:
        tip = cite_tip(c, self.ledger.source(c.file)).replace('"', "'")
        return f'[{_lines_md(c.text)}](<{self.href(c.file)}> "{esc_md(tip)}")' + (f"[^{c.note}]" if ref else "")

    def _inline_html(self, pieces, ref: bool = True, plain: bool = False) -> str:
        """ref: a cited number carries its footnote marker; plain: it is text only (a table's cell)."""
        out = []
        for p in pieces:
            if isinstance(p, Citation):
                out.append(_lines_html(p.text) if plain else self._cite_html(p, ref))
            elif isinstance(p, Link):
                cls = f' class="{esc_html(p.css)}"' if p.css else ""
                out.append(f'<a{cls} href="{esc_html(p.href)}">{esc_html(p.text)}</a>')
            elif isinstance(p, Strong):
                out.append(f"<strong>{self._inline_html(p.pieces, ref, plain)}</strong>")
            elif isinstance(p, Note):
                out.append(f'<a class="ref" href="#n{p.id}">{p.id}</a>')
            else:
                out.append(esc_html(p))
        return "".join(out)

    def _inline_md(self, pieces, ref: bool = True, plain: bool = False) -> str:
        out = []
        for p in pieces:
            if isinstance(p, Citation):
                out.append(_lines_md(p.text) if plain else self._cite_md(p, ref))
            elif isinstance(p, Link):
                out.append(f"[{esc_md(p.text)}](<{p.href}>)")
            elif isinstance(p, Strong):
                out.append(f"**{self._inline_md(p.pieces, ref, plain)}**")
            elif isinstance(p, Note):
                out.append(f"[^{p.id}]")
            else:
                out.append(esc_md(p))
        return "".join(out)

    @staticmethod
    def _pieces(pieces):
        return list(pieces) if isinstance(pieces, (list, tuple)) else [pieces]

    def _terms(self, pieces) -> list:
        """Running text with the glossary's terms linked where this page first uses them."""
        if self.glossary is None:
            return list(pieces)
        out = []
        for p in pieces:
            if isinstance(p, str):
                for part in self.glossary.split(p, self.linked):
                    out.append(
                        Link(part[0], self.page_href(GLOSSARY_PAGE, part[1]), "term")
                        if isinstance(part, tuple)
                        else part
                    )
            elif isinstance(p, Strong):
                out.append(Strong(tuple(self._terms(p.pieces))))
            else:
                out.append(p)
        return out

    # -- blocks -----------------------------------------------------------------------------
    def heading(self, level: int, *pieces, anchor: str | None = None, toc: str | None = None) -> None:
        """A heading; with `toc`, also an entry of the table of contents."""
        attr = f' id="{esc_html(anchor)}"' if anchor else ""
        self.html_parts.append(f"<h{level}{attr}>{self._inline_html(pieces)}</h{level}>")
        self.md_parts.append(f"{'#' * level} {self._inline_md(pieces)}")
        if toc is not None and anchor:
            self.toc.append((anchor, toc))

    def para(self, *pieces, css: str = "") -> None:
        """A paragraph of running text: glossary terms are linked at their first use on the page."""
        pieces = self._terms(pieces)
        cls = f' class="{esc_html(css)}"' if css else ""
        self.html_parts.append(f"<p{cls}>{self._inline_html(pieces)}</p>")
        self.md_parts.append(self._inline_md(pieces))

    def quote(self, *pieces) -> None:
        """Text a model wrote (its prompt in bold, then its words), line breaks kept."""
        self.html_parts.append(f'<blockquote class="generated">{self._inline_html(pieces)}</blockquote>')
        self.md_parts.append("\n".join("> " + line for line in self._inline_md(pieces).split("\n")))

    def terms(self, items: list[tuple[str, str]]) -> None:
        """Words and what they mean (the claims' verdicts)."""
        self.html_parts.append(
            '<dl class="verdicts">'
            + "".join(f"<dt>{esc_html(t)}:</dt><dd>{esc_html(d)}</dd>" for t, d in items)
            + "</dl>"
        )
        self.md_parts.append("\n".join(f"- **{esc_md(t)}**: {esc_md(d)}" for t, d in items))

    def definitions(self, items: list[tuple[str, str, list]]) -> None:
        """The glossary: (anchor, term, definition pieces), each term a place a link can point at."""
        self.html_parts.append(
            '<dl class="glossary">'
            + "".join(f'<dt id="{esc_html(a)}">{esc_html(t)}</dt><dd>{self._inline_html(d)}</dd>' for a, t, d in items)
            + "</dl>"
        )
        self.md_parts.append("\n".join(f"- **{esc_md(t)}**: {self._inline_md(d)}" for _, t, d in items))

    def table(
        self,
        header: list[str],
        rows: list[list],
        css: list[list[str]] | None = None,
        note: Note | list[Note] | None = None,
        caption: str | None = None,
    ) -> None:
        """Cells are str, Citation, or a list of pieces. An empty table is not drawn at all.

        With `note` (a table read from one file, or a list of notes: from those files): every cell
        is a str or a Citation of one of them, cells are plain text (no link, no footnote of their
        own: the page stays small), and the caption links each file and carries its footnote.
        A table of more than two columns is drawn as one card per row on a narrow screen (each
        value under its header), so it reads without scrolling sideways.
        """
        if not rows:
            return
        notes = [] if note is None else [note] if isinstance(note, Note) else list(note)
        stack = len(header) > 2
        h = ['<div class="scroll"><table class="stack">' if stack else '<div class="scroll"><table>']
        links_h = "".join(
            f' \u00b7 <a href="{esc_html(self.href(n.file))}">{esc_html(kind_of(n.file))}</a>'
            f'<a class="ref" href="#n{n.id}">{n.id}</a>'
            for n in notes
        )
        if caption is not None or notes:
            h.append(f"<caption>{esc_html(caption or '')}{links_h}</caption>")
        h.append("<thead><tr>" + "".join(f"<th>{esc_html(c)}</th>" for c in header) + "</tr></thead><tbody>")
        labels = [f' data-label="{esc_html(c)}"' if stack and c else "" for c in header]
        ids = {n.id for n in notes}
        md_rows, record = [], []
        for r, row in enumerate(rows):
            cells_h, cells_m, rec = [], [], []
            for c, cell in enumerate(row):
                pieces = self._pieces(cell)
                if notes:
                    if (
                        len(pieces) != 1
                        or not isinstance(pieces[0], (str, Citation))
                        or (isinstance(pieces[0], Citation) and pieces[0].note not in ids)
                    ):
                        raise ValueError(
                            "a cell of a table with its files' footnotes is one str or one Citation of those files"
                        )
                    rec.append(pieces[0].id if isinstance(pieces[0], Citation) else pieces[0])
                classes = []  # "v": the cell is a cited value; "num": a number, right-aligned
                if len(pieces) == 1 and isinstance(pieces[0], Citation):
                    classes.append("v")
                    if isinstance(pieces[0].value, (int, float)) and not isinstance(pieces[0].value, bool):
                        classes.append("num")
                    elif max(map(len, pieces[0].text.split()), default=0) > LONG_WORD:
                        classes.append("long")
                if css and css[r][c]:
                    classes.append(css[r][c])
                cls = f' class="{" ".join(classes)}"' if classes else ""
                cells_h.append(f"<td{cls}{labels[c]}>{self._inline_html(pieces, plain=bool(notes))}</td>")
                cells_m.append(self._inline_md(pieces, plain=bool(notes)).replace("\\\n", " "))
            h.append("<tr>" + "".join(cells_h) + "</tr>")
            md_rows.append(cells_m)
            record.append(rec)
        h.append("</tbody></table></div>")
        self.html_parts.append("\n".join(h))
        md = md_table([esc_md(c) for c in header], md_rows)
        links_m = "".join(f" \u00b7 [{kind_of(n.file)}](<{self.href(n.file)}>)[^{n.id}]" for n in notes)
        if caption is not None or notes:
            md = f"*{esc_md(caption or '')}*{links_m}\n\n" + md
        if notes:
            self.tables.append(
                {
                    "page": self.page,
                    "notes": [n.id for n in notes],
                    "files": [n.file for n in notes],
                    "caption": caption or "",
                    "header": list(header),
                    "rows": record,
                }
            )
        self.md_parts.append(md)

    def figure(self, png_path: str, caption: str) -> None:
        """Embed a PNG (inline in HTML, see page_png; linked in Markdown) and cite its file."""
        note = self.ledger.note(png_path, None, "figure")
        data = base64.b64encode(page_png(self.ledger.location(png_path))).decode("ascii")
        href = self.href(png_path)
        self.html_parts.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{esc_html(caption)}">'
            f'<figcaption>{esc_html(caption)} \u00b7 <a href="{esc_html(href)}">{kind_of(png_path)}</a>'
            f'<a class="ref" href="#n{note.id}">{note.id}</a></figcaption></figure>'
        )
        self.md_parts.append(f"![{esc_md(caption)}](<{href}>)\n\n*{esc_md(caption)}*[^{note.id}]")
        self.figures.append({"page": self.page, "note": note.id, "file": png_path, "md_link": href})

    def figure_grid(self, items: list[tuple[str, str]]) -> None:
        """Figures side by side where the page is wide enough (each at most half of it), else one under
        another: (png path, caption) each."""
        if not items:
            return
        self.html_parts.append(f'<div class="figures{" one" if len(items) == 1 else ""}">')
        for path, caption in items:
            self.figure(path, caption)
        self.html_parts.append("</div>")

    def raw_list(self, items: list) -> None:
        items = [self._terms(self._pieces(i)) for i in items]
        self.html_parts.append("<ul>" + "".join(f"<li>{self._inline_html(i)}</li>" for i in items) + "</ul>")
        self.md_parts.append("\n".join(f"- {self._inline_md(i)}" for i in items))

    # -- output -----------------------------------------------------------------------------
    def notes(self) -> None:
        """The footnotes of this page, folded: one per number in running text, table and figure."""
        items_h, items_m = [], []
        for n in self.ledger.notes:
            if n.page != self.page:
                continue
            line = note_line(n, self.ledger.source(n.file))
            items_h.append(f'<li id="n{n.id}" value="{n.id}">{esc_html(line)}</li>')
            items_m.append(f"[^{n.id}]: {esc_md(line)}")
        self.heading(2, "Sources of the numbers", anchor="notes", toc="Sources of the numbers")
        self.html_parts.append(
            f'<details class="notes"><summary>{len(items_h)} footnotes: the file and key of each'
            " number, table and figure</summary><ol>" + "".join(items_h) + "</ol></details>"
        )
        self.md_parts.append("\n".join(items_m))

    def render_html(self) -> str:
        toc = "".join(f'<li><a href="#{esc_html(a)}">{esc_html(t)}</a></li>' for a, t in self.toc)
        home, body = "", "" if self.page == "index.html" else ' class="data"'
        if self.page != "index.html":
            home = f'<p><a href="{esc_html(self.page_href("index.html"))}">\u2190 The report</a></p>'
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="referrer" content="no-referrer">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc_html(self.title)}</title>'
            f"<style>{STYLE}</style></head><body{body}>\n"
            f'<div class="layout"><nav class="toc" aria-label="Contents">{home}<strong>Contents</strong><ol>{toc}</ol>'
            "</nav>\n<main>\n" + "\n".join(self.html_parts) + "\n</main></div>\n</body></html>\n"
        )

    def render_md(self) -> str:
        toc = "\n".join(f"{i}. [{esc_md(t)}](<#{a}>)" for i, (a, t) in enumerate(self.toc, 1))
        parts = self.md_parts[:1] + (["**Contents**\n\n" + toc] if toc else []) + self.md_parts[1:]
        return "\n\n".join(parts) + "\n"


UP = "../../"  # from the report folder (report/<date>/) to the project root: where the cited files are
GLOSSARY_PAGE = "glossary.html"  # inside the report folder: where a term links to
LONG_WORD = 24  # a cell with a longer word (a hash, a path) may break inside it, so its table fits its box


def kind_of(path: str) -> str:
    """A file named by what it is, for a link beside a caption: CSV, JSON, PNG (a caption is no file name)."""
    return PurePosixPath(path).suffix.lstrip(".").upper() or "file"


def _lines_html(text: str) -> str:
    """A cited text in HTML: its line breaks (only text a model wrote keeps them) as breaks."""
    return "<br>".join(esc_html(line) for line in text.split("\n"))


def _lines_md(text: str) -> str:
    """The same in Markdown: a backslash at the end of a line is a hard line break."""
    return "\\\n".join(esc_md(line) for line in text.split("\n"))

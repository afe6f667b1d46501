"""One document, two renderings: a self-contained HTML page and Markdown.

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
from urllib.parse import quote

from bytesup.gguf.file import printable
from bytesup.report.citations import SELF, Citation, Ledger, Note, Source, note_line

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

STYLE = """
*{box-sizing:border-box} html{overflow-x:hidden}
body{font:15px/1.55 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;overflow-wrap:break-word}
.layout{max-width:84rem;margin:0 auto;padding:0 1rem}
nav.toc{font-size:14px;border-bottom:1px solid #ccc;padding:.5rem 0}
nav.toc ol{margin:.3rem 0;padding-left:2rem} nav.toc a{color:#245;text-decoration:none}
nav.toc a:hover,nav.toc a:focus{text-decoration:underline}
@media (min-width:64rem){.layout{display:grid;grid-template-columns:15rem minmax(0,1fr);gap:2rem}
 nav.toc{position:sticky;top:0;max-height:100vh;overflow-y:auto;border:0;padding-top:2rem}}
main{min-width:0;max-width:60rem}
h1,h2,h3{line-height:1.2} h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2.5rem}
.scroll{overflow-x:auto;max-width:100%;margin:.8rem 0}
table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
caption{text-align:left;font-size:13px;color:#555;caption-side:top}
.cite{color:inherit;text-decoration:underline dotted #888;position:relative}
.cite:hover::after,.cite:focus::after{content:attr(data-tip);position:absolute;left:0;top:1.6em;z-index:2;
 background:#333;color:#fff;font-size:12px;padding:.2rem .4rem;border-radius:3px;white-space:normal;width:max-content;
 max-width:min(30rem,80vw);overflow-wrap:anywhere}
.ref{font-size:70%;vertical-align:super;text-decoration:none;color:#36c}
figure{margin:1rem 0} figure img{max-width:100%;height:auto;border:1px solid #ddd} figcaption{font-size:13px;color:#555}
.status-reproduced{color:#060} .status-not-reproduced{color:#b00;font-weight:bold} .status-specimen-differs{color:#850}
.met-yes{color:#060} .met-no{color:#b00;font-weight:bold}
dl.verdicts{font-size:13px} dl.verdicts dt{font-weight:bold;float:left;margin-right:.4rem}
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
        out, "PNG", optimize=True
    )
    return out.getvalue()


@dataclass(frozen=True)
class Link:
    """A link in running text (a lesson's notebook, a course text): text, and a relative href."""

    text: str
    href: str


def url(path: str) -> str:
    """A relative link target: each part percent-encoded, the slashes kept."""
    return "/".join(quote(part) for part in path.split("/"))


@dataclass
class Doc:
    """The report as a list of blocks, rendered twice. `up` leads from the report folder to the
    project root (report/<date>/ -> "../../"), so a number links to its file in the archive."""

    ledger: Ledger
    title: str
    up: str = "../../"
    html_parts: list[str] = field(default_factory=list)
    md_parts: list[str] = field(default_factory=list)
    toc: list[tuple[str, str]] = field(default_factory=list)  # (anchor, title) of each section
    tables: list[dict] = field(default_factory=list)  # for the manifest: tables read from one file
    figures: list[dict] = field(default_factory=list)

    def href(self, path: str) -> str:
        """The link to a cited file, relative to index.html."""
        src = self.ledger.sources[path]
        return url(path if src.in_report else self.up + path)

    # -- inline pieces: str (escaped here), Link, Note (a footnote marker) and Citation ------------------------------
    def _cite_html(self, c: Citation, ref: bool) -> str:
        tip = cite_tip(c, self.ledger.source(c.file))
        marker = f'<a class="ref" href="#n{c.note}">{c.note}</a>' if ref else ""
        return (
            f'<a class="cite" href="{esc_html(self.href(c.file))}" data-tip="{esc_html(tip)}">'
            f"{esc_html(c.text)}</a>{marker}"
        )

    def _cite_md(self, c: Citation, ref: bool) -> str:
        tip = cite_tip(c, self.ledger.source(c.file)).replace('"', "'")
        return f'[{esc_md(c.text)}](<{self.href(c.file)}> "{esc_md(tip)}")' + (f"[^{c.note}]" if ref else "")

    def _inline_html(self, pieces, ref: bool = True, plain: bool = False) -> str:
        """ref: a cited number carries its footnote marker; plain: it is text only (a table's cell)."""
        out = []
        for p in pieces:
            if isinstance(p, Citation):
                out.append(esc_html(p.text) if plain else self._cite_html(p, ref))
            elif isinstance(p, Link):
                out.append(f'<a href="{esc_html(p.href)}">{esc_html(p.text)}</a>')
            elif isinstance(p, Note):
                out.append(f'<a class="ref" href="#n{p.id}">{p.id}</a>')
            else:
                out.append(esc_html(p))
        return "".join(out)

    def _inline_md(self, pieces, ref: bool = True, plain: bool = False) -> str:
        out = []
        for p in pieces:
            if isinstance(p, Citation):
                out.append(esc_md(p.text) if plain else self._cite_md(p, ref))
            elif isinstance(p, Link):
                out.append(f"[{esc_md(p.text)}](<{p.href}>)")
            elif isinstance(p, Note):
                out.append(f"[^{p.id}]")
            else:
                out.append(esc_md(p))
        return "".join(out)

    @staticmethod
    def _pieces(pieces):
        return list(pieces) if isinstance(pieces, (list, tuple)) else [pieces]

    # -- blocks -----------------------------------------------------------------------------
    def heading(self, level: int, *pieces, anchor: str | None = None, toc: str | None = None) -> None:
        """A heading; with `toc`, also an entry of the table of contents."""
        attr = f' id="{esc_html(anchor)}"' if anchor else ""
        self.html_parts.append(f"<h{level}{attr}>{self._inline_html(pieces)}</h{level}>")
        self.md_parts.append(f"{'#' * level} {self._inline_md(pieces)}")
        if toc is not None and anchor:
            self.toc.append((anchor, toc))

    def para(self, *pieces) -> None:
        self.html_parts.append(f"<p>{self._inline_html(pieces)}</p>")
        self.md_parts.append(self._inline_md(pieces))

    def terms(self, items: list[tuple[str, str]]) -> None:
        """Words and what they mean (the claims' verdicts)."""
        self.html_parts.append(
            '<dl class="verdicts">'
            + "".join(f"<dt>{esc_html(t)}:</dt><dd>{esc_html(d)}</dd>" for t, d in items)
            + "</dl>"
        )
        self.md_parts.append("\n".join(f"- **{esc_md(t)}**: {esc_md(d)}" for t, d in items))

    def table(
        self,
        header: list[str],
        rows: list[list],
        css: list[list[str]] | None = None,
        note: Note | None = None,
        caption: str | None = None,
    ) -> None:
        """Cells are str, Citation, or a list of pieces.

        With `note` (a table read from one file): every cell is a str or a Citation of that
        file, cells are plain text (no link, no footnote of their own: the page stays small),
        and the caption links the file and carries the table's footnote.
        """
        cells_ref = note is None
        h = ['<div class="scroll"><table>']
        if caption is not None or note is not None:
            if note is not None:
                link = f' <a href="{esc_html(self.href(note.file))}">{esc_html(note.file.rsplit("/", 1)[-1])}</a>'
                ref = f'<a class="ref" href="#n{note.id}">{note.id}</a>'
                h.append(f"<caption>{esc_html(caption or '')} \u00b7{link}{ref}</caption>")
            else:
                h.append(f"<caption>{esc_html(caption)}</caption>")
        h.append("<thead><tr>" + "".join(f"<th>{esc_html(c)}</th>" for c in header) + "</tr></thead><tbody>")
        md_rows, record = [], []
        for r, row in enumerate(rows):
            cells_h, cells_m, rec = [], [], []
            for c, cell in enumerate(row):
                pieces = self._pieces(cell)
                if note is not None:
                    if len(pieces) != 1 or not isinstance(pieces[0], (str, Citation)):
                        raise ValueError("a cell of a table with one footnote is one str or one Citation")
                    rec.append(pieces[0].id if isinstance(pieces[0], Citation) else pieces[0])
                classes = []  # "v": the cell is a cited value; "num": a number, right-aligned
                if len(pieces) == 1 and isinstance(pieces[0], Citation):
                    classes.append("v")
                    if isinstance(pieces[0].value, (int, float)):
                        classes.append("num")
                if css and css[r][c]:
                    classes.append(css[r][c])
                cls = f' class="{" ".join(classes)}"' if classes else ""
                cells_h.append(f"<td{cls}>{self._inline_html(pieces, plain=not cells_ref)}</td>")
                cells_m.append(self._inline_md(pieces, plain=not cells_ref))
            h.append("<tr>" + "".join(cells_h) + "</tr>")
            md_rows.append(cells_m)
            record.append(rec)
        h.append("</tbody></table></div>")
        self.html_parts.append("\n".join(h))
        md = md_table([esc_md(c) for c in header], md_rows)
        if note is not None:
            name = esc_md(note.file.rsplit("/", 1)[-1])
            md = f"*{esc_md(caption or '')}* \u00b7 [{name}](<{self.href(note.file)}>)[^{note.id}]\n\n" + md
            self.tables.append(
                {"note": note.id, "file": note.file, "caption": caption or "", "header": list(header), "rows": record}
            )
        elif caption is not None:
            md = f"*{esc_md(caption)}*\n\n" + md
        self.md_parts.append(md)

    def figure(self, png_path: str, caption: str) -> None:
        """Embed a PNG (inline in HTML, see page_png; linked in Markdown) and cite its file."""
        note = self.ledger.note(png_path, None, "figure")
        data = base64.b64encode(page_png(self.ledger.location(png_path))).decode("ascii")
        href = self.href(png_path)
        self.html_parts.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{esc_html(caption)}">'
            f'<figcaption>{esc_html(caption)} \u00b7 <a href="{esc_html(href)}">'
            f'{esc_html(png_path.rsplit("/", 1)[-1])}</a><a class="ref" href="#n{note.id}">{note.id}</a>'
            "</figcaption></figure>"
        )
        self.md_parts.append(f"![{esc_md(caption)}](<{href}>)\n\n*{esc_md(caption)}*[^{note.id}]")
        self.figures.append({"note": note.id, "file": png_path, "md_link": href})

    def raw_list(self, items: list) -> None:
        self.html_parts.append(
            "<ul>" + "".join(f"<li>{self._inline_html(self._pieces(i))}</li>" for i in items) + "</ul>"
        )
        self.md_parts.append("\n".join(f"- {self._inline_md(self._pieces(i))}" for i in items))

    def slot(self, name: str) -> None:
        """A named place for a section another module writes (kept empty until it does)."""
        self.html_parts.append(f"<!-- section: {esc_html(name)} -->")

    # -- output -----------------------------------------------------------------------------
    def notes(self) -> None:
        """The footnotes, folded: one per number in running text, table and figure."""
        items_h, items_m = [], []
        for n in self.ledger.notes:
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
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="referrer" content="no-referrer">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc_html(self.title)}</title>'
            f"<style>{STYLE}</style></head><body>\n"
            f'<div class="layout"><nav class="toc" aria-label="Contents"><strong>Contents</strong><ol>{toc}</ol></nav>\n'
            "<main>\n" + "\n".join(self.html_parts) + "\n</main></div>\n</body></html>\n"
        )

    def render_md(self) -> str:
        toc = "\n".join(f"{i}. [{esc_md(t)}](<#{a}>)" for i, (a, t) in enumerate(self.toc, 1))
        parts = self.md_parts[:1] + (["**Contents**\n\n" + toc] if toc else []) + self.md_parts[1:]
        return "\n\n".join(parts) + "\n"

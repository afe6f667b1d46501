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
import html
import re
from dataclasses import dataclass, field

from bytesup.citations import SELF, Citation, Ledger, Note, Source, note_line
from bytesup.gguf_file import printable

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

STYLE = """
body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;
color:#222}
h1,h2,h3{line-height:1.2} h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2.5rem}
table{border-collapse:collapse;margin:.8rem 0;font-size:13px;display:block;overflow-x:auto;max-width:100%}
td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
caption{text-align:left;font-size:13px;color:#555}
td{max-width:40rem;overflow-wrap:break-word} td.num{white-space:nowrap}
.cite{border-bottom:1px dotted #888} td .cite{border-bottom:none}
.ref{font-size:70%;vertical-align:super;text-decoration:none;color:#36c}
figure{margin:1rem 0} figure img{max-width:100%;border:1px solid #ddd} figcaption{font-size:13px;color:#555}
.status-reproduced{color:#060} .status-not-reproduced{color:#b00;font-weight:bold} .status-specimen-differs{color:#850}
.met-yes{color:#060} .met-no{color:#b00;font-weight:bold}
ol.notes{font-size:12px;color:#444;overflow-wrap:anywhere} code{font-size:90%}
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
    """A Markdown table from already escaped cells (verify rebuilds tables with this)."""
    return "\n".join([md_row(header), "|" + "---|" * len(header)] + [md_row(r) for r in rows])


def md_table_caption(caption: str, note: int) -> str:
    return f"*{esc_md(caption)}*[^{note}]"


@dataclass
class Doc:
    ledger: Ledger
    title: str
    html_parts: list[str] = field(default_factory=list)
    md_parts: list[str] = field(default_factory=list)
    tables: list[dict] = field(default_factory=list)  # for the manifest: tables with one footnote
    figures: list[dict] = field(default_factory=list)

    # -- inline pieces: a list of str (escaped here) and Citation objects -----------------
    def _cite_html(self, c: Citation, ref: bool) -> str:
        tip = cite_tip(c, self.ledger.source(c.file))
        marker = f'<a class="ref" href="#n{c.note}">[{c.note}]</a>' if ref else ""
        return (
            f'<span class="cite" id="c{c.id}" title="{esc_html(tip)}" data-file="{esc_html(c.file)}"'
            f' data-key="{esc_html(c.key)}">{esc_html(c.text)}{marker}</span>'
        )

    def _inline_html(self, pieces, ref: bool = True) -> str:
        return "".join(self._cite_html(p, ref) if isinstance(p, Citation) else esc_html(p) for p in pieces)

    def _inline_md(self, pieces, ref: bool = True) -> str:
        out = []
        for p in pieces:
            if isinstance(p, Citation):
                out.append(esc_md(p.text) + (f"[^{p.note}]" if ref else ""))
            else:
                out.append(esc_md(p))
        return "".join(out)

    @staticmethod
    def _pieces(pieces):
        return list(pieces) if isinstance(pieces, (list, tuple)) else [pieces]

    # -- blocks -----------------------------------------------------------------------------
    def heading(self, level: int, *pieces, anchor: str | None = None) -> None:
        attr = f' id="{esc_html(anchor)}"' if anchor else ""
        self.html_parts.append(f"<h{level}{attr}>{self._inline_html(pieces)}</h{level}>")
        self.md_parts.append(f"{'#' * level} {self._inline_md(pieces)}")

    def para(self, *pieces) -> None:
        self.html_parts.append(f"<p>{self._inline_html(pieces)}</p>")
        self.md_parts.append(self._inline_md(pieces))

    def table(self, header: list[str], rows: list[list], css: list[list[str]] | None = None,
              note: Note | None = None, caption: str | None = None) -> None:
        """Cells are str, Citation, or a list of pieces.

        With `note` (a table read from one file): every cell is a str or a Citation of that
        file, cells carry no footnote marker of their own, and the caption carries the
        table's footnote. The table is recorded for the manifest so verify can rebuild it.
        """
        cells_ref = note is None
        h = ["<table" + (f' data-file="{esc_html(note.file)}" data-note="{note.id}"' if note else "") + ">"]
        if caption is not None:
            ref = f' <a class="ref" href="#n{note.id}">[{note.id}]</a>' if note else ""
            h.append(f"<caption>{esc_html(caption)}{ref}</caption>")
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
                classes = []
                if len(pieces) == 1 and isinstance(pieces[0], Citation) and isinstance(pieces[0].value, (int, float)):
                    classes.append("num")
                if css and css[r][c]:
                    classes.append(css[r][c])
                cls = f' class="{" ".join(classes)}"' if classes else ""
                cells_h.append(f"<td{cls}>{self._inline_html(pieces, cells_ref)}</td>")
                cells_m.append(self._inline_md(pieces, cells_ref))
            h.append("<tr>" + "".join(cells_h) + "</tr>")
            md_rows.append(cells_m)
            record.append(rec)
        h.append("</tbody></table>")
        self.html_parts.append("\n".join(h))
        md = md_table([esc_md(c) for c in header], md_rows)
        if note is not None:
            md = md_table_caption(caption or "", note.id) + "\n\n" + md
            self.tables.append({"note": note.id, "file": note.file, "caption": caption or "",
                                "header": list(header), "rows": record})
        elif caption is not None:
            md = f"*{esc_md(caption)}*\n\n" + md
        self.md_parts.append(md)

    def figure(self, png_path: str, caption: str, md_link: str) -> None:
        """Embed a PNG (inline in HTML; linked in Markdown) and cite its file."""
        note = self.ledger.note(png_path, None, "figure")
        with open(self.ledger.location(png_path), "rb") as fh:
            data = base64.b64encode(fh.read()).decode("ascii")
        self.html_parts.append(
            f'<figure data-file="{esc_html(png_path)}" data-note="{note.id}">'
            f'<img src="data:image/png;base64,{data}" alt="{esc_html(caption)}">'
            f'<figcaption>{esc_html(caption)} <a class="ref" href="#n{note.id}">[{note.id}]</a></figcaption></figure>'
        )
        self.md_parts.append(f"![{esc_md(caption)}](<{md_link}>)\n\n*{esc_md(caption)}*[^{note.id}]")
        self.figures.append({"note": note.id, "file": png_path, "md_link": md_link})

    def raw_list(self, items: list[str]) -> None:
        self.html_parts.append("<ul>" + "".join(f"<li>{esc_html(i)}</li>" for i in items) + "</ul>")
        self.md_parts.append("\n".join(f"- {esc_md(i)}" for i in items))

    # -- output -----------------------------------------------------------------------------
    def notes(self) -> None:
        """The footnotes: one per number in running text, table and figure."""
        items_h, items_m = [], []
        for n in self.ledger.notes:
            line = note_line(n, self.ledger.source(n.file))
            items_h.append(f'<li id="n{n.id}" value="{n.id}">{esc_html(line)}</li>')
            items_m.append(f"[^{n.id}]: {esc_md(line)}")
        self.heading(2, "Sources of the numbers", anchor="notes")
        self.html_parts.append('<ol class="notes">' + "".join(items_h) + "</ol>")
        self.md_parts.append("\n".join(items_m))

    def render_html(self) -> str:
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="referrer" content="no-referrer">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc_html(self.title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(self.html_parts) + "\n</body></html>\n"
        )

    def render_md(self) -> str:
        return "\n\n".join(self.md_parts) + "\n"

"""One document, two renderings: a self-contained HTML page and Markdown.

Everything that is not markup is escaped here, once: text from a GGUF file (tensor names,
metadata, token strings) is hostile until proven otherwise. The HTML carries a Content
Security Policy that forbids scripts and every network request, so even a missed escape
could not run code or phone home.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

from bytesup.citations import Citation, Ledger

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

STYLE = """
body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#222}
h1,h2,h3{line-height:1.2} h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2.5rem}
table{border-collapse:collapse;margin:.8rem 0;font-size:13px} td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
.cite{border-bottom:1px dotted #888} .ref{font-size:70%;vertical-align:super;text-decoration:none;color:#36c}
figure{margin:1rem 0} figure img{max-width:100%;border:1px solid #ddd} figcaption{font-size:13px;color:#555}
.status-reproduced{color:#060} .status-not-reproduced{color:#b00;font-weight:bold} .status-specimen-differs{color:#850}
.met-yes{color:#060} .met-no{color:#b00;font-weight:bold}
ol.notes{font-size:12px;color:#444;word-break:break-all} code{font-size:90%}
"""

# Characters that start Markdown syntax (emphasis, code, links, images, headings, tables).
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>])")


def esc_html(text: object) -> str:
    return html.escape(str(text), quote=True)


def esc_md(text: object) -> str:
    """Markdown-escape and HTML-escape: no link, image, emphasis or raw tag survives."""
    text = str(text).replace("\r", " ").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=True))


@dataclass
class Figure:
    png: bytes
    caption: str
    source: str


@dataclass
class Doc:
    ledger: Ledger
    title: str
    html_parts: list[str] = field(default_factory=list)
    md_parts: list[str] = field(default_factory=list)

    # -- inline pieces: a list of str (escaped here) and Citation objects -----------------
    def _inline_html(self, pieces) -> str:
        out = []
        for piece in pieces:
            if isinstance(piece, Citation):
                src = self.ledger.source(piece.file)
                tip = f"{piece.file} \u2192 {piece.key} \u00b7 sha256 {src.sha256[:12]} \u00b7 rule {src.rule}"
                out.append(
                    f'<span class="cite" id="c{piece.id}" title="{esc_html(tip)}" data-file="{esc_html(piece.file)}"'
                    f' data-key="{esc_html(piece.key)}">{esc_html(piece.text)}'
                    f'<a class="ref" href="#n{piece.id}">[{piece.id}]</a></span>'
                )
            else:
                out.append(esc_html(piece))
        return "".join(out)

    def _inline_md(self, pieces) -> str:
        return "".join(
            f"{esc_md(p.text)}[^{p.id}]" if isinstance(p, Citation) else esc_md(p) for p in pieces
        )

    def _pieces(self, pieces):
        return list(pieces) if isinstance(pieces, (list, tuple)) else [pieces]

    # -- blocks -----------------------------------------------------------------------------
    def heading(self, level: int, text: str, anchor: str | None = None) -> None:
        attr = f' id="{esc_html(anchor)}"' if anchor else ""
        self.html_parts.append(f"<h{level}{attr}>{esc_html(text)}</h{level}>")
        self.md_parts.append(f"{'#' * level} {esc_md(text)}")

    def para(self, *pieces) -> None:
        self.html_parts.append(f"<p>{self._inline_html(pieces)}</p>")
        self.md_parts.append(self._inline_md(pieces))

    def table(self, header: list[str], rows: list[list], css: list[list[str]] | None = None) -> None:
        """Cells are str, numbers-as-Citation, or a list of pieces."""
        h = ["<table><thead><tr>" + "".join(f"<th>{esc_html(c)}</th>" for c in header) + "</tr></thead><tbody>"]
        m = ["| " + " | ".join(esc_md(c) for c in header) + " |", "|" + "---|" * len(header)]
        for r, row in enumerate(rows):
            cells_h, cells_m = [], []
            for c, cell in enumerate(row):
                pieces = self._pieces(cell)
                classes = []
                if len(pieces) == 1 and isinstance(pieces[0], Citation) and not isinstance(pieces[0].value, str):
                    classes.append("num")
                if css and css[r][c]:
                    classes.append(css[r][c])
                cls = f' class="{" ".join(classes)}"' if classes else ""
                cells_h.append(f"<td{cls}>{self._inline_html(pieces)}</td>")
                cells_m.append(self._inline_md(pieces))
            h.append("<tr>" + "".join(cells_h) + "</tr>")
            m.append("| " + " | ".join(cells_m) + " |")
        h.append("</tbody></table>")
        self.html_parts.append("\n".join(h))
        self.md_parts.append("\n".join(m))

    def figure(self, png_path: str, caption: str, md_link: str) -> None:
        """Embed a PNG (inline in HTML; linked in Markdown) and cite its file."""
        src = self.ledger.source(png_path)
        with open(png_path, "rb") as fh:
            data = base64.b64encode(fh.read()).decode("ascii")
        cite = f"{png_path} \u00b7 sha256 {src.sha256[:12]} \u00b7 rule {src.rule}"
        self.html_parts.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{esc_html(caption)}">'
            f"<figcaption>{esc_html(caption)} <span class=\"src\">({esc_html(cite)})</span></figcaption></figure>"
        )
        self.md_parts.append(f"![{esc_md(caption)}](<{md_link}>)\n\n*{esc_md(caption)}* ({esc_md(cite)})")

    def raw_list(self, items: list[str]) -> None:
        self.html_parts.append("<ul>" + "".join(f"<li>{esc_html(i)}</li>" for i in items) + "</ul>")
        self.md_parts.append("\n".join(f"- {esc_md(i)}" for i in items))

    # -- output -----------------------------------------------------------------------------
    def notes(self) -> None:
        """The footnotes: one per citation, naming file, key, sha256 and rule."""
        items_h, items_m = [], []
        for c in self.ledger.citations:
            src = self.ledger.source(c.file)
            line = f"{c.file} \u2192 {c.key} (sha256 {src.sha256[:12]}, rule {src.rule})"
            items_h.append(f'<li id="n{c.id}" value="{c.id}">{esc_html(line)} <a href="#c{c.id}">\u21a9</a></li>')
            items_m.append(f"[^{c.id}]: {esc_md(line)}")
        self.heading(2, "Sources of the numbers", "notes")
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

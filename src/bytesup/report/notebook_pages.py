"""An executed notebook as one HTML page a browser opens from the report's archive.

nbconvert's HTMLExporter renders the cells (Markdown as HTML, code with its syntax colours, then
the outputs: text, PNG figures as embedded data, errors without colour codes) through its small
`classic` cell template; this module wraps them in a page of its own instead of nbconvert's
index templates, which load require.js and MathJax and embed ~270 KB of CSS. Like index.html the
page carries a Content Security Policy that forbids scripts and every request, and everything
HTML it shows passes one allowlist (`_clean`): notebook outputs print GGUF metadata and token
strings, hostile until proven otherwise, so a `<script>` or an `onerror=` shows as text or is
dropped, never runs. JavaScript and widget outputs are not rendered at all. The page depends
only on the notebook (and the installed nbconvert/Pygments versions: no dates, no random ids),
so `bytesup verify` can redo it and compare bytes.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import bleach
import nbformat
from jinja2 import DictLoader, TemplateError
from nbconvert import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from pygments.formatters import HtmlFormatter

from bytesup.report.doc import CSP, esc_html
from bytesup.report.formats import format_value

# Tags the rendered Markdown and text/html (or text/markdown) outputs may keep: this allowlist replaces
# nbconvert's own `clean_html` filter, which sanitize_html=True applies to them but which escapes headings
# and paragraphs too. Anything else is escaped, so it shows as text. No img: figures come from PNG outputs.
_TAGS = [
    "a",
    "abbr",
    "b",
    "blockquote",
    "br",
    "code",
    "del",
    "div",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "i",
    "li",
    "ol",
    "p",
    "pre",
    "span",
    "strong",
    "sub",
    "sup",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
]
_ATTRIBUTES = {"*": ["class", "id", "title"], "a": ["href", "title", "class"], "td": ["align"], "th": ["align"]}
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_STYLE_BLOCK = re.compile(r"<style\b[^>]*>.*?</style\s*>", re.IGNORECASE | re.DOTALL)
INJECTED = "# The parameters the workflow ran this notebook with (papermill passed them)"
# Control characters but tab, newline and carriage return (C0, DEL, C1): HTML has no place for them and a
# chat template or a token string can print any (a NUL). Shown as \x00, as printable() shows them in a line.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")

# The cell template: nbconvert's classic cells, with the blocks that could emit a script, a frame or
# a random id replaced by nothing (JavaScript, widgets) or by a sanitized version (HTML outputs).
# Code inputs skip the allowlist: Pygments escapes the source itself, and bleach on every
# highlighted cell was most of the rendering time.
_TEMPLATE = r"""{%- extends 'classic/base.html.j2' -%}
{%- block input -%}
<div class="inner_cell"><div class="input_area">
{{ cell.source | highlight_code(metadata=cell.metadata) }}
</div></div>
{%- endblock input -%}
{%- block data_png scoped -%}
<div class="output_png output_subarea {{ extra_class }}">
<img alt="{{ ((output | get_metadata('alt', 'image/png')) or 'figure') | escape_html }}" src="data:image/png;base64,{{ output.data['image/png'] | replace('\n', '') | escape_html }}">
</div>
{%- endblock data_png -%}
{%- block data_javascript scoped -%}{%- endblock -%}
{%- block data_widget_view scoped -%}{%- endblock -%}
{%- block data_html scoped -%}
<div class="output_html rendered_html output_subarea {{ extra_class }}">
{{ output.data['text/html'] | clean_html }}
</div>
{%- endblock data_html -%}
"""

STYLE = """
*{box-sizing:border-box} body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;max-width:60rem;
margin:2rem auto;padding:0 1rem;color:#222;overflow-wrap:break-word}
pre{padding:.4rem .6rem;margin:0;font-size:13px;white-space:pre-wrap;overflow-wrap:anywhere}
.cell{margin:.6rem 0} .prompt{color:#888;font-size:12px;font-family:monospace}
.input_area{background:#f5f5f5;border-left:3px solid #89a} .output_area pre{border-left:3px solid #ddd}
.output_error pre,.output_stderr pre{border-left-color:#b00} .output_error pre{color:#900}
.output_html{overflow-x:auto} .rendered_html table{border-collapse:collapse;font-size:13px}
.rendered_html td,.rendered_html th{border:1px solid #ccc;padding:.2rem .5rem} .rendered_html td.num{text-align:right}
a.anchor-link{visibility:hidden;margin-left:.3rem;text-decoration:none} :hover>a.anchor-link{visibility:visible}
.ansi-red-fg,.ansi-red-intense-fg{color:#b00} .ansi-green-fg,.ansi-green-intense-fg{color:#070}
.ansi-blue-fg,.ansi-blue-intense-fg{color:#00a} .ansi-cyan-fg{color:#077} .ansi-yellow-fg{color:#860} .ansi-bold{font-weight:bold}
img{max-width:100%;height:auto} .n{color:#888;font-size:12px}
"""


def _clean(html: str) -> str:
    """Keep the allowlisted tags and attributes; escape every other tag; drop comments and <style> blocks;
    write a table's numbers as the report writes them."""
    html = html.decode() if isinstance(html, bytes) else str(html)
    # a pandas table brings its own <style scoped>: dropped whole (escaped, its CSS would show as text)
    html = _STYLE_BLOCK.sub("", html)
    html = bleach.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        protocols=["http", "https", "mailto"],
        strip=False,
        strip_comments=True,
    )
    return _CELL_NUMBER.sub(_number_cell, html)


# A table cell that holds only a number (or pandas' NaN for a missing one), as pandas prints it.
_CELL_NUMBER = re.compile(r"<td>\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|NaN|nan|None)\s*</td>")


def _number_cell(m: re.Match) -> str:
    """'576.0' -> 576, '11274289152' -> 11,274,289,152, NaN -> an empty cell: the report's one rule."""
    text = m.group(1)
    if text in ("NaN", "nan", "None"):
        return "<td></td>"
    value = int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)
    return f'<td class="num">{esc_html(format_value(value))}</td>'


class _CellsExporter(HTMLExporter):
    """nbconvert's HTMLExporter without its last step, a BeautifulSoup pass over the whole page that
    gives an <img> without alt a placeholder one and JupyterLab's cells a tabindex. The cell template
    here writes every alt itself and has no JupyterLab cells, so the pass changed nothing, and it was
    most of the time verify spent (it parsed and re-serialized every page). The rest is
    HTMLExporter.from_notebook_node (nbconvert 7.17) as it is."""

    def from_notebook_node(self, nb, resources=None, **kw):
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        self.register_filter(
            "highlight_code", self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
        )
        resources = self._init_resources(resources)
        self.register_filter(
            "filter_data_type",
            WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=resources),
        )
        return TemplateExporter.from_notebook_node(self, nb, resources, **kw)


@lru_cache(maxsize=1)
def _exporter() -> HTMLExporter:
    # built once per process: loading nbconvert's templates is most of a page's rendering time
    return _CellsExporter(
        template_name="basic",
        extra_loaders=[DictLoader({"bytesup_cells.html.j2": _TEMPLATE})],
        template_file="bytesup_cells.html.j2",
        sanitize_html=True,
        filters={"clean_html": _clean},
    )


def _drop_unsafe_images(nb) -> None:
    # a PNG output goes into an <img src="data:..."> attribute; only base64 may get there
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            for key in ("image/png", "image/jpeg"):
                if key in data and not _BASE64.fullmatch(str(data[key])):
                    del data[key]


def _tags(cell) -> list:
    return list(cell.get("metadata", {}).get("tags") or [])


def _parameters_once(nb) -> None:
    """The parameters as the workflow ran the notebook, once: papermill keeps the notebook's own
    defaults (the cell tagged parameters) and adds the values it passed after them (injected-
    parameters); the page shows the values passed, under a line saying what they are."""
    injected = [cell for cell in nb.cells if "injected-parameters" in _tags(cell)]
    if not injected:
        return
    nb.cells = [cell for cell in nb.cells if "parameters" not in _tags(cell)]
    for cell in injected:  # papermill heads the cell "# Parameters": say which ones
        source = cell.source.lstrip()
        cell.source = f"{INJECTED}\n{source.removeprefix('# Parameters').lstrip(chr(10))}"


def _opens_with_title(nb) -> bool:
    """Whether the notebook's first cell is a Markdown title (then the page prints no title of its own)."""
    return bool(nb.cells) and nb.cells[0].cell_type == "markdown" and nb.cells[0].source.lstrip().startswith("# ")


def render(path: str | Path, title: str, back: str | None = None) -> str:
    """The page of one executed notebook (.ipynb, nbformat 4); `back` links the lesson's section of the report."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        # nbformat gives a cell without an id a random one; give it its position instead
        if isinstance(raw, dict) and isinstance(raw.get("cells"), list) and raw.get("nbformat") == 4:
            for i, cell in enumerate(raw["cells"]):
                if isinstance(cell, dict) and "id" not in cell:
                    cell["id"] = f"cell-{i}"
            raw["nbformat_minor"] = max(raw.get("nbformat_minor", 0), 5)
        nb = nbformat.reads(json.dumps(raw), as_version=4)
        _drop_unsafe_images(nb)
        _parameters_once(nb)
        cells, _ = _exporter().from_notebook_node(nb)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, nbformat.ValidationError, TemplateError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{path}: not a readable notebook ({first}); rerun its lesson") from None
    code_css = HtmlFormatter(style="default").get_style_defs(".highlight")
    heading = "" if _opens_with_title(nb) else f"<h1>{esc_html(title)}</h1>\n"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc_html(title)}</title>'
        f"<style>{STYLE}{code_css}\n</style></head><body>\n{heading}"
        + (f'<p class="n"><a href="{esc_html(back)}">\u2190 The report</a></p>\n' if back else "")
        + f'<p class="n">The executed notebook {esc_html(Path(path).name)}, as the workflow ran it.</p>\n'
        + _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", cells.strip())
        + "\n</body></html>\n"
    )

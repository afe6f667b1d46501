"""An executed notebook as one HTML page a browser opens from the report's archive.

The page shows each cell in order: Markdown cells as their text, code cells as their source,
then their outputs (text, tables as text, PNG figures inline, errors without colour codes).
Like index.html it carries a Content Security Policy that forbids scripts and every request,
and escapes everything it shows: notebook outputs print GGUF metadata and token strings,
hostile until proven otherwise. It is written here rather than by nbconvert, whose pages load
scripts (require.js, MathJax) and whose output changes with its templates' versions; this
rendering depends only on the notebook, so `bytesup verify` can redo it and compare bytes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bytesup.report_doc import CSP, esc_html

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

STYLE = """
*{box-sizing:border-box} body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif;max-width:60rem;
margin:2rem auto;padding:0 1rem;color:#222;overflow-wrap:break-word}
pre{overflow-x:auto;padding:.4rem .6rem;margin:.3rem 0;font-size:13px;white-space:pre}
pre.in{background:#f5f5f5;border-left:3px solid #89a} pre.out{border-left:3px solid #ddd}
pre.err{border-left:3px solid #b00;color:#900} div.md{white-space:pre-wrap;margin:1rem 0}
img{max-width:100%;height:auto} .n{color:#888;font-size:12px}
@media print{pre{white-space:pre-wrap}}
"""


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _pre(cls: str, text: str) -> str:
    # newlines stay newlines inside <pre>; every other character goes through esc_html
    return f'<pre class="{cls}">' + "\n".join(esc_html(line) for line in text.split("\n")) + "</pre>"


def _output(out: dict) -> str:
    kind = out.get("output_type")
    if kind == "stream":
        return _pre("out", _text(out.get("text")))
    if kind == "error":
        trace = "\n".join(_ANSI.sub("", line) for line in out.get("traceback") or [])
        return _pre("err", trace or f"{out.get('ename')}: {out.get('evalue')}")
    data = out.get("data") or {}
    if "image/png" in data:
        png = _text(data["image/png"]).replace("\n", "")
        if re.fullmatch(r"[A-Za-z0-9+/=]*", png):
            return f'<img alt="figure" src="data:image/png;base64,{png}">'
    if "text/plain" in data:
        return _pre("out", _text(data["text/plain"]))
    return ""


def render(path: str | Path, title: str) -> str:
    """The page of one executed notebook (.ipynb, nbformat 4)."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        cells = nb["cells"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a readable notebook ({err}); rerun its lesson") from None
    body = [f"<h1>{esc_html(title)}</h1>",
            f'<p class="n">The executed notebook {esc_html(Path(path).name)}, as the workflow ran it.</p>']
    for i, cell in enumerate(cells):
        source = _text(cell.get("source"))
        if cell.get("cell_type") == "markdown":
            body.append('<div class="md">' + "\n".join(esc_html(line) for line in source.split("\n")) + "</div>")
        elif cell.get("cell_type") == "code":
            count = cell.get("execution_count")
            body.append(f'<div class="n">In [{esc_html(count if count is not None else " ")}]</div>')
            body.append(_pre("in", source))
            body += [_output(out) for out in cell.get("outputs") or []]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc_html(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n"
    )

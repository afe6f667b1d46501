"""How the report writes a value: one rule per unit, one precision per quantity.

`format_value(value, fmt)` is the only place a cited value becomes text; `bytesup verify` formats
the value it re-reads with the same call and compares. The rules:

- a float nobody gave a format: four significant digits, thousands separated, no exponent above
  a thousandth (`plain_float`); an int: thousands separated; a bool: yes / no;
- a share: `%` (a fraction written as a percentage, one decimal: 45.1 %), whatever its spec says;
- bytes: `bytes` (or `bytes:MB`, `bytes:GB` for a value stored in MB or GB) writes the value with
  ONE decimal prefix, the one its size calls for, four significant digits: 96.58 MB, 7.164 GB,
  23.04 kB, 612 bytes. The prefixes are decimal (1 MB = 10^6 bytes), and the report says so once
  (`BYTES_CONVENTION`). An exact count of bytes stays an int (`,d`): 98,362,432;
- text a model wrote: `text` keeps its line breaks (each line shown printable), so a page shows
  a break as a break and never a literal \\n;
- `cut:N` cuts a long text to N characters with an ellipsis; `json` writes a dict as compact JSON;
- any other spec is Python's format(), with thousands separated for `.Nf` and `d`, and an exact
  zero written 0 in every notation (0.0e+00 would read as a measurement). A citation never uses a
  bare precision (`one_rule`): one quantity is written one way on every page.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from bytesup.gguf.file import printable

# A quantity stored in one of these units is a number of bytes (a lesson's headline unit, a claim's unit).
BYTE_UNITS = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}  # "B" is a billion in the claims
_PREFIXES = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
BYTES_CONVENTION = "kB, MB and GB are decimal: 1 MB is 10\u2076 bytes, 1 GB is 10\u2079 bytes"
TEXT_CHARS = 2000  # text a model wrote is cut here (a page shows a few sentences, not a book)


_PRECISION = re.compile(r",?\.\d+[efgEG]?")  # ".3f", ".4g", ".1e", ",.0f": a number of digits, nothing more


def one_rule(fmt: str | None) -> str | None:
    """The format a cited value is written with. A bare precision (".3f", ".4g", ".1e") gives way to
    the report's one rule for a number, so that one quantity reads the same wherever it is cited
    (a lesson's sentence, another lesson's table, the timing page); a format that says what the value
    is stays: "%" (a share), "d" (an exact count), "bytes", "text", "cut:N", "json"."""
    return None if fmt and _PRECISION.fullmatch(fmt) else fmt


def bytes_format(unit: str) -> str:
    """The format of a quantity stored in `unit` (a key of BYTE_UNITS): "bytes", "bytes:MB", ..."""
    return "bytes" if BYTE_UNITS[unit] == 1 else f"bytes:{unit}"


def format_value(value: Any, fmt: str | None = None) -> str:
    """How a cited value is written in the report (see the module docstring).

    Non-printable characters (a token's "\\r", a lone surrogate) are shown escaped, as
    `bytesup inspect` shows them: a browser would turn "\\r" into "\\n" and lose the difference.
    Only `text` keeps its line breaks.
    """
    if fmt == "text":
        text = str(value)
        text = text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "\u2026"
        return "\n".join(printable(line) for line in text.split("\n"))
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
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_format(v, fmt) for v in value) + "]"
    if fmt and not isinstance(value, (int, float)):
        return str(value)  # a format is for numbers: a text (a "skipped" reason) is shown as it is
    if fmt and fmt.startswith("bytes"):
        unit = fmt.partition(":")[2] or "bytes"
        return byte_size(value * BYTE_UNITS[unit])
    if fmt and fmt.endswith("%"):  # "%" and ".1%" alike: a fraction as a percentage, one way everywhere
        digits = fmt[1:-1] if fmt.startswith(".") else "1"
        return f"{100 * float(value):,.{digits}f} %"
    if fmt:
        if value == 0 and re.fullmatch(r"\.\d+[eEgG]", fmt):
            return "0"  # an exact zero is 0 in every notation (0.0e+00 reads as a measurement)
        if fmt.endswith("d") and isinstance(value, float):
            if not value.is_integer():
                return plain_float(value)  # a count that came out fractional is shown as it is
            value = int(value)
        if re.fullmatch(r"\.\d+f|d", fmt):
            fmt = "," + fmt  # thousands separated, as every count and byte size in the report
        return format(value, fmt)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return plain_float(value)
    if isinstance(value, dict):
        return format_value(value, "json")
    return str(value)


def byte_size(n: float) -> str:
    """A number of bytes with the one decimal prefix its size calls for: 96.58 MB, 612 bytes."""
    for prefix, size in _PREFIXES:
        if abs(n) >= size:
            return f"{plain_float(n / size)} {prefix}"
    return f"{plain_float(float(n))} bytes"


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

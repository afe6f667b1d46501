"""A shared report's manifest.json, validated before anything reads it: size, nesting, then a schema.

The manifest comes with a report from someone else, so `bytesup verify` takes it in three steps,
each ending in one line (ManifestError) when it fails:

1. at most MAX_BYTES of UTF-8;
2. nesting at most MAX_DEPTH deep and at most MAX_CONTAINERS lists and objects, counted on the raw
   text (strings and their escapes skipped, chunk by chunk with numpy) BEFORE json.loads builds
   anything: a file nested 200,000 deep or a million small objects is refused unparsed;
3. SCHEMA: every key verify and the page's renderer read, with its type (a boolean is no number,
   a number no path), the keys each entry needs, and sizes (items, characters). The checker here
   takes a small subset of JSON Schema's keywords (type, required, properties,
   additionalProperties, items, maxItems, maxProperties, maxLength, pattern, minimum): jsonschema
   writes the offending value into its message, which for a million-entry list is the list.
"""

from __future__ import annotations

import json
import re

import numpy as np

from bytesup.errors import BytesupError
from bytesup.gguf.file import printable

MAX_BYTES = 16 << 20  # a real report's manifest: 1.5 MB for 7,000 citations and 113 files
MAX_DEPTH = 32  # a real one nests 6 deep
MAX_CONTAINERS = 250_000  # lists and objects (a real one: 8,900)


class ManifestError(BytesupError, ValueError):
    """A manifest.json that is too large, too deep or not of the schema: one line naming the key."""


# -- 2. nesting, on the raw text -------------------------------------------------------------------

_QUOTE, _BACKSLASH = 34, 92
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def nesting(data: bytes, chunk: int = 1 << 20) -> tuple[int, int]:
    """(deepest nesting, number of lists and objects) of JSON text, brackets inside strings not
    counted (a quote after an odd run of backslashes is escaped), without parsing it."""
    deepest = depth = opened = 0
    in_string = False  # at the start of the chunk
    run = 0  # backslashes ending the previous chunk
    for start in range(0, len(data), chunk):
        a = np.frombuffer(data, np.uint8, count=min(chunk, len(data) - start), offset=start)
        index = np.arange(len(a))
        # where the last byte that is not a backslash is, at or before each position
        last_plain = np.maximum.accumulate(np.where(a == _BACKSLASH, -1, index))
        quotes = np.flatnonzero(a == _QUOTE)
        before = np.where(quotes > 0, last_plain[np.maximum(quotes - 1, 0)], -1)
        backslashes = quotes - 1 - before + np.where(before < 0, run, 0)
        real = np.zeros(len(a), np.int32)
        real[quotes[backslashes % 2 == 0]] = 1
        outside = (np.cumsum(real) - real + in_string) % 2 == 0
        step = np.where(outside, _OPEN[a], 0).astype(np.int64)
        path = depth + np.cumsum(step)
        if len(path):
            deepest, depth = max(deepest, int(path.max())), int(path[-1])
        opened += int(np.count_nonzero(step == 1))
        in_string = bool((in_string + int(real.sum())) % 2)
        run = len(a) - 1 - int(last_plain[-1]) + (run if last_plain[-1] < 0 else 0)
    return deepest, opened


# -- 3. the schema ---------------------------------------------------------------------------------

PATH = {"type": "string", "maxLength": 1024}
TEXT = {"type": "string", "maxLength": 100_000}
NAME = {"type": "string", "maxLength": 256}
WHEN = {"type": ["string", "null"], "maxLength": 64}
SHA256 = {"type": "string", "pattern": r"[0-9a-f]{64}"}
COUNT = {"type": "integer", "minimum": 0}
ANY_OBJECT = {"type": "object", "maxProperties": 10_000}
ANY_LIST = {"type": "array", "maxItems": 100_000}
OUTPUTS = {
    "type": "object",
    "maxProperties": 1_000,
    "propertyNames": NAME,
    "additionalProperties": PATH,
}  # a rule: {output name: path}

SCHEMA = {
    "type": "object",
    "required": [
        "format",
        "date",
        "sources",
        "files",
        "citations",
        "notes",
        "tables",
        "figures",
        "machine",
        "packages",
    ],
    "maxProperties": 1_000,
    "properties": {
        "format": NAME,
        "date": {"type": "string", "pattern": r"[0-9A-Za-z][0-9A-Za-z._-]{0,63}"},  # a folder's name
        "started": WHEN,
        "git_describe": NAME,
        "config": ANY_OBJECT,
        "config_sha256": SHA256,
        "model": ANY_OBJECT,
        "machine": {
            "type": "object",
            "maxProperties": 1_000,
            "properties": {
                "gpus": {"type": ["array", "null"], "maxItems": 1_000},
                "blas": {"type": ["array", "null"], "maxItems": 1_000},
            },
        },
        "packages": {"type": "object", "maxProperties": 1_000, "additionalProperties": {"type": ["string", "null"]}},
        "report": ANY_OBJECT,
        "run": ANY_OBJECT,
        "sources": {
            "type": "object",
            "required": ["fetch"],
            "maxProperties": 1_000,
            "propertyNames": NAME,
            "additionalProperties": OUTPUTS,
            "properties": {"fetch": {**OUTPUTS, "required": ["record"]}},
        },
        "refused": {"type": "object", "maxProperties": 1_000, "propertyNames": NAME, "additionalProperties": TEXT},
        "notebooks": {"type": "object", "maxProperties": 1_000, "propertyNames": NAME, "additionalProperties": PATH},
        "job_resources": PATH,
        "inputs_not_cited": {"type": "array", "maxItems": 100_000, "items": PATH},
        "files": {
            "type": "array",
            "maxItems": 20_000,
            "items": {
                "type": "object",
                "required": ["path", "sha256", "bytes", "in_report"],
                "properties": {
                    "path": PATH,
                    "sha256": SHA256,
                    "bytes": COUNT,
                    "in_report": {"type": "boolean"},
                    "rule": NAME,
                    "job_started": WHEN,
                    "job_finished": WHEN,
                },
            },
        },
        "citations": {
            "type": "array",
            "maxItems": 200_000,
            "items": {
                "type": "object",
                "required": ["id", "file", "key", "text"],
                "properties": {
                    "id": COUNT,
                    "file": PATH,
                    "key": TEXT,
                    "format": {"type": ["string", "null"], "maxLength": 64},
                    "text": TEXT,
                    "note": COUNT,
                    "page": PATH,
                },
            },
        },
        "notes": {
            "type": "array",
            "maxItems": 200_000,
            "items": {
                "type": "object",
                "required": ["id", "file", "kind"],
                "properties": {
                    "id": COUNT,
                    "file": PATH,
                    "key": {"type": ["string", "null"], "maxLength": 100_000},
                    "kind": NAME,
                    "page": PATH,
                },
            },
        },
        "tables": ANY_LIST,
        "figures": ANY_LIST,
        "pages": {"type": "array", "maxItems": 1_000, "items": PATH},  # besides index.html: data/*.html, glossary
    },
}

_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}
_SAID = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _said(value) -> str:
    if isinstance(value, bool):
        return _SAID["boolean"]
    return next(
        (_SAID[k] for k in ("integer", "number", "string", "array", "object", "null") if isinstance(value, _TYPES[k])),
        type(value).__name__,
    )


def _prepare(schema: dict) -> dict:
    """The Python types of each schema's "type", kept beside it once (the check runs per value)."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        schema["_python"] = tuple(
            t for k in kinds for t in (_TYPES[k] if isinstance(_TYPES[k], tuple) else (_TYPES[k],))
        )
        schema["_bool"] = "boolean" in kinds  # true is an int to Python, no count to JSON
        schema["_said"] = " or ".join(_SAID[k] for k in kinds)
    for key in ("items", "additionalProperties", "propertyNames"):
        if isinstance(schema.get(key), dict):
            _prepare(schema[key])
    for sub in schema.get("properties", {}).values():
        _prepare(sub)
    return schema


def _first(value, schema: dict) -> tuple[list[str], str] | None:
    """(path from the value down, reversed; what is wrong) at the first violation, or None."""
    python = schema.get("_python")
    if python is not None and (not isinstance(value, python) or (type(value) is bool and not schema["_bool"])):
        return [], f"{_said(value)} where {schema['_said']} belongs"
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)):
            return [], f"{len(value):,} characters, more than {schema['maxLength']:,}"
        if "pattern" in schema and not re.fullmatch(schema["pattern"], value):
            return [], f"{printable(value[:80])!r} is not of the form {schema['pattern']}"
    elif isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            return [], f"{len(value):,} items, more than {schema['maxItems']:,}"
        items = schema.get("items")
        if items is not None:
            for i, item in enumerate(value):
                if why := _first(item, items):
                    why[0].append(str(i))
                    return why
    elif isinstance(value, dict):
        if len(value) > schema.get("maxProperties", len(value)):
            return [], f"{len(value):,} keys, more than {schema['maxProperties']:,}"
        for key in schema.get("required", ()):
            if key not in value:
                return [], f"no key {key!r}"
        properties, other, names = (
            schema.get("properties", {}),
            schema.get("additionalProperties"),
            schema.get("propertyNames"),
        )
        for key, item in value.items():
            why = _first(key, names) if names is not None else None
            if why:
                why = why[0], f"{why[1]} (a key)"
            else:
                sub = properties.get(key, other)
                why = _first(item, sub) if sub is not None else None
            if why:
                why[0].append(printable(key[:80]))
                return why
    elif not isinstance(value, bool) and isinstance(value, (int, float)) and value < schema.get("minimum", value):
        return [], f"{value} is below {schema['minimum']}"
    return None


def violation(value, schema: dict) -> str | None:
    """The first place `value` leaves `schema`, as 'files/3/path: what', or None."""
    why = _first(value, schema)
    if why is None:
        return None
    return f"{'/'.join(reversed(why[0])) or 'the top level'}: {why[1]}"


_prepare(SCHEMA)


# -- all three -------------------------------------------------------------------------------------


def parse(data: bytes, where: str, format_: str) -> dict:
    """The manifest in `data` (read from `where`), checked; a ManifestError in one line otherwise."""
    if len(data) > MAX_BYTES:
        raise ManifestError(f"{where}: {len(data):,} bytes, more than a report's manifest holds ({MAX_BYTES:,})")
    deepest, containers = nesting(data)
    if deepest > MAX_DEPTH:
        raise ManifestError(f"{where}: nested {deepest:,} deep, more than a report's manifest ({MAX_DEPTH})")
    if containers > MAX_CONTAINERS:
        raise ManifestError(
            f"{where}: {containers:,} lists and objects, more than a report's manifest holds ({MAX_CONTAINERS:,})"
        )
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ManifestError(f"{where}: not JSON ({printable(str(err))[:200]})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != format_:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise ManifestError(
            f"{where}: not a manifest of this bytesup version's reports (format"
            f" {printable(repr(found))[:80]}, this version writes {format_!r})"
        )
    why = violation(manifest, SCHEMA)
    if why:
        raise ManifestError(f"{where}: {why}")
    return manifest

"""The `bytesup` command.

    bytesup inspect MODEL.gguf [--json] [--no-tensors]   (a partial download, or a split model's first part, too)
    bytesup verify report/<date>/ | report/<date>.zip [--root PROJECT]

A subcommand is a function that adds its parser (setting `run`) plus one line in
COMMANDS. Expected failures (missing file, malformed GGUF) print one line,
`bytesup: error: <file>: <what> at byte <n>`, and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from bytesup import __version__
from bytesup.errors import BytesupError, printable
from bytesup.gguf.file import GGUF_MAGIC, GGUFFile
from bytesup.gguf.sizes import shape_text
from bytesup.lessons import registry
from bytesup.model import param_counts
from bytesup.report.verify import verify_path
from bytesup.run.files import plain
from bytesup.run.paths import not_a_file

EXIT_ERROR = 2
ARRAY_HEAD = 8  # arrays longer than this are shown as their first ARRAY_HEAD items + length
LONG_STRING = 160  # text output cuts strings longer than this


class CommandError(BytesupError):
    """An expected failure; main() prints it as one line."""


# -- inspect ----------------------------------------------------------------------------


def _summary(value: Any) -> Any:
    """Long arrays shortened to their head and length (the full list is in metadata.json)."""
    if isinstance(value, list) and len(value) > ARRAY_HEAD:
        return {"length": len(value), "head": [plain(v, nonfinite="text") for v in value[:ARRAY_HEAD]]}
    return plain(value, nonfinite="text")


def by_type(f: GGUFFile) -> dict[str, dict[str, float]]:
    """ggml type -> tensors, parameters, bytes, bits per weight."""
    rows: dict[str, dict[str, float]] = param_counts.table_counts(param_counts.tensor_rows(f.tensors))["by_type"]
    for row in rows.values():
        row["bits_per_weight"] = round(8 * row["bytes"] / row["parameters"], 4) if row["parameters"] else None
    return dict(rows)


def inspect_document(f: GGUFFile, tensors: bool = True) -> dict:
    doc = {
        "file": str(f.path),
        "header": {
            "magic": GGUF_MAGIC.decode(),
            "version": f.version,
            "tensor_count": len(f.tensors),
            "metadata_count": len(f.metadata),
            "alignment": f.alignment,
            "data_offset": f.data_offset,
            "file_size": f.file_size,
        },
        "parts": [str(p) for p in f.parts],
        "tensor_data_missing": {"bytes": f.missing_bytes, "tensors": list(f.incomplete)},
        "metadata": {k: {"type": f.metadata_types[k], "value": _summary(v)} for k, v in f.metadata.items()},
        "by_type": by_type(f),
        "parameters": param_counts.table_counts(param_counts.tensor_rows(f.tensors))["total"],
        "byte_accounting": f.byte_accounting(),
    }
    if tensors:
        incomplete = set(f.incomplete)
        doc["tensors"] = [
            {
                "name": t.name,
                "type": t.type_name,
                "shape": list(t.shape),
                "shape_gguf": list(t.shape_gguf),
                "offset": t.offset,
                "bytes": t.n_bytes,
                "elements": t.n_elements,
                "part": t.part + 1,
                "complete": t.name not in incomplete,
            }
            for t in f.tensors
        ]
    return doc


def _show(value: Any) -> str:
    """One printable line for a metadata value."""
    if isinstance(value, dict) and "length" in value:  # a summarised array
        items = ", ".join(_show(v) for v in value["head"])
        return f"[{items}, ...] ({value['length']} items)"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, str):
        if len(value) > LONG_STRING:  # e.g. a chat template; --json has it in full
            return printable(repr(value[: LONG_STRING - 40])) + f"... ({len(value)} chars)"
        return printable(repr(value))
    return str(value)


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def inspect_text(doc: dict) -> str:
    h = doc["header"]
    out = [
        f"file: {printable(doc['file'])}",
        f"magic {h['magic']}  version {h['version']}  tensors {h['tensor_count']}  metadata keys"
        f" {h['metadata_count']}  alignment {h['alignment']}  data offset {h['data_offset']}"
        f"  file size {h['file_size']:,} bytes",
    ]
    if len(doc["parts"]) > 1:
        out.append(f"split model: {len(doc['parts'])} parts, {', '.join(printable(p) for p in doc['parts'])}")
    missing = doc["tensor_data_missing"]
    if missing["bytes"]:
        out.append(
            f"partial file: {missing['bytes']:,} bytes of tensor data are missing ({len(missing['tensors'])} of"
            f" {h['tensor_count']} tensors incomplete; the whole file would be {h['file_size'] + missing['bytes']:,}"
            " bytes): an unfinished download? Fetch it again to use it"
        )
    out += ["", f"metadata ({h['metadata_count']} keys):"]
    if doc["metadata"]:
        out += _table([[printable(k), m["type"], _show(m["value"])] for k, m in doc["metadata"].items()], set())
    if "tensors" in doc:
        out += ["", f"tensors ({h['tensor_count']}, shapes in numpy order: rows x row length):"]
        split = len(doc["parts"]) > 1  # a split model's table says which part holds each tensor
        rows = [["name", "type", "shape", "offset", "bytes"] + ["part"] * split]
        rows += [[printable(t["name"]), t["type"], shape_text(t["shape"]) or "scalar", str(t["offset"]),
                  f"{t['bytes']:,}" + ("" if t["complete"] else " (cut off)")] + [str(t["part"])] * split
                 for t in doc["tensors"]]  # fmt: skip
        out += _table(rows, {3, 4, 5})
    out += ["", "by type:"]
    rows = [["type", "tensors", "parameters", "bytes", "bits/weight"]]
    for name, r in doc["by_type"].items():
        bpw = "-" if r["bits_per_weight"] is None else f"{r['bits_per_weight']:.2f}"
        rows.append([name, str(r["tensors"]), f"{r['parameters']:,}", f"{r['bytes']:,}", bpw])
    rows.append(["total", str(h["tensor_count"]), f"{doc['parameters']:,}",
                 f"{sum(r['bytes'] for r in doc['by_type'].values()):,}", ""])  # fmt: skip
    out += _table(rows, {1, 2, 3, 4})
    acc = doc["byte_accounting"]
    out += ["", "byte accounting:"]
    rows = [[k, f"{acc[k]:,}", f"{100 * acc[k] / acc['file_size']:.3f}%"]
            for k in ("header", "metadata", "tensor_infos", "padding", "tensor_data")]  # fmt: skip
    rows.append(["= file size", f"{acc['file_size']:,}", "100%"])
    out += _table(rows, {1, 2})
    return "\n".join(out) + "\n"


def add_inspect(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a GGUF file's header, metadata, tensors and byte accounting")
    p.add_argument("file", help="path to a .gguf file")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.add_argument("--tensors", action=argparse.BooleanOptionalAction, default=True,
                   help="include the tensor table (default: yes)")  # fmt: skip
    p.set_defaults(run=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    with _open(args.file) as f:
        doc = inspect_document(f, tensors=args.tensors)
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        sys.stdout.write(inspect_text(doc))
    return 0


def _open(path: str) -> GGUFFile:
    """The file read as far as it goes: a partial download's header, metadata and tensor table too."""
    try:
        return GGUFFile(path, partial=True)
    except OSError as err:
        raise CommandError(f"{printable(path)}: {not_a_file(path) or err.strerror or err}") from None


# -- verify -----------------------------------------------------------------------------


def add_verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="re-hash a report's files and re-read every number it cites",
        description="Re-hash every file a dated report cites, re-render index.html, report.md and the notebook"
        " pages from the manifest and those files, and compare them byte for byte with what was"
        " shared. Exit 0 with one line when all agree; 1 with one line per difference (the first"
        " place each page differs, each changed file and number, each added file; the first 100) otherwise;"
        " 2, with one line, when PATH is not a report, the archive is damaged, the folder was moved from"
        " its project, or verify refuses to read it (a manifest off its schema, a file outside the"
        " report's root or not a regular file, an archive member past its size, ratio or total caps).",
    )
    p.add_argument(
        "path",
        help="a report folder (report/<date>/, or llm-bytes-up-<date>/report/<date>/ unpacked)"
        " or its archive (report/<date>.zip)",
    )
    p.add_argument("--root", help="where the cited paths start (default: the archive's root, or two folders"
                                  " above a report folder: the project)")  # fmt: skip
    p.set_defaults(run=run_verify)


VERIFY_LINES = 100  # differences printed; the rest are counted (a hostile manifest can name millions)
VERIFY_LINE_CHARS = 1_000


def run_verify(args: argparse.Namespace) -> int:
    result = verify_path(args.path, args.root)
    for problem in result.problems[:VERIFY_LINES]:
        line = printable(problem)
        print(line if len(line) <= VERIFY_LINE_CHARS else line[: VERIFY_LINE_CHARS - 1] + "\u2026")
    if len(result.problems) > VERIFY_LINES:
        print(f"... and {len(result.problems) - VERIFY_LINES:,} more differences, not shown")
    print(printable(result.summary()))
    return 0 if result.ok else 1


# -- lessons ----------------------------------------------------------------------------


def add_lessons(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lessons", help="list the lessons, in the course's order, with the ids the config takes")
    p.set_defaults(run=run_lessons)


def run_lessons(args: argparse.Namespace) -> int:
    for spec in registry().values():
        follows = ", ".join(spec.architectures) if spec.architectures else "any architecture"
        print(f"{spec.id}\n    {spec.heading}\n    from: {spec.source}\n    follows: {follows}")
    return 0


# -- main -------------------------------------------------------------------------------

COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [add_inspect, add_verify, add_lessons]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bytesup", description="Look inside GGUF model files; check dated reports; list the lessons."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except BytesupError as err:  # every expected failure, whichever wing raised it
        print(f"bytesup: error: {printable(str(err))}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `bytesup inspect x | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

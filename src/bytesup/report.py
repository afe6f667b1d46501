"""The dated report: summary, one section per lesson, timing, course claims, provenance.

`build()` is given the run's outputs (each with the rule that wrote it) and writes
index.html, report.md and manifest.json. Every number it prints is a Citation read from
one of those files; the manifest lists each file's sha256 and each citation, so
`bytesup verify` can re-check both.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from bytesup.citations import Ledger, read_value
from bytesup.report_doc import Doc
from bytesup.report_lessons import LESSON_HEADLINES

TIMING_HEADLINES = [
    ("STREAM copy bandwidth (GB/s)", "stream_copy_gbps", ".1f"),
    ("STREAM triad bandwidth (GB/s)", "stream_triad_gbps", ".1f"),
    ("cold fp32 matvec, effective bandwidth (GB/s)", "matvec_cold_gbps", ".1f"),
    ("matvec bandwidth as a fraction of STREAM copy", "matvec_fraction_of_copy", "%"),
    ("time(N=256) / time(N=1)", "matmul_ratio_256_over_1", ".1f"),
]

CLAIM_STATUSES = ("reproduced", "specimen differs", "not reproduced")


def _css_status(status: str) -> str:
    return "status-" + status.replace(" ", "-")


def _csv_rows(path: str) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _csv_table(doc: Doc, path: str, cite_columns: set[str] | None = None, css=None) -> None:
    """A CSV file as a table; numeric cells (or the named columns) are citations."""
    rows = _csv_rows(path)
    if not rows:
        doc.para(f"({path} has no rows.)")
        return
    header = list(rows[0])
    body, classes = [], []
    for i, row in enumerate(rows):
        cells, cls = [], []
        for col in header:
            raw = row[col]
            numeric = read_value(path, f"{i}/{col}") if raw != "" else ""
            wanted = col in cite_columns if cite_columns is not None else not isinstance(numeric, str)
            cells.append(doc.ledger.cite(path, f"{i}/{col}") if wanted and raw != "" else raw)
            cls.append(css(col, raw) if css else "")
        body.append(cells)
        classes.append(cls)
    doc.table(header, body, classes)


def _summary(doc: Doc, run: dict) -> None:
    L = doc.ledger
    rec = run["model_record"]
    doc.heading(2, "Summary", "summary")
    doc.para(
        "Model ", L.cite(rec, "name"), " (source ", L.cite(rec, "source"), ", ",
        L.cite(rec, "size"), " bytes, sha256 ", L.cite(rec, "sha256"), "), run on ",
        run["machine"]["cpu_model"], " on ", run["date"], " (machine details under Provenance).",
    )
    rows = []
    for lesson, files in run["lessons"].items():
        for label, key, fmt in LESSON_HEADLINES.get(lesson, {}).get("numbers", [])[:4]:
            rows.append([f"{lesson}: {label}", L.cite(files["metrics.json"], key, fmt)])
    cpu = run["timing"].get("cpu_summary")
    if cpu:
        for label, key, fmt in TIMING_HEADLINES:
            rows.append([f"timing: {label}", L.cite(cpu, key, fmt)])
    if rows:
        doc.table(["headline", "value"], rows)


def _lesson(doc: Doc, lesson: str, files: dict) -> None:
    L = doc.ledger
    spec = LESSON_HEADLINES.get(lesson, {})
    doc.heading(2, spec.get("title", lesson), lesson)
    metrics = files["metrics.json"]
    numbers = spec.get("numbers", [])
    if numbers:
        doc.table(["quantity", "value"], [[label, L.cite(metrics, key, fmt)] for label, key, fmt in numbers])
    for name, caption in spec.get("figures", {}).items():
        if name in files:
            doc.figure(files[name], caption, os.path.relpath(files[name], doc_dir(doc)))
    for name, path in files.items():
        if name.endswith(".csv") and name != "claims.csv":
            doc.heading(3, f"Table {name}")
            _csv_table(doc, path)
    if "claims.csv" in files:
        doc.heading(3, "The course's numbers against this run")
        _csv_table(
            doc, files["claims.csv"], cite_columns={"measured"},
            css=lambda col, raw: _css_status(raw) if col == "status" else "",
        )


def doc_dir(doc: Doc) -> str:
    return getattr(doc, "out_dir", ".")


def _timing(doc: Doc, timing: dict) -> None:
    L = doc.ledger
    doc.heading(2, "Timing", "timing")
    cpu = timing.get("cpu_summary")
    if cpu:
        doc.heading(3, "CPU")
        doc.table(["quantity", "value"], [[label, L.cite(cpu, key, fmt)] for label, key, fmt in TIMING_HEADLINES])
        targets = read_value(cpu, "targets") if "targets" in json.loads(Path(cpu).read_text()) else []
        if targets:
            doc.heading(3, "Targets")
            rows, css = [], []
            for i, _ in enumerate(targets):
                rows.append([L.cite(cpu, f"targets/{i}/name"), L.cite(cpu, f"targets/{i}/target"),
                             L.cite(cpu, f"targets/{i}/measured", ".3g"), L.cite(cpu, f"targets/{i}/met")])
                css.append(["", "", "", "met-yes" if targets[i].get("met") else "met-no"])
            doc.table(["target", "goal", "measured", "met"], rows, css)
        for name in ("sweep_csv", "dequant_csv", "stream_csv"):
            if timing.get(name):
                doc.heading(3, f"Table {Path(timing[name]).name}")
                _csv_table(doc, timing[name])
    gpu = timing.get("gpu_summary")
    if gpu:
        doc.heading(3, "GPU")
        data = json.loads(Path(gpu).read_text())
        if "skipped" in data:
            doc.para("No GPU on this run: ", L.cite(gpu, "skipped"), ".")
        else:
            doc.table(["quantity", "value"],
                      [[label, L.cite(gpu, key, fmt)] for label, key, fmt in TIMING_HEADLINES if key in data])


def _claims_overall(doc: Doc, lessons: dict) -> None:
    L = doc.ledger
    doc.heading(2, "Course claims overall", "claims")
    rows = []
    for lesson, files in lessons.items():
        if "claims.csv" in files:
            path = files["claims.csv"]
            rows.append([lesson] + [L.cite(path, f"count/status={s}") for s in CLAIM_STATUSES] + [L.cite(path, "rows")])
    if rows:
        doc.table(["lesson", *CLAIM_STATUSES, "claims"], rows)
    else:
        doc.para("No lesson in this run writes a claims table.")


def _provenance(doc: Doc, manifest: dict) -> None:
    doc.heading(2, "Provenance", "provenance")
    m = manifest["machine"]
    facts = [
        ("date", manifest["date"]), ("git describe", manifest["git_describe"]),
        ("config sha256", manifest["config_sha256"]), ("python", m["python"]), ("os", m["os"]),
        ("cpu", m["cpu_model"]), ("cores", m["cores"]), ("memory bytes", m["memory_bytes"]),
        ("BLAS", "; ".join(f"{b.get('internal_api')} {b.get('version')} ({b.get('num_threads')} threads)" for b in m["blas"])),
        ("load average", m["load_average"]), ("started", manifest["started"]),
    ] + [(f"package {k}", v) for k, v in manifest["packages"].items()]
    doc.table(["fact (from manifest.json)", "value"], [[k, str(v)] for k, v in facts])
    doc.heading(3, "Files cited")
    doc.table(["file", "sha256", "bytes", "rule"],
              [[f["path"], f["sha256"], str(f["bytes"]), f["rule"]] for f in manifest["files"]])


def build(run: dict, out_dir: str | Path) -> dict:
    """Write index.html, report.md and manifest.json for one run; returns the manifest.

    `run` holds: date, started, config, machine, packages, git_describe, model_record (path),
    sources ({path: rule} of every file that may be cited), lessons ({lesson: {file name: path}}),
    timing ({cpu_summary, sweep_csv, dequant_csv, stream_csv, gpu_summary: paths}).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ledger = Ledger()
    for path, rule in run["sources"].items():
        ledger.add_source(path, rule)
    doc = Doc(ledger, f"llm-bytes-up report \u00b7 {run['date']}")
    doc.out_dir = str(out_dir)

    config_json = json.dumps(run["config"], sort_keys=True)
    manifest = {
        "date": run["date"],
        "started": run["started"],
        "git_describe": run["git_describe"],
        "config": run["config"],
        "config_sha256": hashlib.sha256(config_json.encode()).hexdigest(),
        "machine": run["machine"],
        "packages": run["packages"],
    }

    doc.heading(1, f"llm-bytes-up report \u00b7 {run['date']}")
    _summary(doc, run)
    for lesson, files in run["lessons"].items():
        _lesson(doc, lesson, files)
    _timing(doc, run["timing"])
    _claims_overall(doc, run["lessons"])
    manifest["files"] = [asdict(s) for s in ledger.sources.values()]
    _provenance(doc, manifest)
    doc.notes()

    manifest["citations"] = [
        {"id": c.id, "file": c.file, "key": c.key, "format": c.fmt, "text": c.text} for c in ledger.citations
    ]
    _write(out_dir / "index.html", doc.render_html())
    _write(out_dir / "report.md", doc.render_md())
    _write(out_dir / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True, default=str) + "\n")
    return manifest


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)

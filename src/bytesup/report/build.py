"""The dated report: summary, one section per lesson in the course's order, timing, course claims,
provenance.

`build()` is given the run's outputs (each with the rule that wrote it) and writes index.html,
report.md, manifest.json, claims.csv (every lesson's claims in one table) and notebooks/<lesson>.html
(each executed notebook, readable in a browser) into a folder. Every number it prints is a
Citation read from one of those files, or from the manifest itself for facts about the run
(machine, versions, times).

The page is a pure function of the manifest and the cited files: `render(manifest, ...)` writes
it, and `bytesup verify` calls the same function on what was shared and compares byte for byte,
so no word, label, caption, link or number can change unnoticed. Everything the rendering reads
besides the files is in the manifest; the words are this package's (its lesson specs and
narrative templates, bytesup/lessons/narrative/<lesson>.md), so verify uses the version that
wrote the report (the manifest records it).

`publish()` moves the folder into place, keeps an earlier report of the same date aside
(report/<date>.1/, .2/, ...; never overwritten), and writes the archive report/<date>.zip: one
folder, llm-bytes-up-<date>/, holding report/<date>/ and every cited file at its path relative
to the project, so the links and `bytesup verify` work wherever it is unpacked.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import re
import stat
import zipfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path, PurePosixPath

from bytesup.report import job_resources, notebook_pages, provenance
from bytesup.report.citations import SELF, CitationError, Ledger
from bytesup.lessons.claims import COLUMNS as CLAIM_COLUMNS
from bytesup.lessons.claims import STATUSES as CLAIM_STATUSES
from bytesup.run.files import plain
from bytesup.lessons import registry
from bytesup.lessons.spec import parameter
from bytesup.model.arch import UnsupportedArchitectureError, recipe_summary
from bytesup.report.doc import Doc, Link

FORMAT = "bytesup-report/2"
REPORT_FILES = ("index.html", "report.md", "manifest.json", "claims.csv")  # besides notebooks/<lesson>.html
NOTEBOOKS = "notebooks"  # inside the report folder: each lesson's executed notebook as HTML
OUTPUTS = ("citations", "notes", "tables", "figures")  # what rendering adds to the manifest
CLAIMS_FILE = "claims.csv"  # inside the report folder: every lesson's claims, one table
JOB_RESOURCES_FILE = "job_resources.csv"  # inside the report folder: each job's time and memory
TABLE_ROWS = 40  # a long CSV shows its first rows (the file, in the archive, holds them all)
CELL_CHARS = 100  # longer cells are cut, with an ellipsis (claims are never cut)
SUMMARY_NUMBERS_PER_LESSON = 4

TIMING_HEADLINES = [
    ("STREAM copy bandwidth (GB/s)", "stream_copy_gbps", ".1f"),
    ("STREAM triad bandwidth (GB/s)", "stream_triad_gbps", ".1f"),
    ("read ceiling: the best of copy, a threaded sum, a dot and a large gemv (GB/s)", "read_ceiling_gbps", ".1f"),
    ("cold fp32 matvec, effective bandwidth (GB/s)", "matvec_cold_gbps", ".1f"),
    ("matvec bandwidth as a fraction of STREAM copy", "matvec_fraction_of_copy", "%"),
    ("matvec bandwidth as a fraction of the read ceiling", "matvec_fraction_of_read_ceiling", "%"),
    ("time(N=256) / time(N=1)", "matmul_ratio_256_over_1", ".1f"),
]
DECODE_HEADLINES = [
    ("decode, the project's NumPy decoder (tokens/s)", "decode_tokens_per_s", ".1f"),
    ("bytes of weights read per token", "decode_bytes_per_token", ",d"),
    ("read ceiling in the same job: the best of copy, sum, dot and gemv (GB/s)", "decode_read_ceiling_gbps", ".1f"),
    ("tokens/s ceiling at that read ceiling", "decode_ceiling_tokens_per_s", ".1f"),
    ("fraction of that ceiling reached", "decode_fraction_of_read_ceiling", "%"),
    ("llama.cpp on a float32 copy of the same model (tokens/s)", "llama_cpp_f32/decode_tokens_per_s", ".1f"),
    ("our tokens/s over llama.cpp's on that float32 copy", "decode_over_llama_cpp_f32", ".2f"),
    ("llama.cpp decode on the same file (tokens/s)", "llama_cpp/decode_tokens_per_s", ".1f"),
    ("llama.cpp: fraction of the quantized file's ceiling", "llama_cpp/decode_fraction_of_read_ceiling", "%"),
]
# What each claims verdict means, shown beside every table of claims (bytesup.lessons.claims defines them).
VERDICTS = (
    ("reproduced", "this run's number rounds to the number the course printed (or lies within the claim's"
                   " stated tolerance)"),
    ("specimen differs", "the course's number is about its own model or machine; this run used another one,"
                         " so agreement is not expected (the measured column is still this run's)"),
    ("not reproduced", "the number should have matched and did not, or nothing was measured"),
)
TIMING_CONTEXT = [
    ("other processes' share of the CPU during timing", "other_processes_cpu_fraction", "%"),
    ("machine shared with other work", "machine_shared", None),
]


def _css_status(status: str) -> str:
    return "status-" + status.replace(" ", "-")


def _csv_rows(path: str | Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _json(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


# -- sections ---------------------------------------------------------------------------------


def csv_table(doc: Doc, path: str, caption: str, max_rows: int | None = TABLE_ROWS,
              cut: int | None = CELL_CHARS, css=None) -> None:
    """A CSV file as a table with one footnote; every non-empty cell is a citation of the file."""
    L = doc.ledger
    header, rows = _csv_rows(L.location(path))
    shown = rows if max_rows is None else rows[:max_rows]
    note = L.note(path, None, "table")
    body, classes = [], []
    for i, row in enumerate(shown):
        cells, cls = [], []
        for col in header:
            raw = row.get(col) or ""
            fmt = f"cut:{cut}" if cut and len(raw) > cut else None
            cells.append(L.cite(path, f"{i}/{col}", fmt, note=note) if raw != "" else "")
            cls.append(css(col, raw) if css else "")
        body.append(cells)
        classes.append(cls)
    doc.table(header, body, classes, note=note, caption=caption)
    if len(shown) < len(rows):
        doc.para("The table shows the first rows of ", L.cite(path, "rows"), "; the file holds all of them.")


def _numbers_spec(lesson: str, metrics_path: str, ledger: Ledger) -> list[tuple[str, str, str]]:
    """(label, key, unit) of a lesson's headline numbers present in its metrics.json: its SPEC's,
    else every top-level scalar (a lesson the registry does not know is labelled by its keys)."""
    spec = registry().get(lesson)
    data = _json(ledger.location(metrics_path))
    if spec is not None and spec.headlines:
        return [(h.label, h.key, h.unit) for h in spec.headlines if h.key in data]
    return [(k, k, "") for k, v in data.items() if isinstance(v, (int, float, bool)) and v is not None]


def quantity_formats(manifest: dict) -> dict[str, dict[str, str]]:
    """One format per quantity (see citations.Ledger): a lesson's headline formats apply in its folder,
    the timing tables' everywhere; the rest follow citations.format_value's one rule."""
    formats: dict[str, dict[str, str]] = {"": {}}
    for _, key, fmt in TIMING_HEADLINES + DECODE_HEADLINES + TIMING_CONTEXT:
        if fmt:
            formats[""][key.rsplit("/", 1)[-1]] = fmt
    for rule, outputs in manifest["sources"].items():
        spec = registry().get(rule.removeprefix("lesson_")) if rule.startswith("lesson_") else None
        if spec is not None and "metrics_json" in outputs:
            folder = str(PurePosixPath(outputs["metrics_json"]).parent)
            formats[folder] = {h.key: h.fmt for h in spec.headlines if h.fmt}
    return formats


# -- the narrative: one template per lesson, its numbers cited inline -------------------------

_SLOT = re.compile(r"\{([a-z0-9_]+:)?([^{}]+)\}")


def narrative_template(lesson: str) -> str | None:
    """bytesup/lessons/narrative/<lesson>.md, or None for a lesson without one."""
    path = resources.files("bytesup.lessons") / "narrative" / f"{lesson}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def narrative(template: str, files: dict, ledger: Ledger) -> list[list]:
    """Paragraphs of pieces from a template: one sentence a line, a blank line between paragraphs,
    '#' lines are comments. {key} cites the lesson's metrics.json, {output:key} another of its files
    (claims_csv:rows). A sentence whose number this run lacks is left out, whole."""
    paragraphs, current = [], []
    for line in template.splitlines() + [""]:
        line = line.strip()
        if line.startswith("#"):
            continue
        if not line:
            if current:
                paragraphs.append(current)
            current = []
            continue
        slots = [((m.group(1) or "metrics_json:")[:-1], m.group(2), m) for m in _SLOT.finditer(line)]
        try:  # every number first: a sentence left out leaves no footnote behind
            for name, key, _ in slots:
                if name not in files:
                    raise CitationError(f"no {name}")
                if ledger.read(files[name], key) is None:
                    raise CitationError(f"{key} is null")
        except CitationError:
            continue
        pieces, at = [], 0
        for name, key, m in slots:
            pieces += [line[at:m.start()], ledger.cite(files[name], key)]
            at = m.end()
        pieces.append(line[at:])
        current += ([" "] if current else []) + [p for p in pieces if p != ""]
    return paragraphs


def _title(lesson: str) -> str:
    spec = registry().get(lesson)
    return spec.heading if spec is not None else lesson


def _summary(doc: Doc, run: dict, manifest: dict) -> None:
    L = doc.ledger
    rec = run["model_record"]
    doc.heading(2, "Summary", anchor="summary", toc="Summary")
    gpus = manifest["machine"].get("gpus") or []
    gpu = [L.cite(SELF, "machine/gpus/0/name")] if gpus else ["none on this machine"]
    doc.para(
        "This report recomputes the numbers of the LLM Basics course from the weights of one model file, ",
        L.cite(rec, "name"), " (from ", L.cite(rec, "source"), ", ", L.cite(rec, "size"),
        " bytes, sha256 ", L.cite(rec, "sha256"), "), on ", L.cite(SELF, "machine/cpu_model"), " with ",
        L.cite(SELF, "machine/cores"), " logical CPUs (GPU: ", *gpu, "), on ", L.cite(SELF, "date"), ".",
    )
    doc.para("Every number is read from a file the workflow wrote: it links to that file (in the shared"
             " archive), shows its key and sha256 when pointed at or focused, and has a footnote. The command"
             " bytesup verify re-reads them all and re-renders this page, word for word.")
    _architecture(doc, run)
    rows = []
    for lesson, files in run["lessons"].items():
        if "metrics_json" not in files:
            continue
        for label, key, unit in _numbers_spec(lesson, files["metrics_json"], L)[:SUMMARY_NUMBERS_PER_LESSON]:
            rows.append([_title(lesson), label, L.cite(files["metrics_json"], key), unit])
    cpu = run["timing"].get("cpu_summary")
    if cpu:
        data = _json(L.location(cpu))
        for label, key, fmt in TIMING_HEADLINES:
            if data.get(key) is not None:
                quantity, unit = _label_unit(label)
                rows.append(["Timing, CPU", quantity, L.cite(cpu, key, fmt), unit])
    gpu_summary = run["timing"].get("gpu_summary")
    if gpu_summary:
        data = _json(L.location(gpu_summary))
        if "skipped" in data:
            rows.append(["Timing, GPU", "not measured", L.cite(gpu_summary, "skipped"), ""])
        elif data.get("matvec_fraction_of_copy") is not None:
            rows.append(["Timing, GPU", "matvec bandwidth as a fraction of device copy",
                         L.cite(gpu_summary, "matvec_fraction_of_copy", "%"), ""])
    for status in CLAIM_STATUSES:
        rows.append(["Course claims", status, L.cite(CLAIMS_FILE, f"count/status={status}"), "claims"])
    rows.append(["Course claims", "all", L.cite(CLAIMS_FILE, "rows"), "claims"])
    for i in range(len(rows) - 1, 0, -1):  # each section named once, on its first row
        if rows[i][0] == rows[i - 1][0]:
            rows[i][0] = ""
    doc.table(["section", "quantity", "value", "unit"], rows, caption="The main numbers")
    refused = run.get("refused", {})
    if refused:
        doc.para("What did not run, and why:")
        doc.raw_list([f"{_title(lesson)}: {why}." for lesson, why in refused.items()])
    else:
        doc.para("Every lesson of the course ran for this model.")


_UNIT = re.compile(r"^(.*) \(([^()]*)\)$")


def _label_unit(label: str) -> tuple[str, str]:
    """"STREAM copy bandwidth (GB/s)" -> ("STREAM copy bandwidth", "GB/s")."""
    m = _UNIT.match(label)
    return (m.group(1), m.group(2)) if m else (label, "")


def _architecture(doc: Doc, run: dict) -> None:
    """The model's architecture as its file names it, and the recipe the lessons followed for it."""
    L = doc.ledger
    meta = run["sources"].get("extract", {}).get("metadata")
    if not meta:
        return
    try:
        arch = L.read(meta, "metadata/general.architecture")
    except CitationError:
        return
    doc.para("Architecture (general.architecture in the file): ", L.cite(meta, "metadata/general.architecture"),
             ". ", _recipe(arch))


def _recipe(arch) -> str:
    """The one-line recipe bytesup.model.arch's table follows for an architecture, or why there is none."""
    try:
        return f"The recipe the lessons that run the network follow: {recipe_summary(str(arch))}."
    except UnsupportedArchitectureError:
        return ("bytesup.model.arch has no recipe for it: the lessons that run the network are not run for this"
                " model (listed below).")


def _model_file(doc: Doc, run: dict) -> None:
    """What the extract stage read from the GGUF: architecture, counts, shape keys, the hash it checked."""
    L = doc.ledger
    extract = run["sources"].get("extract", {})
    meta, index, tensors = extract.get("metadata"), extract.get("index"), extract.get("tensors_csv")
    rows = []

    def add(label: str, path: str | None, key: str, fmt: str | None = None) -> None:
        if path:
            try:
                L.read(path, key)
            except CitationError:
                return
            rows.append([label, L.cite(path, key, fmt)])

    arch = None
    if meta:
        try:
            arch = L.read(meta, "metadata/general.architecture")
        except CitationError:
            pass
    add("architecture", meta, "metadata/general.architecture")
    add("name in the file", meta, "metadata/general.name")
    add("GGUF version", meta, "gguf/version")
    add("metadata keys", meta, "gguf/metadata_count")
    add("tensors", tensors, "rows")
    if isinstance(arch, str) and "/" not in arch:
        for label, key in (("blocks", "block_count"), ("embedding length", "embedding_length"),
                           ("feed-forward length", "feed_forward_length"), ("vocabulary", "vocab_size")):
            add(label, meta, f"metadata/{arch}.{key}")
    add("sha256 of the file the extract stage read", index, "gguf/sha256")
    if rows:
        doc.heading(3, "The model file", anchor="model-file")
        doc.table(["quantity", "value"], rows)


def _lesson(doc: Doc, lesson: str, files: dict, refused: str | None, notebook: str | None) -> None:
    """One lesson's section: its source in words, its narrative with the numbers cited inline, its
    figures, a table of its main numbers, its other tables, its claims and its executed notebook."""
    L = doc.ledger
    spec = registry().get(lesson)
    doc.heading(2, _title(lesson), anchor=lesson, toc=_title(lesson))
    if spec is not None:
        source = spec.source[0].lower() + spec.source[1:] if spec.source.startswith("The ") else spec.source
        doc.para(f"From {source}.")
    if refused:
        doc.para(f"Not run for this model: {refused}.")
        return
    template = narrative_template(lesson)
    if template:
        for paragraph in narrative(template, files, L):
            doc.para(*paragraph)
    if notebook:
        doc.para("Every step of the arithmetic, in the executed notebook: ", *_file_ref(doc, notebook),
                 " (a page rendered from ", *_file_ref(doc, files["notebook"]), ").")
    if spec is not None:
        figures = [(parameter(name), caption) for name, caption in spec.figures.items()]
        tables = [parameter(name) for name in spec.tables]
    else:  # a lesson the registry does not know: every figure and table it wrote, under its name
        figures = [(name, name) for name in sorted(files) if name.endswith("_png")]
        tables = [name for name in sorted(files) if name.endswith("_csv") and name != "claims_csv"]
    for name, caption in figures:
        if name in files:
            doc.figure(files[name], caption)
    metrics = files.get("metrics_json")
    if metrics:
        numbers = _numbers_spec(lesson, metrics, L)
        if numbers:
            note = L.note(metrics, None, "table")
            doc.table(["quantity", "value", "unit"], [[label, L.cite(metrics, key, note=note), unit]
                                                      for label, key, unit in numbers],
                      note=note, caption="Its main numbers")
    for name in tables:
        if name in files:
            csv_table(doc, files[name], _table_caption(files[name]))
    if "claims_csv" in files:
        path = files["claims_csv"]
        doc.heading(3, "The course's numbers against this run")
        counts = []
        for status in CLAIM_STATUSES:
            counts += [", " if counts else "", L.cite(path, f"count/status={status}"), f" {status}"]
        doc.para("Of ", L.cite(path, "rows"), " numbers the course prints: ", *counts, ". The verdicts:")
        doc.terms(list(VERDICTS))
        csv_table(doc, path, "The course's numbers and this run's", max_rows=None, cut=None,
                  css=lambda col, raw: _css_status(raw) if col == "status" else "")


def _file_ref(doc: Doc, path: str) -> list:
    """A file named by a link and a footnote (a file the report cites whole, not a number in it)."""
    note = doc.ledger.note(path, None, "file")
    return [Link(PurePosixPath(path).name, doc.href(path)), note]


def _table_caption(path: str) -> str:
    """'byte_accounting.csv' -> 'Byte accounting'."""
    words = PurePosixPath(path).stem.replace("_", " ")
    return words[:1].upper() + words[1:]


# The course's own measurements on its DGX Spark (lesson 3's claims), shown beside this run's.
COURSE_MACHINE_CLAIMS = (
    ("time(N=256) / time(N=1)", "timing.matmul_ratio_256_over_1"),
    ("cold matvec bandwidth (GB/s)", "timing.matvec_gbps"),
    ("memory bandwidth peak (GB/s; the course quotes a datasheet figure, this run measures STREAM copy)",
     "timing.peak_gbps"),
)


def _course_machine(doc: Doc, lessons: dict) -> None:
    """The course's DGX Spark figures beside this machine's, both read from lesson 3's claims.csv."""
    claims = lessons.get("03_ffn_by_hand", {}).get("claims_csv")
    if not claims:
        return
    L = doc.ledger
    _, rows = _csv_rows(L.location(claims))
    index = {row["claim_id"]: i for i, row in enumerate(rows)}
    table = [[label, L.cite(claims, f"{index[cid]}/published"), L.cite(claims, f"{index[cid]}/measured")]
             for label, cid in COURSE_MACHINE_CLAIMS if cid in index]
    if table:
        doc.table(["quantity", "course, DGX Spark CPU", "this run"], table,
                  caption="The course's machine beside this one")


def _timing(doc: Doc, timing: dict, lessons: dict) -> None:
    L = doc.ledger
    doc.heading(2, "Timing on this machine", anchor="timing", toc="Timing on this machine")
    if timing.get("sweep_png"):
        doc.figure(timing["sweep_png"], "Matvec (N = 1) against matmul on real FFN weights: median time and GFLOP/s "
                   "per N, with this run's read ceiling (best of copy, sum, dot, gemv) and best GFLOP/s as lines")
    _course_machine(doc, lessons)
    cpu = timing.get("cpu_summary")
    if cpu:
        data = _json(L.location(cpu))
        doc.heading(3, "CPU")
        rows = [[label, L.cite(cpu, key, fmt)] for label, key, fmt in TIMING_HEADLINES + TIMING_CONTEXT
                if key in data and data[key] is not None]
        if rows:
            doc.table(["quantity", "value"], rows)
        _targets(doc, cpu, data)
        for name in ("sweep_csv", "stream_csv", "dequant_csv"):
            if timing.get(name):
                csv_table(doc, timing[name], _table_caption(timing[name]))
    decode = timing.get("decode_summary")
    if decode:
        _decode(doc, decode, timing.get("prefill_csv"))
    gpu = timing.get("gpu_summary")
    if gpu:
        doc.heading(3, "GPU")
        data = _json(L.location(gpu))
        if "skipped" in data:
            doc.para("No GPU on this run: ", L.cite(gpu, "skipped"), ".")
        else:
            if isinstance(data.get("machine"), dict) and data["machine"].get("name"):
                doc.para("Device: ", L.cite(gpu, "machine/name"), ".")
            rows = [[label, L.cite(gpu, key, fmt)] for label, key, fmt in TIMING_HEADLINES + TIMING_CONTEXT
                    if data.get(key) is not None]
            rows += [[label.replace("NumPy decoder", "decoder's torch twin").replace("STREAM copy", "device copy"),
                      L.cite(gpu, key, fmt)] for label, key, fmt in DECODE_HEADLINES[:5] if data.get(key) is not None]
            if data.get("decode_skipped"):
                rows.append(["whole-model decode", L.cite(gpu, "decode_skipped")])
            if rows:
                doc.table(["quantity", "value"], rows)
            for name in ("gpu_sweep_csv", "gpu_stream_csv"):
                if timing.get(name):
                    csv_table(doc, timing[name], "GPU: " + _table_caption(timing[name]).lower())


def _targets(doc: Doc, path: str, data: dict) -> None:
    """A timing summary's targets (name, goal, measured, met), each cited from its file."""
    L = doc.ledger
    targets = data.get("targets") or []
    if targets:
        rows, css = [], []
        for i, target in enumerate(targets):
            rows.append([L.cite(path, f"targets/{i}/name"), L.cite(path, f"targets/{i}/target"),
                         L.cite(path, f"targets/{i}/measured") if target.get("measured") is not None
                         else "not measured", L.cite(path, f"targets/{i}/met")])
            css.append(["", "", "", "met-yes" if target.get("met") else "met-no"])
        doc.table(["target", "goal", "measured", "met"], rows, css, caption="Targets")


def _decode(doc: Doc, decode: str, prefill: str | None) -> None:
    """The whole model decoding on this machine: tokens/s against the memory ceiling, and prefill."""
    L = doc.ledger
    data = _json(L.location(decode))
    doc.heading(3, "The whole model, decoding")
    if "skipped" in data:
        doc.para("Not measured for this model: ", L.cite(decode, "skipped"), ".")
        return

    def present(key: str) -> bool:
        try:
            return L.read(decode, key) is not None
        except CitationError:
            return False

    rows = [[label, L.cite(decode, key, fmt)] for label, key, fmt in DECODE_HEADLINES + TIMING_CONTEXT
            if present(key)]
    doc.table(["quantity", "value"], rows)
    _targets(doc, decode, data)
    if present("llama_cpp/skipped"):
        doc.para("llama.cpp: ", L.cite(decode, "llama_cpp/skipped"), ".")
    if present("llama_cpp_f32/skipped"):
        doc.para("llama.cpp on a float32 copy: ", L.cite(decode, "llama_cpp_f32/skipped"), ".")
    if prefill:
        csv_table(doc, prefill, _table_caption(prefill))


def _job_resources(doc: Doc, path: str) -> None:
    """Each job's measured wall time and peak memory beside the runtime and mem_mb its rule declares."""
    doc.heading(2, "Jobs: time and memory", anchor="job-resources")
    doc.para("Snakemake's benchmark file of each job (benchmarks/): wall seconds and peak resident memory in MB "
             "(the job's processes summed, sampled every 0.5 s), beside the runtime "
             "(seconds) and mem_mb its rule declares to a scheduler. A job over its declaration is marked.")

    def css(col: str, raw: str) -> str:
        if col in ("within_mem_mb", "within_runtime") and raw in ("True", "False"):
            return "met-yes" if raw == "True" else "met-no"
        return ""

    csv_table(doc, path, "Table job_resources.csv", max_rows=None, css=css)


def _claims_overall(doc: Doc, lessons: dict) -> None:
    L = doc.ledger
    doc.heading(2, "The course's numbers, all lessons", anchor="claims", toc="The course's numbers, all lessons")
    rows = []
    for lesson, files in lessons.items():
        if "claims_csv" in files:
            path = files["claims_csv"]
            rows.append([_title(lesson)] + [L.cite(path, f"count/status={s}") for s in CLAIM_STATUSES] + [L.cite(path, "rows")])
    rows.append(["all lessons"] + [L.cite(CLAIMS_FILE, f"count/status={s}") for s in CLAIM_STATUSES]
                + [L.cite(CLAIMS_FILE, "rows")])
    doc.table(["lesson", *CLAIM_STATUSES, "claims"], rows)
    doc.terms(list(VERDICTS))
    doc.para("Every lesson's claims, in one table: ", *_file_ref(doc, CLAIMS_FILE), " in this report's folder.")


PROVENANCE_FACTS = [
    ("report date", "date", None),
    ("report started", "report/started", None),
    ("report finished", "report/finished", None),
    ("first cited output: job started", "run/outputs_started", None),
    ("last cited output: job finished", "run/outputs_finished", None),
    ("git describe --always --dirty", "git_describe", None),
    ("config sha256 (canonical JSON)", "config_sha256", None),
    ("config", "config", "json"),
    ("model name", "model/name", None),
    ("model source", "model/source", None),
    ("model sha256", "model/sha256", None),
    ("model size (bytes)", "model/size", None),
    ("Python", "machine/python", None),
    ("operating system", "machine/os", None),
    ("host name", "machine/hostname", None),
    ("CPU", "machine/cpu_model", None),
    ("logical CPUs", "machine/cores", None),
    ("memory (bytes)", "machine/memory_bytes", None),
    ("load average (1, 5, 15 min) at report time", "machine/load_average", None),
]


def _provenance(doc: Doc, manifest: dict) -> None:
    L = doc.ledger
    doc.heading(2, "Provenance", anchor="provenance", toc="Provenance")
    doc.para("Every value below is read from this report's manifest.json, under the key shown.")

    def present(key: str) -> bool:
        try:
            L.read(SELF, key)
            return True
        except CitationError:
            return False

    facts = list(PROVENANCE_FACTS)
    for i, _ in enumerate(manifest["machine"].get("blas") or []):
        facts += [(f"BLAS {i}: {part}", f"machine/blas/{i}/{key}", None) for part, key in
                  (("library", "internal_api"), ("version", "version"), ("threads in the report job", "num_threads"),
                   ("threading layer", "threading_layer"))]
    for i, _ in enumerate(manifest["machine"].get("gpus") or []):
        facts += [(f"GPU {i}: {part}", f"machine/gpus/{i}/{key}", None) for part, key in
                  (("name", "name"), ("driver", "driver"), ("memory (MiB)", "memory_mib"))]
    facts += [(f"package {name}", f"packages/{name}", None) for name in manifest["packages"]]
    note = L.note(SELF, None, "table")
    rows = [[label, L.cite(SELF, key, fmt, note=note), key] for label, key, fmt in facts if present(key)]
    if not manifest["machine"].get("gpus"):
        rows.append(["GPU", "none (nvidia-smi found none on the machine that wrote the report)", "machine/gpus"])
    doc.table(["fact", "value", "key in manifest.json"], rows, note=note, caption="The run")

    note = L.note(SELF, None, "table")
    rows = []
    for i, f in enumerate(manifest["files"]):
        rows.append([L.cite(SELF, f"files/{i}/{k}", note=note) for k in ("path", "bytes", "sha256", "rule")]
                    + [L.cite(SELF, f"files/{i}/job_finished", note=note) if f.get("job_finished") else ""])
    doc.table(["file", "bytes", "sha256", "rule", "written (Snakemake's record)"], rows, note=note,
              caption="Files cited (key files/<row>/<column> in manifest.json; paths marked in_report are inside"
                      " this report's folder)")


# -- the whole report ------------------------------------------------------------------------


def write_claims(lessons: dict, path: Path) -> None:
    """Every lesson's claims.csv, one after the other, in one table (the report cites its counts)."""
    columns, rows = list(CLAIM_COLUMNS), []
    for files in lessons.values():
        if "claims_csv" in files:
            header, lesson_rows = _csv_rows(files["claims_csv"])
            columns += [c for c in header if c not in columns]
            rows += lesson_rows
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    os.chmod(path, READABLE)


def _by_kind(sources: dict) -> dict:
    """The run's files by what they are, from the rules' output names (never from their paths)."""
    cpu, gpu, decode = (sources.get(rule, {}) for rule in ("timing_cpu", "timing_gpu", "timing_decode"))
    timing = {"sweep_png": sources.get("timing_figure", {}).get("figure"),
              "cpu_summary": cpu.get("summary"), "sweep_csv": cpu.get("sweep"), "stream_csv": cpu.get("stream"),
              "dequant_csv": cpu.get("dequant"), "gpu_summary": gpu.get("summary"),
              "gpu_sweep_csv": gpu.get("sweep"), "gpu_stream_csv": gpu.get("stream"),
              "decode_summary": decode.get("summary"), "prefill_csv": decode.get("prefill")}
    lessons = {rule.removeprefix("lesson_"): outputs for rule, outputs in sources.items() if rule.startswith("lesson_")}
    return {"model_record": sources["fetch"]["record"], "timing": {k: v for k, v in timing.items() if v},
            "lessons": {lesson: lessons[lesson] for lesson in _course_order(lessons)}}


def _course_order(lessons) -> list[str]:
    """Lesson ids in the course's order (the registry's); ids it does not know come last, sorted."""
    known = list(registry())
    return sorted(lessons, key=lambda x: (known.index(x) if x in known else len(known), x))


def _span(times: list[str | None], pick) -> str | None:
    parsed = [datetime.datetime.fromisoformat(t) for t in times if t]
    return pick(parsed).isoformat(timespec="seconds") if parsed else None


def notebook_page(lesson: str) -> str:
    """Where a lesson's executed notebook, as HTML, sits inside the report folder."""
    return f"{NOTEBOOKS}/{lesson}.html"


def write_notebooks(lessons: dict, out_dir: Path) -> dict[str, str]:
    """Each lesson's executed notebook rendered as a page of its own; {lesson: path in the report folder}."""
    pages = {}
    for lesson, files in lessons.items():
        if files.get("notebook"):
            page = notebook_page(lesson)
            (out_dir / NOTEBOOKS).mkdir(parents=True, exist_ok=True)
            _write(out_dir / page, notebook_pages.render(files["notebook"], _title(lesson)))
            pages[lesson] = page
    return pages


# Sections other modules add, after timing: each a function (doc, manifest) -> None that writes its
# own heading (doc.heading(2, title, anchor=..., toc=title)) and cites what it shows through
# doc.ledger, reading only the manifest and files listed in manifest["sources"] (so verify, which
# calls render(), draws it the same). List it here, in this module, not from outside: the report
# job and `bytesup verify` must render the same sections. The job resources table (wall time and
# peak memory against each rule's declared resources, bytesup.report.job_resources) goes here.


def _job_resources_section(doc: Doc, manifest: dict) -> None:
    if manifest.get("job_resources"):
        _job_resources(doc, manifest["job_resources"])


EXTRA_SECTIONS: list[Callable[[Doc, dict], None]] = [_job_resources_section]


def render(manifest: dict, report_dir: str | Path, root: str | Path = ".") -> Doc:
    """The whole page from the manifest and the files it names (report and verify both call this).

    `report_dir` holds the files written into the report folder, `root` the project's (or an
    unpacked archive's) files. Raises CitationError when a cited file or key is missing.
    """
    ledger = Ledger(report_dir=report_dir, root=root, formats=quantity_formats(manifest))
    for rule, outputs in manifest["sources"].items():
        for path in outputs.values():
            ledger.add_source(path, rule)
    ledger.add_source(CLAIMS_FILE, "report", in_report=True)
    if manifest.get("job_resources"):
        ledger.add_source(manifest["job_resources"], "report", in_report=True)
    for page in manifest.get("notebooks", {}).values():
        ledger.add_source(page, "report", in_report=True)
    ledger.add_document(SELF, manifest, "report")
    run = {**manifest, **_by_kind(manifest["sources"])}
    doc = Doc(ledger, f"llm-bytes-up report \u00b7 {manifest['date']}")
    doc.heading(1, "llm-bytes-up report \u00b7 ", ledger.cite(SELF, "date"))
    _summary(doc, run, manifest)
    _model_file(doc, run)
    refused = manifest.get("refused", {})
    for lesson in _course_order([*run["lessons"], *refused]):
        _lesson(doc, lesson, run["lessons"].get(lesson, {}), refused.get(lesson), manifest.get("notebooks", {}).get(lesson))
    _timing(doc, run["timing"], run["lessons"])
    for section in EXTRA_SECTIONS:
        section(doc, manifest)
    _claims_overall(doc, run["lessons"])
    if "files" in manifest:
        _provenance(doc, manifest)
    doc.notes()
    return doc


def rendered_outputs(doc: Doc) -> dict:
    """What the rendering adds to the manifest: each citation (file, key, text), footnote, table, figure."""
    return {
        "citations": [{"id": c.id, "file": c.file, "key": c.key, "format": c.fmt, "text": c.text, "note": c.note}
                      for c in doc.ledger.citations],
        "notes": [{"id": n.id, "file": n.file, "key": n.key, "kind": n.kind} for n in doc.ledger.notes],
        "tables": doc.tables,
        "figures": doc.figures,
    }


def build(run: dict, out_dir: str | Path) -> dict:
    """Write index.html, report.md, manifest.json, claims.csv and notebooks/ for one run; returns the manifest.

    `run` holds: date, started, config, machine, packages, git_describe, sources (every file that
    may be cited, by the rule that wrote it and its output name: {rule: {output name: path}},
    lesson rules named lesson_<lesson id>), refused ({lesson: why it did not run}), and optionally
    job_times ({path: {job_started, job_finished}}, from Snakemake's records).
    Paths are relative to the current directory, the project root; `out_dir` must sit at
    report/<name>/ depth, as the links from the page to the cited files go two folders up.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lessons = _by_kind(run["sources"])["lessons"]
    write_claims(lessons, out_dir / CLAIMS_FILE)
    record = _json(run["sources"]["fetch"]["record"])
    manifest = plain({
        "format": FORMAT,
        "date": run["date"],
        "started": run["started"],
        "report": {"started": run["started"], "finished": None},
        "git_describe": run["git_describe"],
        "config": run["config"],
        "config_sha256": provenance.config_sha256(run["config"]),
        "model": {"record": run["sources"]["fetch"]["record"],
                  **{k: record.get(k) for k in ("name", "source", "sha256", "size")}},
        "machine": run["machine"],
        "packages": run["packages"],
        "sources": run["sources"],
        "refused": run.get("refused", {}),
        "notebooks": write_notebooks(lessons, out_dir),
    })
    if run.get("job_resources"):  # each job's peak memory and wall time (bytesup.report.job_resources)
        job_resources.write_csv(run["job_resources"], out_dir / JOB_RESOURCES_FILE)
        manifest["job_resources"] = JOB_RESOURCES_FILE
    # first pass: which files the page cites
    cited = render(manifest, out_dir).ledger.cited_files()
    job_times = run.get("job_times", {})
    files = []
    for src in cited:
        times = job_times.get(src.path, {})
        files.append({"path": src.path, "sha256": src.sha256, "bytes": src.bytes, "rule": src.rule,
                      "in_report": src.in_report, "job_started": times.get("job_started"),
                      "job_finished": times.get("job_finished")})
    manifest["files"] = files
    manifest["run"] = {
        "outputs_started": _span([f["job_started"] for f in files], min),
        "outputs_finished": _span([f["job_finished"] for f in files], max),
    }
    every = {path for outputs in run["sources"].values() for path in outputs.values()}
    manifest["inputs_not_cited"] = sorted(every - {f["path"] for f in files})
    manifest["report"]["finished"] = provenance.now()
    # the page itself, from the manifest as it will be read back (what verify renders from)
    manifest = json.loads(manifest_text(manifest))
    doc = render(manifest, out_dir)
    if [s.path for s in doc.ledger.cited_files()] != [f["path"] for f in files]:
        raise RuntimeError("the report cites other files on its second pass: its rendering is not deterministic")
    manifest.update(rendered_outputs(doc))
    _write(out_dir / "index.html", doc.render_html())
    _write(out_dir / "report.md", doc.render_md())
    _write(out_dir / "manifest.json", manifest_text(manifest))
    return manifest


def manifest_text(manifest: dict) -> str:
    return json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


READABLE = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH  # 0644: a shared report is readable


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, READABLE)
    os.replace(tmp, path)


# -- publishing: keep an earlier report of the same date, write the archive -------------------


def aside_name(final: Path, archive: Path) -> tuple[Path, Path]:
    """The first free report/<date>.<n>/ and report/<date>.<n>.zip, n = 1, 2, ..."""
    n = 1
    while True:
        folder = final.with_name(f"{final.name}.{n}")
        zipped = archive.with_name(f"{final.name}.{n}.zip")
        if not folder.exists() and not zipped.exists():
            return folder, zipped
        n += 1


def keep_aside(final: Path, archive: Path) -> Path | None:
    """Move an earlier report of this date (folder and archive) to report/<date>.<n>; return where.

    An empty folder (Snakemake creates the output folder before the job runs) is removed.
    """
    has_folder = final.is_dir() and any(final.iterdir())
    if final.is_dir() and not has_folder:
        final.rmdir()
    if not has_folder and not archive.exists():
        return None
    folder, zipped = aside_name(final, archive)
    if has_folder:
        os.replace(final, folder)
    if archive.exists():
        os.replace(archive, zipped)
    return folder


def publish(stage: Path, final: Path, archive: Path) -> Path | None:
    """Put a built report (in `stage`, a sibling of `final`) in place with its archive.

    The archive is written first, from `stage`, beside `archive` as .<name>.building; only once it
    is whole is anything moved. So a failure (a full disk) leaves the earlier report, its archive
    and the folder names as they were: no half-written archive, no report/<date>.<n>/ kept aside
    for a report that never arrived. Returns where an earlier report of the same date was kept.
    """
    staged = archive.with_name(f".{archive.name}.building")
    try:
        write_archive(stage, staged, name=final.name)
        kept = keep_aside(final, archive)
        os.replace(stage, final)
        os.replace(staged, archive)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return kept


def _safe_member(path: str) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"{path}: a cited path must be relative to the project and stay inside it")
    return str(p)


def archive_folder(name: str) -> str:
    """The one folder an archive unpacks into, named after the report (its date): llm-bytes-up-<date>."""
    return f"llm-bytes-up-{name}"


def _add(zf: zipfile.ZipFile, source: Path, member: str) -> None:
    """One file, readable by everyone who unpacks it (0644), whatever its mode here."""
    info = zipfile.ZipInfo.from_file(source, member)
    info.external_attr = (stat.S_IFREG | READABLE) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(source, "rb") as src, zf.open(info, "w") as dst:
        while block := src.read(1 << 20):
            dst.write(block)


def write_archive(report_dir: Path, archive: Path, root: Path = Path("."), name: str | None = None) -> None:
    """llm-bytes-up-<name>/: report/<name>/ (every file of `report_dir`) plus every cited file at its
    project path. `name` is the report's folder name (default: report_dir's). Written to a .tmp
    first, removed if anything fails."""
    name = name or report_dir.name
    manifest = _json(report_dir / "manifest.json")
    top = PurePosixPath(archive_folder(name))
    prefix = top / "report" / name
    tmp = archive.with_name(archive.name + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(p for p in report_dir.rglob("*") if p.is_file()):
                _add(zf, path, str(prefix / path.relative_to(report_dir).as_posix()))
            for entry in manifest["files"]:
                if not entry.get("in_report"):
                    member = _safe_member(entry["path"])
                    _add(zf, root / member, str(top / member))
        os.chmod(tmp, READABLE)
        os.replace(tmp, archive)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

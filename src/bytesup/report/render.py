"""The report's pages from its manifest: index.html (and report.md, its Markdown twin), one data
page per lesson (data/<lesson>.html), data/timing.html and data/run.html.

`render(manifest, report_dir, root)` is a pure function of the manifest and the files it names:
the report job calls it to write the pages, and `bytesup verify` calls it on what was shared and
compares every page byte for byte, so no word, label, caption, link or number can change
unnoticed. Everything the rendering reads besides the files is in the manifest; the words are
this package's (lesson specs, narrative templates, labels.yaml, glossary.yaml), so verify uses
the version that wrote the report (the manifest records it).

index.html, top to bottom: the summary (the model, the machine, the units, the course's numbers
lesson by lesson, the model file), one section per lesson in the course's order
(bytesup.report.lesson_page), timing on this machine, the glossary, the closing section for
maintainers, the footnotes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from bytesup.lessons import registry
from bytesup.report import glossary, lesson_page, sections
from bytesup.report.citations import SELF, Ledger
from bytesup.report.doc import GLOSSARY_PAGE, Doc
from bytesup.report.formats import BYTE_UNITS, bytes_format

INDEX = "index.html"
OUTPUTS = ("citations", "notes", "tables", "figures", "pages")  # what rendering adds to the manifest


@dataclass
class Pages:
    """The rendered report: index (its page and its Markdown twin) and the data pages, one ledger."""

    ledger: Ledger
    index: Doc
    data: dict[str, Doc]  # page path in the report folder -> its Doc (the data pages, the glossary)

    @property
    def docs(self) -> list[Doc]:
        return [self.index, *self.data.values()]

    def files(self) -> dict[str, str]:
        """Every page's text by its path in the report folder."""
        out = {INDEX: self.index.render_html(), "report.md": self.index.render_md()}
        out.update({page: doc.render_html() for page, doc in self.data.items()})
        return out

    def outputs(self) -> dict:
        """What the rendering adds to the manifest: each citation (page, file, key, text), footnote,
        table and figure, and the data pages."""
        L = self.ledger
        return {
            "citations": [
                {
                    "id": c.id,
                    "page": c.page,
                    "file": c.file,
                    "key": c.key,
                    "format": c.fmt,
                    "text": c.text,
                    "note": c.note,
                }
                for c in L.citations
            ],
            "notes": [{"page": n.page, "id": n.id, "file": n.file, "key": n.key, "kind": n.kind} for n in L.notes],
            "tables": [t for d in self.docs for t in d.tables],
            "figures": [f for d in self.docs for f in d.figures],
            "pages": list(self.data),
        }


def quantity_formats(manifest: dict) -> dict[str, dict[str, str]]:
    """One format per quantity (see citations.Ledger): a lesson's headline formats apply in its folder
    (a size in bytes, kB, MB or GB always by the bytes rule), the timing tables' everywhere; the rest
    follow formats.format_value's one rule."""
    formats: dict[str, dict[str, str]] = {"": {}}
    for _, key, fmt in sections.TIMING_HEADLINES + sections.DECODE_HEADLINES + sections.TIMING_CONTEXT:
        if fmt:
            formats[""][key.rsplit("/", 1)[-1]] = fmt
    for rule, outputs in manifest["sources"].items():
        spec = registry().get(rule.removeprefix("lesson_")) if rule.startswith("lesson_") else None
        if spec is not None and "metrics_json" in outputs:
            folder = str(PurePosixPath(outputs["metrics_json"]).parent)
            formats[folder] = {
                h.key: bytes_format(h.unit) if h.unit in BYTE_UNITS else h.fmt
                for h in spec.headlines
                if h.fmt or h.unit in BYTE_UNITS
            }
    return formats


def by_kind(sources: dict) -> dict:
    """The run's files by what they are, from the rules' output names (never from their paths)."""
    cpu, gpu, decode = (sources.get(rule, {}) for rule in ("timing_cpu", "timing_gpu", "timing_decode"))
    timing = {
        "sweep_png": sources.get("timing_figure", {}).get("figure"),
        "cpu_summary": cpu.get("summary"),
        "sweep_csv": cpu.get("sweep"),
        "stream_csv": cpu.get("stream"),
        "dequant_csv": cpu.get("dequant"),
        "gpu_summary": gpu.get("summary"),
        "gpu_sweep_csv": gpu.get("sweep"),
        "gpu_stream_csv": gpu.get("stream"),
        "decode_summary": decode.get("summary"),
        "prefill_csv": decode.get("prefill"),
    }
    lessons = {rule.removeprefix("lesson_"): outputs for rule, outputs in sources.items() if rule.startswith("lesson_")}
    return {
        "model_record": sources["fetch"]["record"],
        "timing": {k: v for k, v in timing.items() if v},
        "lessons": {lesson: lessons[lesson] for lesson in course_order(lessons)},
    }


def course_order(lessons) -> list[str]:
    """Lesson ids in the course's order (the registry's); ids it does not know come last, sorted."""
    known = list(registry())
    return sorted(lessons, key=lambda x: (known.index(x) if x in known else len(known), x))


def render(manifest: dict, report_dir, root=".") -> Pages:
    """Every page from the manifest and the files it names (report and verify both call this).

    `report_dir` holds the files written into the report folder, `root` the project's (or an
    unpacked archive's) files. Raises CitationError when a cited file or key is missing.
    """
    ledger = Ledger(report_dir=report_dir, root=root, formats=quantity_formats(manifest))
    for rule, outputs in manifest["sources"].items():
        for path in outputs.values():
            ledger.add_source(path, rule)
    ledger.add_source(sections.CLAIMS_FILE, "report", in_report=True)
    if manifest.get("job_resources"):
        ledger.add_source(manifest["job_resources"], "report", in_report=True)
    for page in manifest.get("notebooks", {}).values():
        ledger.add_source(page, "report", in_report=True)
    ledger.add_document(SELF, manifest, "report")
    run = {**manifest, **by_kind(manifest["sources"])}
    words = glossary.load()
    refused = manifest.get("refused", {})
    notebooks = manifest.get("notebooks", {})

    def page(path: str, title: str) -> Doc:
        ledger.page = path
        return Doc(ledger, title, page=path, glossary=words)

    index = page(INDEX, f"llm-bytes-up report \u00b7 {manifest['date']}")
    index.heading(1, "llm-bytes-up report \u00b7 ", ledger.cite(SELF, "date"))
    sections.summary(index, run, manifest)
    for lesson in course_order([*run["lessons"], *refused]):
        lesson_page.section(index, lesson, run["lessons"].get(lesson, {}), refused.get(lesson), notebooks.get(lesson))
    if run["timing"]:
        sections.timing(index, run["timing"], run["lessons"])
    sections.maintainers(index, run, manifest)
    index.notes()

    data = {}
    for lesson, files in run["lessons"].items():
        path = lesson_page.data_page(lesson)
        data[path] = page(path, f"{lesson_page.title(lesson)} \u00b7 data")
        lesson_page.write_data_page(data[path], lesson, files, notebooks.get(lesson))
    if run["timing"]:
        data[sections.TIMING_PAGE] = page(sections.TIMING_PAGE, "Timing on this machine \u00b7 data")
        sections.write_timing_page(data[sections.TIMING_PAGE], run["timing"])
    data[sections.RUN_PAGE] = page(sections.RUN_PAGE, "The run \u00b7 data")
    sections.write_run_page(data[sections.RUN_PAGE], run, manifest)
    data[GLOSSARY_PAGE] = page(GLOSSARY_PAGE, "Words used")
    sections.glossary(data[GLOSSARY_PAGE], words)
    ledger.page = INDEX
    return Pages(ledger, index, data)

"""Building the dated report: its manifest, then its pages (report/<date>/).

`build()` is given the run's outputs (each with the rule that wrote it) and writes into a folder:
manifest.json, index.html and report.md, data/<page>.html (each lesson's data page, timing, the
run), claims.csv (every lesson's claims in one table), job_resources.csv, and notebooks/<lesson>.html
(each executed notebook, readable in a browser). Every number a page prints is a Citation read
from one of those files, or from the manifest itself for facts about the run (machine, versions,
times).

The flow goes one way: the manifest is built here (the run's facts, the files each rule wrote),
bytesup.report.render draws every page from it (lesson_page for a lesson's section and data page,
sections for the rest), and bytesup.report.publish puts the folder in place with its archive.
Rendering runs twice: once to learn which files the pages cite (their hashes go into the
manifest), once more from the manifest as it will be read back, which is what `bytesup verify`
renders from.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
from pathlib import Path

from bytesup.lessons.claims import COLUMNS as CLAIM_COLUMNS
from bytesup.report import job_resources, notebook_pages, provenance
from bytesup.report.lesson_page import title
from bytesup.report.publish import READABLE
from bytesup.report.render import by_kind, render
from bytesup.report.sections import CLAIMS_FILE
from bytesup.run.files import plain

FORMAT = "bytesup-report/3"
REPORT_FILES = ("index.html", "report.md", "manifest.json", CLAIMS_FILE)  # besides notebooks/ and data/ pages
NOTEBOOKS = "notebooks"  # inside the report folder: each lesson's executed notebook as HTML
JOB_RESOURCES_FILE = "job_resources.csv"  # inside the report folder: each job's time and memory


def write_claims(lessons: dict, path: Path) -> None:
    """Every lesson's claims.csv, one after the other, in one table (the report cites its counts)."""
    columns, rows = list(CLAIM_COLUMNS), []
    for files in lessons.values():
        if "claims_csv" in files:
            with open(files["claims_csv"], newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                lesson_rows = list(reader)
                columns += [c for c in reader.fieldnames or () if c not in columns]
            rows += lesson_rows
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    os.chmod(path, READABLE)


def _span(times: list[str | None], pick) -> str | None:
    parsed = [datetime.datetime.fromisoformat(t) for t in times if t]
    return pick(parsed).isoformat(timespec="seconds") if parsed else None


def notebook_page(lesson: str) -> str:
    """Where a lesson's executed notebook, as HTML, sits inside the report folder."""
    return f"{NOTEBOOKS}/{lesson}.html"


def section_link(lesson: str) -> str:
    """From a notebook page back to its lesson's section of the report."""
    return f"../index.html#{lesson}"


def write_notebooks(lessons: dict, out_dir: Path) -> dict[str, str]:
    """Each lesson's executed notebook rendered as a page of its own; {lesson: path in the report folder}."""
    pages = {}
    for lesson, files in lessons.items():
        if files.get("notebook"):
            page = notebook_page(lesson)
            (out_dir / NOTEBOOKS).mkdir(parents=True, exist_ok=True)
            _write(out_dir / page, notebook_pages.render(files["notebook"], title(lesson), section_link(lesson)))
            pages[lesson] = page
    return pages


def build(run: dict, out_dir: str | Path) -> dict:
    """Write the report's files for one run into `out_dir`; returns the manifest.

    `run` holds: date, started, config, machine, packages, git_describe, sources (every file that
    may be cited, by the rule that wrote it and its output name: {rule: {output name: path}},
    lesson rules named lesson_<lesson id>), refused ({lesson: why it did not run}), and optionally
    job_times ({path: {job_started, job_finished}}, from Snakemake's records) and job_resources.
    Paths are relative to the current directory, the project root; `out_dir` must sit at
    report/<name>/ depth, as the links from the pages to the cited files go two folders up.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lessons = by_kind(run["sources"])["lessons"]
    write_claims(lessons, out_dir / CLAIMS_FILE)
    record = json.loads(Path(run["sources"]["fetch"]["record"]).read_text(encoding="utf-8"))
    manifest = plain(
        {
            "format": FORMAT,
            "date": run["date"],
            "started": run["started"],
            "report": {"started": run["started"], "finished": None},
            "git_describe": run["git_describe"],
            "config": run["config"],
            "config_sha256": provenance.config_sha256(run["config"]),
            "model": {
                "record": run["sources"]["fetch"]["record"],
                **{k: record.get(k) for k in ("name", "source", "sha256", "size")},
            },
            "machine": run["machine"],
            "packages": run["packages"],
            "sources": run["sources"],
            "refused": run.get("refused", {}),
            "notebooks": write_notebooks(lessons, out_dir),
        }
    )
    if run.get("job_resources"):  # each job's peak memory and wall time (bytesup.report.job_resources)
        job_resources.write_csv(run["job_resources"], out_dir / JOB_RESOURCES_FILE)
        manifest["job_resources"] = JOB_RESOURCES_FILE
    # first pass: which files the pages cite
    cited = render(manifest, out_dir).ledger.cited_files()
    job_times = run.get("job_times", {})
    files = []
    for src in cited:
        times = job_times.get(src.path, {})
        files.append(
            {
                "path": src.path,
                "sha256": src.sha256,
                "bytes": src.bytes,
                "rule": src.rule,
                "in_report": src.in_report,
                "job_started": times.get("job_started"),
                "job_finished": times.get("job_finished"),
            }
        )
    manifest["files"] = files
    manifest["run"] = {
        "outputs_started": _span([f["job_started"] for f in files], min),
        "outputs_finished": _span([f["job_finished"] for f in files], max),
    }
    every = {path for outputs in run["sources"].values() for path in outputs.values()}
    manifest["inputs_not_cited"] = sorted(every - {f["path"] for f in files})
    manifest["report"]["finished"] = provenance.now()
    # the pages themselves, from the manifest as it will be read back (what verify renders from)
    manifest = json.loads(manifest_text(manifest))
    pages = render(manifest, out_dir)
    if [s.path for s in pages.ledger.cited_files()] != [f["path"] for f in files]:
        raise RuntimeError("the report cites other files on its second pass: its rendering is not deterministic")
    manifest.update(pages.outputs())
    for name, text in pages.files().items():
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        _write(out_dir / name, text)
    _write(out_dir / "manifest.json", manifest_text(manifest))
    return manifest


def manifest_text(manifest: dict) -> str:
    return json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, READABLE)
    os.replace(tmp, path)

"""The report rule in the DAG (tiny synthetic model): the dated folder and archive verify, a
second run on the same date keeps the first, `snakemake -n` then has nothing to do, and
`snakemake --report` builds Snakemake's own report with captions that quote the real
parameters."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import TINY_DATE, copy_finished
from workflow_helpers import ROOT, env_with_venv, snakemake

from bytesup.report.verify import verify_path

DATE = TINY_DATE


@pytest.fixture(scope="module")
def project(finished_tiny, tmp_path_factory):
    """A copy of the finished tiny project: these tests run the report again."""
    return copy_finished(finished_tiny, tmp_path_factory.mktemp("report") / "project")


def bytesup(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cli = Path(sys.executable).with_name("bytesup")
    return subprocess.run([str(cli), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_dated_report_and_its_archive_verify_with_the_console_script(project):
    report = project / "report" / DATE
    assert sorted(p.name for p in report.iterdir()) == [
        "claims.csv",
        "index.html",
        "job_resources.csv",
        "manifest.json",
        "notebooks",
        "report.md",
    ]
    jobs = {row["job"]: row for row in csv.DictReader((report / "job_resources.csv").open())}
    assert {"fetch", "extract", "timing_cpu", "lesson_03_ffn_by_hand"} <= set(jobs)  # each job's benchmark file
    assert all(row["within_mem_mb"] == "True" for row in jobs.values() if row["max_rss_mb"]), jobs
    for target in (f"report/{DATE}", f"report/{DATE}.zip"):
        proc = bytesup("verify", target, cwd=project)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(proc.stdout.splitlines()) == 1 and proc.stdout.startswith("verify: OK: ")
    manifest = json.loads((report / "manifest.json").read_text())
    rules = {f["rule"] for f in manifest["files"]}
    assert {"fetch", "timing_cpu", "timing_gpu", "lesson_03_ffn_by_hand", "report"} <= rules
    assert all(f["job_finished"] for f in manifest["files"] if not f["in_report"])  # Snakemake's own record
    assert manifest["run"]["outputs_started"] <= manifest["report"]["started"] <= manifest["report"]["finished"]


def test_each_lesson_reads_like_the_course_and_links_its_notebook_page(project):
    from bytesup.lessons import registry

    report = project / "report" / DATE
    html = (report / "index.html").read_text()
    manifest = json.loads((report / "manifest.json").read_text())
    toc = re.search(r'<nav class="toc"[^>]*>(.*?)</nav>', html, re.S).group(1)
    anchors = re.findall(r'href="#([^"]+)"', toc)
    ran = [lesson for lesson in registry() if f"lesson_{lesson}" in manifest["sources"]]
    assert [a for a in anchors if a in registry()] == ran  # the course's order
    for lesson in ran:
        section = html.split(f'<h2 id="{lesson}">', 1)[1].split("<h2 ", 1)[0]
        # a narrative with numbers cited inline, before the figures and tables
        first = re.search(r"<p>(.*?)</p>", section.split("<p>From ", 1)[1].split("</p>", 1)[1], re.S).group(1)
        assert '<a class="cite"' in first, (lesson, first[:200])
        page = manifest["notebooks"][lesson]
        assert f'<a href="{page}">{Path(page).name}</a>' in section
        text = (report / page).read_text()
        assert "Content-Security-Policy" in text and "<script" not in text.lower()
    # headlines by their labels and units, no scientific notation for a count or bytes
    assert "01_gguf_on_disk: " not in html and not re.search(r">\d\.\d+e\+\d+<", html)
    # every claims table says what its verdicts mean
    assert (
        html.count('<dl class="verdicts">')
        == sum(1 for x in ran if "claims_csv" in manifest["sources"][f"lesson_{x}"]) + 1
    )


def test_snakemake_report_works_as_the_readme_writes_it(project):
    assert "`snakemake --report report.html`" in (ROOT / "README.md").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--report", "report.html"],
        cwd=project,
        env=env_with_venv(),
        capture_output=True,
        text=True,
        timeout=600,
    )  # no --cores
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"dated report of {DATE} for model" in (project / "report.html").read_text()


def test_a_tampered_output_fails_verify(project, tmp_path):
    with zipfile.ZipFile(project / "report" / f"{DATE}.zip") as zf:
        zf.extractall(tmp_path)
    unpacked = tmp_path / f"llm-bytes-up-{DATE}"  # the archive's one folder
    metrics = unpacked / "results/tiny/lessons/03_ffn_by_hand/metrics.json"
    data = json.loads(metrics.read_text())
    data["x_rms"] = data["x_rms"] * 2
    metrics.write_text(json.dumps(data))
    proc = bytesup("verify", f"report/{DATE}", cwd=unpacked)
    assert proc.returncode == 1
    assert "results/tiny/lessons/03_ffn_by_hand/metrics.json: sha256" in proc.stdout
    assert "03_ffn_by_hand/metrics.json \u2192 x_rms): the file gives" in proc.stdout


@pytest.mark.slow  # a second report run: CI (make test-slow)
def test_a_second_run_on_the_same_date_keeps_the_first(project):
    first = (project / "report" / DATE / "manifest.json").read_text()
    snakemake(project, "--forcerun", "report")
    kept = project / "report" / f"{DATE}.1"
    assert (kept / "manifest.json").read_text() == first
    assert verify_path(project / "report" / f"{DATE}.1.zip").ok
    assert verify_path(project / "report" / DATE).ok
    assert (
        json.loads((project / "report" / DATE / "manifest.json").read_text())["report"]["started"]
        >= json.loads(first)["report"]["started"]
    )
    proc = snakemake(project, "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_snakemakes_own_report_quotes_the_real_parameters(project):
    snakemake(project, "--report", "snakemake-report.zip")
    with zipfile.ZipFile(project / "snakemake-report.zip") as zf:
        names = zf.namelist()
        page = zf.read(next(n for n in names if n.endswith("/report.html"))).decode()
    assert any(n.endswith("/index.html") for n in names)  # the dated report is in it
    record = json.loads((project / "resources/models/tiny.json").read_text())
    assert f"dated report of {DATE} for model" in page and record["sha256"] in page
    figures = [n for n in names if n.endswith(".png")]
    assert {"gate_histogram.png", "flops_per_token.png"} <= {Path(n).name for n in figures}
    assert "gate values g for the followed token" in page  # the lesson's figure captions, from its SPEC

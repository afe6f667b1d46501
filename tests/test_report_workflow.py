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
        "data",
        "glossary.html",
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


def test_each_lesson_reads_like_the_course_and_links_its_data_page_and_notebook(project):
    from bytesup.lessons import registry

    report = project / "report" / DATE
    html = (report / "index.html").read_text()
    manifest = json.loads((report / "manifest.json").read_text())
    toc = re.search(r'<nav class="toc"[^>]*>(.*?)</nav>', html, re.S).group(1)
    anchors = re.findall(r'href="#([^"]+)"', toc)
    ran = [lesson for lesson in registry() if f"lesson_{lesson}" in manifest["sources"]]
    assert [a for a in anchors if a in registry()] == ran  # the course's order
    for lesson in ran:
        spec = registry()[lesson]
        section = html.split(f'<h2 id="{lesson}">', 1)[1].split("<h2 ", 1)[0]
        # the course beside this model first (where the course prints numbers), then the narrative
        # with its numbers cited inline, before the figures
        claims = manifest["sources"][f"lesson_{lesson}"]["claims_csv"]
        compared = "<caption>The course&#x27;s numbers beside this model&#x27;s" in section
        assert compared == bool((project / claims).read_text().count("\n") > 1), lesson
        paragraphs = re.findall(r"<p>(.*?)</p>", section, re.S)
        assert any('<a class="cite"' in p for p in paragraphs), lesson
        if "<figure>" in section:
            assert section.index('<a class="cite"') < section.index("<figure>")
        # at most two short tables besides the comparison; everything else on the data page
        assert section.count("<table") <= 1 + len(spec.key_tables) and section.count("<tr>") <= 9 + 13 * 2
        page = f"data/{lesson}.html"
        assert f'<a href="{page}">its data page</a>' in section and page in manifest["pages"]
        data = (report / page).read_text()
        notebook = manifest["notebooks"][lesson]
        assert f'<a href="../{notebook}">the executed notebook</a>' in data
        assert f'<a href="../index.html#{lesson}">its section of the report</a>' in data
        text = (report / notebook).read_text()
        assert "Content-Security-Policy" in text and "<script" not in text.lower()
        assert f'<a href="../index.html#{lesson}">' in text  # back to its section
    # a claim the course prints in millions is compared in millions, both sides (235 beside 234.9)
    background = html.split('<h2 id="00_vectors_neurons_nonlinearity">', 1)[1].split("</table>", 1)[0]
    assert '<td class="v num" data-label="this model">234.9</td>' in background and "234,881,024" not in background
    # headlines by their labels and units, no scientific notation for a count or bytes
    assert "01_gguf_on_disk: " not in html and not re.search(r">\d\.\d+e\+\d+<", html)
    # every data page with claims says what its verdicts mean; the page itself links the glossary
    with_claims = [
        x for x in ran if (project / manifest["sources"][f"lesson_{x}"]["claims_csv"]).read_text().count("\n") > 1
    ]
    for lesson in with_claims:
        assert (report / f"data/{lesson}.html").read_text().count('<dl class="verdicts">') == 1
    assert '<a class="term" href="glossary.html#g-' in html
    glossary = (report / "glossary.html").read_text()
    for term in re.findall(r'href="glossary\.html#(g-[a-z0-9-]+)"', html):
        assert f'<dt id="{term}">' in glossary


def test_every_table_has_human_headers_and_a_caption_in_words(project):
    """No file column name (dims_gguf, info_bytes, time_over_n1) and no file name as a caption, on
    any page: every column of every table the pages show is named in labels.yaml."""
    from bytesup.report.tables import labels

    report = project / "report" / DATE
    manifest = json.loads((report / "manifest.json").read_text())
    words, model = labels(), manifest["config"]["model"]
    unlabelled, captions = set(), []
    for table in manifest["tables"]:
        captions.append(table["caption"])
        for path in table["files"]:
            if path.endswith(".csv"):
                with open(project / path if not path.startswith(("claims.csv", "job_")) else report / path) as fh:
                    columns = next(csv.reader(fh))
                unlabelled |= {f"{Path(path).name}: {c}" for c in columns if c != model and words.unlabelled(path, c)}
        assert not [h for h in table["header"] if "_" in h], table["header"]
    assert not unlabelled, f"label these columns in src/bytesup/report/labels.yaml: {sorted(unlabelled)}"
    assert captions and not [c for c in captions if re.search(r"[a-z0-9]_[a-z0-9]|\.(csv|json|png)\b", c)], captions


def test_no_narrative_sentence_lacks_its_number(project):
    """Every number a lesson's narrative cites is a key its metrics.json holds (null where this model
    has none, such as llama.cpp's when it did not run): a misspelt or renamed key would drop its
    sentence without a word."""
    from bytesup.lessons import registry
    from bytesup.report.lesson_page import narrative_template, template_slots

    manifest = json.loads((project / "report" / DATE / "manifest.json").read_text())
    missing = []
    for lesson in registry():
        files = manifest["sources"].get(f"lesson_{lesson}", {})
        data = {
            name: json.loads((project / path).read_text()) for name, path in files.items() if path.endswith(".json")
        }
        for name, key in template_slots(narrative_template(lesson)):
            if name in data and key.split("/")[0] not in data[name]:
                missing.append(f"{lesson}: {{{key}}}")
            elif name not in files:
                missing.append(f"{lesson}: {{{name}:{key}}}")
    assert not missing, missing


def same_value_written_two_ways(report: Path, root: Path) -> dict[float, set[str]]:
    """{value: its texts} for every measured number (a float) that the pages write more than one way."""
    from bytesup.report.citations import SELF, lookup, parse

    manifest = json.loads((report / "manifest.json").read_text())
    in_report = {f["path"] for f in manifest["files"] if f["in_report"]}
    parsed, texts = {}, {}
    for c in manifest["citations"]:
        if c["file"] == SELF or c["format"] in ("json", "text") or (c["format"] or "").startswith("cut:"):
            continue
        if c["file"].endswith("claims.csv") and c["key"].endswith(("/published", "/measured")):
            continue  # a claim's numbers are in the unit the course prints them in (a fraction, M numbers)
        if c["file"] not in parsed:
            parsed[c["file"]] = parse((report if c["file"] in in_report else root) / c["file"])
        value = lookup(parsed[c["file"]], c["key"], c["file"], c["file"].endswith(".csv"))
        if isinstance(value, float) and value == value and len(f"{abs(value):.8g}".strip("0.").replace(".", "")) > 4:
            texts.setdefault(float(f"{value:.12g}"), set()).add(c["text"])  # a measured number, not a round one
    return {value: shown for value, shown in texts.items() if len(shown) > 1}


def test_one_quantity_reads_the_same_everywhere(project):
    """The same measured number is written one way on every page, whichever lesson, table or
    sentence cites it (2.0507 and 2.051 for one length; 0.3366 beside 33.7 % for one share)."""
    report = project / "report" / DATE
    assert same_value_written_two_ways(report, project) == {}


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


@pytest.mark.slow  # seconds; tests/test_verify.py checks each kind of tampering quickly
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

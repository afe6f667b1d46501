"""The dated report from a run's files: sections, citations for every number, provenance,
hostile text kept inert, the archive, and a second report of the same date kept aside."""

from __future__ import annotations

import datetime
import json
import re
import zipfile
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

import pytest
from report_helpers import (
    DATE,
    HOSTILE,
    LESSON,
    MODEL,
    build_and_publish,
    chdir,
    fake_run,
    md_plain,
)

from bytesup.lessons import registry
from bytesup.report import build, lesson_page, provenance, publish, sections
from bytesup.report.citations import SELF
from bytesup.report.doc import esc_md
from bytesup.report.verify import verify_path
from bytesup.run.files import sha256_file


@pytest.fixture
def built(tmp_path):
    root = tmp_path / "project"
    run = fake_run(root)
    return root, run, build_and_publish(root, run)


class _Text(HTMLParser):
    """Text of the page outside cited numbers, footnote markers, the footnotes, headers and style."""

    SKIP = {"style", "title", "th", "caption"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.out: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        mark = tag in self.SKIP or "cite" in cls or "ref" in cls or "notes" in cls or "v" in cls or tag == "nav"
        self.stack.append("skip" if mark else tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if "skip" not in self.stack:
            self.out.append(data)


def page_text(path: Path) -> str:
    """A page's text, tags removed, spaces collapsed."""
    import html as html_lib

    main = path.read_text().split("<main>", 1)[1]
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", main)).split())


def uncited_text(html: str) -> str:
    parser = _Text()
    parser.feed(html.split("<body>", 1)[1])
    return "".join(parser.out)


def _root(report_dir: Path) -> Path:
    return report_dir.parent.parent


def labels() -> list[str]:
    """Words the report's code writes: quantity labels, titles, captions (numbers there name things)."""
    out = [label for label, _, _ in sections.TIMING_HEADLINES + sections.TIMING_CONTEXT + sections.PROVENANCE_FACTS]
    out += [label for label, _, _ in sections.DECODE_HEADLINES]
    for spec in registry().values():
        out += [spec.heading, spec.source, spec.id, *(h.text for h in spec.headlines), *spec.figures.values()]
    return sorted(out, key=len, reverse=True)


def test_every_number_in_the_text_is_a_citation(built):
    _, run, report_dir = built
    text = uncited_text((report_dir / "index.html").read_text())
    metric_keys = list(json.loads((_root(report_dir) / run["sources"][f"lesson_{LESSON}"]["metrics_json"]).read_text()))
    # a lesson the registry does not know is labelled by its metric keys, names that may hold digits
    from bytesup.model.arch import recipe_summary

    names = [
        LESSON,
        "gate_histogram.png",
        "flops_per_token.csv",
        "sha256",
        "manifest.json",
        "BLAS 0",
        "files/<row>/<column>",
        recipe_summary("llama"),
        sections.UNITS,
    ]  # the recipe: words of the architecture table
    for label in labels() + sorted(metric_keys, key=len, reverse=True) + names:
        text = text.replace(label, "")
    text = re.sub(r"[a-z_]+/[a-z_/0-9]+", "", text)  # manifest keys shown beside provenance values
    assert not re.search(r"\d", text), re.findall(r".{0,40}\d.{0,20}", text)[:5]


def test_sections_and_their_numbers(built):
    _, run, report_dir = built
    html = (report_dir / "index.html").read_text()
    for anchor in ("summary", LESSON, "timing", "maintainers", "notes"):
        assert f'id="{anchor}"' in html
    md = md_plain((report_dir / "report.md").read_text())
    assert "- GPU timing: not measured: no CUDA device[^" in md  # for maintainers, not in the lessons
    assert "llama.cpp decode: not measured: llama-cpp-python is not installed[^" in md
    manifest = json.loads((report_dir / "manifest.json").read_text())
    texts = {(c["file"], c["key"]): c["text"] for c in manifest["citations"]}
    claims = f"results/{MODEL}/lessons/{LESSON}/claims.csv"
    assert texts[(claims, "count/status=reproduced")] == "2"
    assert texts[(claims, "count/status=specimen differs")] == "1"
    assert texts[(claims, "count/status=not reproduced")] == "0"
    # every lesson's claims, in the report's own claims.csv, counted lesson by lesson
    assert texts[("claims.csv", "count/status=reproduced")] == "2"
    assert texts[("claims.csv", f"count/lesson={LESSON}&status=specimen differs")] == "1"
    assert (
        texts[(f"results/{MODEL}/lessons/{LESSON}/metrics.json", "x_rms")] == "0.08545"
    )  # no format given: four significant digits
    assert texts[(f"results/timing/{MODEL}/cpu/summary.json", "matvec_fraction_of_copy")] == "76.0 %"
    assert texts[(SELF, "machine/cpu_model")] == "Test CPU"
    gguf = f"results/{MODEL}/gguf"
    assert texts[(f"{gguf}/metadata.json", "metadata/llama.block_count")] == "2"
    assert texts[(f"{gguf}/metadata.json", "metadata/general.name")] == HOSTILE
    assert texts[(f"{gguf}/tensors.csv", "rows")] == "3"
    assert texts[(f"{gguf}/extract.json", "gguf/sha256")] == "ab" * 32
    # a long table shows its first rows on the lesson's data page and cites how many there are
    table = f"results/{MODEL}/lessons/{LESSON}/flops_per_token.csv"
    assert texts[(table, "rows")] == "210"
    rows = lesson_page.DATA_ROWS
    assert (table, f"{rows - 1}/flops") in texts and (table, f"{rows}/flops") not in texts
    data = (report_dir / lesson_page.data_page(LESSON)).read_text()
    assert "The table shows the file&#x27;s first rows; it holds all " in data


def test_citation_markup_links_the_file_and_names_key_sha_and_rule(built):
    _, _, report_dir = built
    manifest = json.loads((report_dir / "manifest.json").read_text())
    html = (report_dir / "index.html").read_text()
    record = f"resources/models/{MODEL}.json"
    entry = next(f for f in manifest["files"] if f["path"] == record)
    tip = f"{record} \u2192 name \u00b7 sha256 {entry['sha256'][:12]} \u00b7 rule fetch"
    # a number in running text (here the summary's first sentence) links to its file, relative to
    # index.html, shows file, key and hash on hover or focus (a link is focusable), and has its footnote
    link = re.search(
        rf'<a class="cite" href="([^"]+)" data-tip="{re.escape(tip)}">{MODEL}</a><a class="ref" href="#n(\d+)">\2</a>',
        html,
    )
    assert link and link.group(1) == f"../../{record}"
    assert (report_dir / link.group(1)).resolve() == (report_dir.parent.parent / record).resolve()
    note = re.search(rf'<li id="n{link.group(2)}"[^>]*>([^<]*)</li>', html).group(1)
    assert note == f"{record} \u2192 name (sha256 {entry['sha256'][:12]}, rule fetch)"
    md = (report_dir / "report.md").read_text()
    assert f'[{MODEL}](<../../{record}> "{esc_md(tip)}")[^{link.group(2)}]' in md
    assert f"[^{link.group(2)}]: {esc_md(note)}" in md
    # a data page links the same file one folder further up, and numbers its own footnotes from 1
    data = (report_dir / lesson_page.data_page(LESSON)).read_text()
    metrics = f"results/{MODEL}/lessons/{LESSON}/metrics.json"
    assert f'<a href="../../../{metrics}">JSON</a><a class="ref" href="#n1">1</a>' in data
    assert '<li id="n1" value="1">' in data
    # the footnotes are folded, the page has a table of contents in the course's order
    assert re.search(r'<details class="notes"><summary>\d+ footnotes', html)
    toc = re.search(r'<nav class="toc"[^>]*>(.*?)</nav>', html).group(1)
    assert re.findall(r'href="#([^"]+)"', toc) == ["summary", LESSON, "timing", "maintainers", "notes"]


def test_manifest_holds_the_provenance(built):
    root, run, report_dir = built
    m = json.loads((report_dir / "manifest.json").read_text())
    assert m["git_describe"] == "abc1234-dirty"
    assert m["config"] == run["config"] and m["config_sha256"] == provenance.config_sha256(run["config"])
    assert m["model"] == {
        "record": f"resources/models/{MODEL}.json",
        "name": MODEL,
        "source": "path",
        "sha256": "ab" * 32,
        "size": 22080,
    }
    for key in ("python", "os", "cpu_model", "cores", "memory_bytes", "blas", "gpus", "load_average"):
        assert key in m["machine"]
    assert m["packages"]["snakemake"] == "9.0"
    assert m["report"]["started"] == "2026-01-02T10:00:00+00:00" and m["report"]["finished"]
    assert m["run"] == {"outputs_started": "2026-01-02T09:00:00+00:00", "outputs_finished": "2026-01-02T09:01:00+00:00"}
    paths = {f["path"] for f in m["files"]}
    every = {path for outputs in run["sources"].values() for path in outputs.values()}
    assert every <= paths | set(m["inputs_not_cited"])
    for f in m["files"]:
        base = report_dir if f["in_report"] else root
        assert sha256_file(base / f["path"]) == f["sha256"]
        assert (base / f["path"]).stat().st_size == f["bytes"]
        assert f["rule"]
    assert {"claims.csv"} == {f["path"] for f in m["files"] if f["in_report"]}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_hostile_text_is_inert(built):
    _, _, report_dir = built
    html = (report_dir / "index.html").read_text()
    assert "<script" not in html.lower()
    parser = _Tags()
    parser.feed(html)
    tags = parser.tags
    assert {t for t, _ in tags} <= {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "h1",
        "h2",
        "h3",
        "p",
        "span",
        "a",
        "table",
        "caption",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "figure",
        "img",
        "figcaption",
        "ol",
        "li",
        "ul",
        "div",
        "nav",
        "main",
        "strong",
        "details",
        "summary",
        "dl",
        "dt",
        "dd",
    }
    assert not [(t, a) for t, a in tags for name in a if name.startswith("on")]
    hrefs = [a["href"] for t, a in tags if "href" in a]
    # links go to an anchor or to a file beside the report, relative: no scheme, no host, no absolute path
    assert hrefs and all(h.startswith("#") or not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|/", h) for h in hrefs)
    assert all(a["src"].startswith("data:image/png;base64,") for t, a in tags if "src" in a)
    assert [a.get("content") for t, a in tags if t == "meta" and a.get("http-equiv")] == [
        "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
    ]
    md = (report_dir / "report.md").read_text()
    links = re.findall(r'\]\(<([^>]+)>(?: "(?:\\.|[^"\\])*")?\)', md)
    assert links and not [t for t in links if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|/", t)]
    stripped = re.sub(r'\]\(<[^>]+>(?: "(?:\\.|[^"\\])*")?\)', "", md)
    assert "<" not in stripped.replace("&lt;", "") and "](" not in stripped
    assert len(re.findall(r"!\[", md)) == 1  # the one figure


def test_hostile_text_is_shown_not_dropped(built):
    _, _, report_dir = built
    import html as html_lib

    page = report_dir / "data" / "run.html"  # the model file's facts, its name among them
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
    assert HOSTILE in text


def test_archive_holds_the_report_and_every_cited_file(built):
    root, _, report_dir = built
    manifest = json.loads((report_dir / "manifest.json").read_text())
    with zipfile.ZipFile(root / "report" / f"{DATE}.zip") as zf:
        infos = zf.infolist()
    names = {i.filename for i in infos}
    top = f"llm-bytes-up-{DATE}"  # the archive unpacks into one folder, named after the report
    assert {n.split("/")[0] for n in names} == {top}
    assert all((i.external_attr >> 16) & 0o777 == 0o644 for i in infos)  # readable by whoever unpacks it
    assert {f"{top}/report/{DATE}/{name}" for name in (*build.REPORT_FILES, *manifest["pages"])} <= names
    assert {f"{top}/{f['path']}" for f in manifest["files"] if not f["in_report"]} <= names
    for fig in manifest["figures"]:
        target = PurePosixPath(f"{top}/report/{DATE}") / fig["md_link"]
        parts = []
        for part in target.parts:
            parts = parts[:-1] if part == ".." else parts + [part]
        assert "/".join(parts) in names  # the Markdown's relative link resolves inside the archive


def test_a_second_report_of_the_same_date_keeps_the_first(tmp_path):
    root = tmp_path / "project"
    run = fake_run(root)
    first = build_and_publish(root, run)
    first_html = (first / "index.html").read_text()
    run["started"] = "2026-01-02T11:00:00+00:00"
    build_and_publish(root, run)
    kept = root / "report" / f"{DATE}.1"
    assert (kept / "index.html").read_text() == first_html
    assert (root / "report" / f"{DATE}.1.zip").is_file()
    build_and_publish(root, run)
    assert (root / "report" / f"{DATE}.2" / "manifest.json").is_file()
    assert sorted(p.name for p in (root / "report").iterdir()) == [
        DATE,
        f"{DATE}.1",
        f"{DATE}.1.zip",
        f"{DATE}.2",
        f"{DATE}.2.zip",
        f"{DATE}.zip",
    ]
    for name in (f"{DATE}.zip", f"{DATE}.1.zip", f"{DATE}.2.zip", f"{DATE}.1"):
        assert verify_path(root / "report" / name).ok, name


def test_a_full_disk_while_archiving_leaves_the_earlier_report_as_it_was(tmp_path, monkeypatch):
    """ENOSPC in the middle of the archive: no .zip.tmp, no report/<date>.1/ kept aside for a report that
    never arrived, the earlier report and archive untouched; the next run (space freed) publishes."""
    import errno

    root = tmp_path / "project"
    run = fake_run(root)
    first = build_and_publish(root, run)
    first_html = (first / "index.html").read_text()
    first_zip = (root / "report" / f"{DATE}.zip").read_bytes()
    real_add, calls = publish._add, []

    def add_then_fill_the_disk(zf, source, member):
        calls.append(member)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(source))
        real_add(zf, source, member)

    monkeypatch.setattr(publish, "_add", add_then_fill_the_disk)
    run["started"] = "2026-01-02T11:00:00+00:00"
    with pytest.raises(OSError, match="No space left"):
        build_and_publish(root, run)
    names = sorted(p.name for p in (root / "report").iterdir())
    assert names == [f".{DATE}.building", DATE, f"{DATE}.zip"]  # the stage: the report job removes it
    assert (first / "index.html").read_text() == first_html
    assert (root / "report" / f"{DATE}.zip").read_bytes() == first_zip
    monkeypatch.setattr(publish, "_add", real_add)
    import shutil

    shutil.rmtree(root / "report" / f".{DATE}.building")
    build_and_publish(root, run)
    assert sorted(p.name for p in (root / "report").iterdir()) == [DATE, f"{DATE}.1", f"{DATE}.1.zip", f"{DATE}.zip"]
    assert verify_path(root / "report" / f"{DATE}.zip").ok


def test_an_empty_output_folder_is_replaced_not_kept(tmp_path):
    root = tmp_path / "project"
    run = fake_run(root)
    (root / "report" / DATE).mkdir(parents=True)  # Snakemake makes the output folder before the job
    build_and_publish(root, run)
    assert sorted(p.name for p in (root / "report").iterdir()) == [DATE, f"{DATE}.zip"]


def test_a_cited_path_outside_the_project_is_refused(tmp_path):
    root = tmp_path / "project"
    run = fake_run(root)
    outside = tmp_path / "outside.json"
    outside.write_text('{"x": 1}')
    run["sources"][f"lesson_{LESSON}"]["metrics_json"] = "../outside.json"
    with pytest.raises(ValueError, match="must be relative to the project"):
        build_and_publish(root, run)


def test_job_times_come_from_snakemakes_record(tmp_path):
    import base64

    meta = tmp_path / ".snakemake" / "metadata"
    meta.mkdir(parents=True)
    name = base64.urlsafe_b64encode(b"results/x.json").decode()
    (meta / name).write_text(json.dumps({"starttime": 1767348000.0, "endtime": 1767348060.5}))
    with chdir(tmp_path):
        times = provenance.job_times("results/x.json")
        assert provenance.job_times("results/none.json") == {"job_started": None, "job_finished": None}
    started = datetime.datetime.fromisoformat(times["job_started"])
    finished = datetime.datetime.fromisoformat(times["job_finished"])
    assert started.tzinfo is not None  # an offset is written, whatever the machine's zone
    assert started == datetime.datetime(2026, 1, 2, 10, 0, tzinfo=datetime.UTC)
    assert finished - started == datetime.timedelta(seconds=60)  # written to the second


def test_build_paths_are_relative_to_the_project(built):
    root, _, report_dir = built
    md = (report_dir / "report.md").read_text()
    link = re.search(r"!\[[^\]]*\]\(<([^>]+)>\)", md).group(1)  # the figure
    assert link == f"../../results/{MODEL}/lessons/{LESSON}/gate_histogram.png"
    assert (report_dir / link).resolve() == (root / f"results/{MODEL}/lessons/{LESSON}/gate_histogram.png").resolve()
    assert not Path(root / "report" / f".{DATE}.building").exists()


def test_a_measured_gpu_is_reported_and_verifies(tmp_path):
    root = tmp_path / "project"
    run = fake_run(root)
    gpu = run["sources"]["timing_gpu"]["summary"]
    (root / gpu).write_text(
        json.dumps(
            {
                "status": "measured",
                "device": "cuda:0",
                "stream_copy_gbps": 3900.5,
                "stream_triad_gbps": 3950.1,
                "matvec_cold_gbps": 3100.0,
                "matvec_fraction_of_copy": 0.79,
                "read_ceiling_gbps": 4100.0,
                "matvec_fraction_of_read_ceiling": 0.756,
                "matmul_ratio_256_over_1": 1.9,
                "machine": {"type": "cuda", "name": "NVIDIA H200", "driver": "550.54"},
                "decode_tokens_per_s": 410.5,
                "decode_bytes_per_token": 538062336,
                "decode_ceiling_tokens_per_s": 7249.0,
                "decode_fraction_of_read_ceiling": 0.0566,
            }
        )
    )
    sweep = f"results/timing/{MODEL}/gpu/sweep.csv"
    (root / sweep).write_text("op,dtype,n,gbps\nmatvec,fp32,1,3100.0\n")
    run["sources"]["timing_gpu"]["sweep"] = sweep
    run["machine"]["gpus"] = [{"name": "NVIDIA H200", "driver": "550.54", "memory_mib": 143771}]
    report_dir = build_and_publish(root, run)
    md = md_plain((report_dir / "report.md").read_text())
    assert "GPU timing: not measured" not in md
    assert re.search(r"On this machine's GPU a copy moves 3,900\.?\d*\[\^\d+\] GB/s", md), md  # its sentence
    assert re.search(r"GB/s, 75\.6 %\[\^\d+\] of that ceiling\.", md)
    assert "GPU: NVIDIA H200[^" in md  # the summary's machine line, from the manifest
    timing = page_text(report_dir / sections.TIMING_PAGE)
    assert re.search(r"Device: NVIDIA H200 \d+ \.", timing)  # each number with its footnote
    assert re.search(r"decode, the project's decoder's torch twin \(tokens/s\) 410\.5 \d+ ", timing)
    assert re.search(r"share of that ceiling reached 5\.7 % \d+ ", timing)
    manifest = json.loads((report_dir / "manifest.json").read_text())
    keys = {c["key"] for c in manifest["citations"] if c["file"] == SELF}
    assert {"machine/gpus/0/name", "machine/gpus/0/driver", "machine/gpus/0/memory_mib"} <= keys
    assert sweep in {f["path"] for f in manifest["files"]}
    assert verify_path(report_dir).ok


def test_a_lessons_claims_are_counted_in_words_and_numbers(built):
    _, _, report_dir = built
    md = md_plain((report_dir / "report.md").read_text())
    assert re.search(
        r"Of the 3\[\^\d+\] numbers the course prints for this lesson: 2\[\^\d+\] reproduced, 1\[\^\d+\] specimen"
        r" differs, 0\[\^\d+\] not reproduced; all of them are on the \[lesson's data page\]",
        md,
    )
    # beside each other: the course's value, what it is about, this run's, the verdict
    html = (report_dir / "index.html").read_text()
    section = html.split(f'<h2 id="{LESSON}">', 1)[1]
    assert '<td class="v num" data-label="the course">0.1708</td>' in section
    assert '<td class="v num" data-label="this model">0.08545</td>' in section
    assert '<td class="v status-specimen-differs" data-label="verdict">specimen differs</td>' in section


def test_a_narrative_cites_its_numbers_and_leaves_out_a_sentence_it_cannot_fill(tmp_path):
    from bytesup.report.citations import Citation, Ledger

    (tmp_path / "metrics.json").write_text(json.dumps({"x_rms": 0.0854512, "gone": None, "n": 22080}))
    (tmp_path / "claims.csv").write_text("claim_id,status\na,reproduced\nb,not reproduced\n")
    ledger = Ledger(root=tmp_path)
    files = {"metrics_json": "metrics.json", "claims_csv": "claims.csv"}
    for path in files.values():
        ledger.add_source(path, "lesson_x")
    template = (
        "# a comment\nThe embedding has RMS {x_rms}.\nThis one is gone: {gone}.\nNo such key: {missing}.\n"
        "Both {n} and {missing}, or neither.\n"
        "\nOf {claims_csv:rows} claims, {claims_csv:count/status=reproduced} reproduced; {n} bytes.\n"
    )
    blocks = lesson_page.narrative(template, files, ledger)
    text = [["<" + p.text + ">" if isinstance(p, Citation) else p for p in para] for _, para in blocks]
    assert ["".join(para) for para in text] == [
        "The embedding has RMS <0.08545>.",
        "Of <2> claims, <1> reproduced; <22,080> bytes.",
    ]
    assert [n.key for n in ledger.notes] == ["x_rms", "rows", "count/status=reproduced", "n"]  # none for dropped ones


def test_a_narrative_quotes_what_a_model_wrote_with_its_prompt_and_line_breaks(tmp_path):
    from bytesup.report.citations import Citation, Ledger
    from bytesup.report.doc import Strong

    (tmp_path / "metrics.json").write_text(
        json.dumps({"prompt": "The capital is", "text": " Paris.\n\nIt is", "size": 96577380})
    )
    ledger = Ledger(root=tmp_path, formats={"": {"size": "bytes"}})
    ledger.add_source("metrics.json", "lesson_x")
    template = "It writes:\n> **{prompt}**{text}\nIt reads {size} MB per token.\n"
    blocks = lesson_page.narrative(template, {"metrics_json": "metrics.json"}, ledger)
    assert [kind for kind, _ in blocks] == ["para", "quote", "para"]
    prompt, text = blocks[1][1]
    assert isinstance(prompt, Strong) and prompt.pieces[0].text == "The capital is"
    assert isinstance(text, Citation) and text.text == " Paris.\n\nIt is"  # the breaks kept, not \\n
    assert "".join(p.text if isinstance(p, Citation) else p for p in blocks[2][1]) == "It reads 96.58 MB per token."
    from bytesup.report.doc import Doc

    doc = Doc(ledger, "t")
    doc.quote(*blocks[1][1])
    html = doc.html_parts[-1]
    assert html.startswith('<blockquote class="generated"><strong><a class="cite"') and ">The capital is</a>" in html
    assert re.search(r"> Paris\.<br><br>It is</a><a class=\"ref\" href=\"#n\d\">\d</a></blockquote>$", html)
    assert "\\n" not in html
    md = doc.md_parts[-1]
    assert md.startswith("> **[The capital is]") and "Paris.\\\n> \\\n> It is" in md  # Markdown's hard breaks


def test_each_footnote_has_one_marker_and_one_text(built):
    _, _, report_dir = built
    md = (report_dir / "report.md").read_text()
    manifest = json.loads((report_dir / "manifest.json").read_text())
    assert len(manifest["notes"]) >= 5  # the built report cites files and claims: it has footnotes
    for note in manifest["notes"]:
        if note["page"] == "index.html":
            assert md.count(f"[^{note['id']}]") == 2, note  # its marker and its text
    index_notes = [n for n in manifest["notes"] if n["page"] == "index.html"]
    assert len(re.findall(r"^\[\^[^\]]+\]:", md, re.M)) == len(index_notes)  # no footnote without an entry


def test_every_lesson_has_its_narrative():
    for lesson in registry():
        template = lesson_page.narrative_template(lesson)
        assert template and "{" in template, lesson


def test_the_summary_states_the_architecture_and_its_recipe(built):
    from bytesup.model.arch import recipe_summary

    _, _, report_dir = built
    md = md_plain((report_dir / "report.md").read_text())
    head = re.escape(esc_md("Architecture (general.architecture in the file): "))
    assert re.search(
        head
        + r"llama\[\^\d+\]\. "
        + re.escape(esc_md(f"The recipe the lessons that run the network follow: {recipe_summary('llama')}.")),
        md,
    )
    assert "Every lesson of the course ran for this model." in md


def test_the_summary_lists_what_did_not_run_and_why(tmp_path):
    root = tmp_path / "project"
    run = fake_run(root)
    why = "it follows llama only, and this model's architecture is 'gpt2'"
    run["refused"] = {"04_the_forward_pass": why}
    meta = root / run["sources"]["extract"]["metadata"]
    data = json.loads(meta.read_text())
    data["metadata"]["general.architecture"] = "gpt2"
    meta.write_text(json.dumps(data))
    report_dir = build_and_publish(root, run)
    md = md_plain((report_dir / "report.md").read_text())
    assert "bytesup.model.arch has no recipe for it" in md
    assert esc_md("Lessons that did not run for this model: Lesson 4 · The forward pass (each section says why).") in md
    assert f"Not run for this model: {esc_md(why)}." in md  # its section
    assert f"- Lesson 4 · The forward pass: {esc_md(why)}." in md  # for maintainers
    assert verify_path(report_dir).ok


def _notebook(cells: list[dict]) -> dict:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"language_info": {"name": "python"}},
        "cells": [{"id": f"c{i}", "metadata": {}, **cell} for i, cell in enumerate(cells)],
    }


def test_a_notebook_page_renders_markdown_code_and_outputs_and_runs_nothing(tmp_path):
    import base64
    import html as html_lib

    from report_helpers import png

    from bytesup.report import notebook_pages

    figure = base64.b64encode(png()).decode()
    # a pandas DataFrame's HTML, with the <style scoped> pandas puts first
    table = (
        "<div><style scoped>\n    .dataframe tbody tr th {\n        vertical-align: top;\n    }\n</style>"
        '<table border="1" class="dataframe"><thead><tr><th>rows</th><th>d</th><th>ops</th></tr></thead>'
        "<tbody><tr><td>576</td><td>576.0</td><td>11274289152</td></tr>"
        "<tr><td>NaN</td><td>0.0854512</td><td>Paris</td></tr></tbody></table></div>"
    )
    nb = _notebook(
        [
            {"cell_type": "markdown", "source": "# Step 1\n\nThe gate is **g**, a `<|im_start|>` token.\n\n## Step 2"},
            {
                "cell_type": "code",
                "execution_count": 1,
                "metadata": {"tags": ["parameters"]},
                "source": "token = 'default'",
                "outputs": [],
            },
            {
                "cell_type": "code",
                "execution_count": 2,
                "metadata": {"tags": ["injected-parameters"]},
                "source": "# Parameters\ntoken = ' cat'\n",
                "outputs": [],
            },
            {
                "cell_type": "code",
                "execution_count": 3,
                "source": "g = W_gate @ xn\ng[0]",
                "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": "576 rows\nline two"},
                    {
                        "output_type": "execute_result",
                        "execution_count": 3,
                        "metadata": {},
                        "data": {"text/plain": "-0.2639"},
                    },
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"image/png": figure, "text/plain": "<Figure>"},
                    },
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"text/plain": "   rows\n0  576", "text/html": table},
                    },
                    {
                        "output_type": "error",
                        "ename": "E",
                        "evalue": "x",
                        "traceback": ["\x1b[31mValueError\x1b[0m: bad <b>"],
                    },
                ],
            },
        ]
    )
    path = tmp_path / "03_ffn_by_hand.ipynb"
    path.write_text(json.dumps(nb))
    page = notebook_pages.render(path, "Lesson 3 · A layer is matrix multiplication")
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</body></html>\n")
    assert "<title>Lesson 3 · A layer is matrix multiplication</title>" in page
    # Markdown is rendered: headings, emphasis, code spans (escaped)
    assert re.search(r'<h1 id="Step-1">Step 1<a class="anchor-link" href="#Step-1">', page)
    assert re.search(r'<h2 id="Step-2">Step 2', page)
    assert "The gate is <strong>g</strong>, a <code>&lt;|im_start|&gt;</code> token." in page
    # the code input (highlighted: its text survives once the colour spans are removed) and the outputs
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", page))
    assert "g = W_gate @ xn\ng[0]" in text and "In\xa0[3]:" in text and "Out[3]:" in text
    assert "<pre>576 rows\nline two</pre>" in page and "<pre>-0.2639</pre>" in page
    assert f'<img alt="figure" src="data:image/png;base64,{figure}">' in page
    assert "ValueError</span>: bad &lt;b&gt;" in page and "\x1b" not in page
    # the title once (the notebook's own), the parameters once: those the workflow passed, said so
    assert page.count("<h1") == 1 and "<h1>Lesson 3" not in page
    assert "default" not in text and text.count("token = ' cat'") == 1
    assert "# The parameters the workflow ran this notebook with (papermill passed them)\ntoken" in text
    # the table stays a table, its numbers written as the report writes them; its CSS is dropped
    assert '<table class="dataframe"><thead><tr><th>rows</th><th>d</th><th>ops</th></tr></thead><tbody><tr>' in page
    assert '<td class="num">576</td><td class="num">576</td><td class="num">11,274,289,152</td>' in page
    assert '<td></td><td class="num">0.08545</td><td>Paris</td>' in page and "NaN" not in page
    assert "white-space:pre-wrap" in page  # long code lines wrap, nothing is clipped
    assert "vertical-align" not in page and "style scoped" not in page
    # self-contained, script-free
    assert "Content-Security-Policy" in page and "<script" not in page.lower()
    assert "@import" not in page and "http://" not in page and "https://" not in page
    assert re.findall(r'src="([^"]{0,22})', page) == ["data:image/png;base64,"]
    path.write_text("{not json")
    with pytest.raises(ValueError, match="03_ffn_by_hand.ipynb: not a readable notebook"):
        notebook_pages.render(path, "x")
    path.write_text(json.dumps({"nbformat": 4, "cells": "no"}))
    with pytest.raises(ValueError, match="03_ffn_by_hand.ipynb: not a readable notebook"):
        notebook_pages.render(path, "x")


def test_a_notebook_page_shows_hostile_markdown_and_outputs_as_text(tmp_path):
    import html as html_lib

    from bytesup.report import notebook_pages

    onerror = '<img src=x onerror="alert(9)">'
    nb = _notebook(
        [
            {"cell_type": "markdown", "source": f"# Title\n\n{HOSTILE}\n\n{onerror}\n\n[y](javascript:alert(4))"},
            {
                "cell_type": "code",
                "execution_count": 1,
                "source": "print(name)",
                "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": HOSTILE},
                    {
                        "output_type": "execute_result",
                        "execution_count": 1,
                        "metadata": {},
                        "data": {"text/plain": HOSTILE, "text/html": f"{HOSTILE}{onerror}<b>kept</b>"},
                    },
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"application/javascript": "alert(5)", "text/plain": "js"},
                    },
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"image/png": '"><script>alert(6)</script>', "text/plain": "not a png"},
                    },
                ],
            },
        ]
    )
    path = tmp_path / "hostile.ipynb"
    path.write_text(json.dumps(nb))
    page = notebook_pages.render(path, HOSTILE)
    lower = page.lower()
    # no active content: no script, no event handler, no javascript: URL, no image at all
    assert "<script" not in lower and "<img" not in lower and "<iframe" not in lower
    assert not re.search(r"<[^>]*\son\w+\s*=", lower) and 'href="javascript' not in lower
    assert "alert(5)" not in page and "not a png" in page  # a JavaScript output is not shown; a bad PNG falls back
    assert "<b>kept</b>" in page  # harmless HTML in an HTML output stays HTML
    text = html_lib.unescape(page)
    assert text.count(HOSTILE) >= 4 and onerror in text  # shown, as text: title, markdown, stream, HTML output


def test_a_notebook_page_shows_control_characters_escaped(tmp_path):
    """A NUL a chat template rendered (lesson 5 prints the chat prompt), or any other control character,
    never lands raw in the page: each shows as \\x.. where it was."""
    from bytesup.report import notebook_pages

    chat = "<|im_start|>user\x00\x0b\x7f\x85<|im_end|>\x1b]0;title\x07"
    nb = _notebook(
        [
            {"cell_type": "markdown", "source": f"The prompt \x00{chat}"},
            {
                "cell_type": "code",
                "execution_count": 1,
                "source": f"print({chat!r})  # \x00",
                "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": chat + "\n"},
                    {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                     "data": {"text/plain": chat, "text/html": f"<b>{chat}</b>"}},
                ],
            },
        ]
    )  # fmt: skip
    path = tmp_path / "05_generating_text.ipynb"
    path.write_text(json.dumps(nb))
    page = notebook_pages.render(path, "Lesson 5 \x00")
    controls = [c for c in page if (ord(c) < 32 and c not in "\t\n\r") or 0x7F <= ord(c) <= 0x9F]
    assert controls == []
    assert "user\\x00\\x0b\\x7f\\x85&lt;|im_end|&gt;\\x1b]0;title\\x07" in page  # the stream, as printed
    assert "Lesson 5 \\x00</h1>" in page


def test_a_notebook_page_is_the_same_bytes_every_time_and_in_every_process(tmp_path):
    import subprocess
    import sys

    from bytesup.report import notebook_pages

    nb = _notebook(
        [
            {"cell_type": "markdown", "source": "# Same"},
            {
                "cell_type": "code",
                "execution_count": 1,
                "source": "x = 1\nx",
                "outputs": [
                    {"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": {"text/plain": "1"}}
                ],
            },
        ]
    )
    nb["cells"][0].pop("id")  # a cell without an id must not get a random one
    path = tmp_path / "same.ipynb"
    path.write_text(json.dumps(nb))
    page = notebook_pages.render(path, "Same")
    assert page == notebook_pages.render(path, "Same")
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from bytesup.report import notebook_pages; "
            "sys.stdout.write(notebook_pages.render(sys.argv[1], 'Same'))",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
        encoding="utf-8",
    ).stdout
    assert other == page

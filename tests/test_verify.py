"""`bytesup verify`: an untouched report passes; any edited word, label, caption, link, number or
added sentence fails naming the first place that differs; a changed output file fails naming the
file and each number; damaged archives, added files and a moved folder are one clear line."""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from report_helpers import DATE, LESSON, MODEL, build_and_publish, fake_run, png

from bytesup.cli import main

METRICS = f"results/{MODEL}/lessons/{LESSON}/metrics.json"
TABLE = f"results/{MODEL}/lessons/{LESSON}/flops_per_token.csv"
FIGURE = f"results/{MODEL}/lessons/{LESSON}/gate_histogram.png"
TOP = f"llm-bytes-up-{DATE}"  # the one folder the archive unpacks into


@pytest.fixture
def built(tmp_path):
    root = tmp_path / "project"
    report_dir = build_and_publish(root, fake_run(root))
    return root, report_dir


def verify(capsys, *args) -> tuple[int, list[str]]:
    code = main(["verify", *map(str, args)])
    out = capsys.readouterr()
    return code, (out.out + out.err).strip().splitlines()


def citation(report_dir: Path, file: str, key: str) -> dict:
    manifest = json.loads((report_dir / "manifest.json").read_text())
    return next(c for c in manifest["citations"] if c["file"] == file and c["key"] == key)


def test_untouched_report_folder_and_archive_pass_with_one_line(built, capsys):
    root, report_dir = built
    code, lines = verify(capsys, report_dir)
    assert code == 0 and len(lines) == 1, lines
    assert lines[0].startswith("verify: OK: ") and " 1 figures" in lines[0] and "word for word" in lines[0]
    code, lines = verify(capsys, root / "report" / f"{DATE}.zip")
    assert code == 0 and len(lines) == 1 and "verify: OK" in lines[0], lines


def test_archive_verifies_after_unpacking_on_another_machine(built, tmp_path, capsys):
    root, _ = built
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(root / "report" / f"{DATE}.zip", elsewhere / "shared.zip")
    shutil.rmtree(root)  # the project is gone: only the archive is left
    assert verify(capsys, elsewhere / "shared.zip")[0] == 0
    with zipfile.ZipFile(elsewhere / "shared.zip") as zf:
        zf.extractall(elsewhere)
    assert [p.name for p in elsewhere.iterdir() if p.is_dir()] == [TOP]  # one folder, nothing spread around
    report_dir = elsewhere / TOP / "report" / DATE
    code, lines = verify(capsys, report_dir)
    assert code == 0, lines
    # the figure's link and a number's link resolve inside the unpacked archive
    md = (report_dir / "report.md").read_text()
    link = re.search(r"!\[[^\]]*\]\(<([^>]+)>\)", md).group(1)
    assert (report_dir / link).resolve().read_bytes() == png()
    html = (report_dir / "index.html").read_text()
    href = re.search(r'<a class="cite" href="([^"]+models/m\.json)"', html).group(1)
    assert (report_dir / href).resolve() == (elsewhere / TOP / f"resources/models/{MODEL}.json").resolve()
    data = report_dir / "data" / f"{LESSON}.html"  # a data page, one folder down
    href = re.search(r'<a href="([^"]+metrics\.json)">JSON</a>', data.read_text()).group(1)
    assert (data.parent / href).resolve() == (elsewhere / TOP / METRICS).resolve()


def test_a_changed_output_file_fails_naming_the_file_and_each_number(built, capsys):
    root, report_dir = built
    path = root / METRICS
    data = json.loads(path.read_text())
    data["x_rms"] = 0.5
    path.write_text(json.dumps(data))
    code, lines = verify(capsys, report_dir)
    assert code == 1
    assert any(line.startswith(f"{METRICS}: sha256 ") and "the file changed" in line for line in lines)
    wrong = [line for line in lines if f"{METRICS} \u2192 x_rms)" in line]
    assert wrong and all("the file gives '0.5'; the report shows '0.08545'" in line for line in wrong)
    assert lines[-1].startswith("verify: FAILED: ")
    # untouched numbers of the same file are not reported
    assert not any("x_length)" in line for line in lines)


SENTENCE = "This model answers 99.9% of questions correctly."


def _insert_sentence(text: str, name: str) -> str:
    anchor = "Every lesson of the course ran for this model."
    assert text.count(anchor) == 1
    return text.replace(anchor, f"{anchor} {SENTENCE}")


# (what is tampered, old text, new text): a word, a label, a caption, a number inside a label,
# a cited number, a table cell, a link
EDITS = [
    ("label", "all lessons", "every lesson"),
    ("caption", "The course's numbers beside this model's", "The course's numbers, measured on a GPU"),
    ("number in a label", "1 GB is 10⁹ bytes", "1 GB is 10⁸ bytes"),
    ("word", "Not run for this model", "Not needed for this model"),
]


@pytest.mark.parametrize("page", ["index.html", "report.md"])
def test_an_inserted_sentence_fails_naming_where(built, capsys, page):
    _, report_dir = built
    (report_dir / page).write_text(_insert_sentence((report_dir / page).read_text(), page))
    code, lines = verify(capsys, report_dir)
    assert code == 1 and len(lines) == 2, lines
    assert lines[0].startswith(f"{page}, line ") and "(section 'summary')" in lines[0].lower() and "99.9%" in lines[0]


@pytest.mark.parametrize("page", ["index.html", "report.md"])
@pytest.mark.parametrize("what,old,new", [e for e in EDITS if e[0] != "word"], ids=[e[0] for e in EDITS[:3]])
def test_an_edited_label_caption_or_number_in_a_label_fails(built, capsys, page, what, old, new):
    _, report_dir = built
    text = (report_dir / page).read_text()
    old_md = old.replace("(", "\\(").replace(")", "\\)") if page == "report.md" else html.escape(old)
    assert old_md in text, (what, page)
    (report_dir / page).write_text(text.replace(old_md, new, 1))
    code, lines = verify(capsys, report_dir)
    assert code == 1 and len(lines) == 2, lines
    assert lines[0].startswith(f"{page}, line ") and " shows " in lines[0] and "where the files give" in lines[0]


def test_a_changed_number_a_cell_or_a_link_fails(built, capsys):
    _, report_dir = built
    original = (report_dir / "index.html").read_text()
    for old, new in (
        (">Test CPU</a>", ">Fast CPU</a>"),  # a cited value in running text
        (
            '<td class="v num" data-label="the course">0.1708</td>',
            '<td class="v num" data-label="the course">0.1709</td>',
        ),
        (f'href="../../resources/models/{MODEL}.json"', 'href="../../results/other.json"'),  # a link
    ):
        assert old in original, old
        (report_dir / "index.html").write_text(original.replace(old, new, 1))
        code, lines = verify(capsys, report_dir)
        assert code == 1 and len(lines) == 2 and lines[0].startswith("index.html, line "), (old, lines)
    (report_dir / "index.html").write_text(original)
    md = (report_dir / "report.md").read_text()
    md, n = re.subn(r"\| 0\.1708 \|", "| 0.1709 |", md)
    assert n == 1
    (report_dir / "report.md").write_text(md)
    code, lines = verify(capsys, report_dir)
    assert code == 1 and lines[0].startswith("report.md, line ") and "0.1709 |" in lines[0]


def test_an_edited_data_page_or_a_missing_one_fails(built, capsys):
    _, report_dir = built
    page = report_dir / "data" / f"{LESSON}.html"
    original = page.read_text()
    old = '<td class="v num" data-label="matrix rows">578</td>'  # a cell of a table shown only there
    assert old in original
    page.write_text(original.replace(old, old.replace("578", "579"), 1))
    code, lines = verify(capsys, report_dir)
    assert code == 1 and len(lines) == 2 and lines[0].startswith(f"data/{LESSON}.html, line "), lines
    page.unlink()
    code, lines = verify(capsys, report_dir)
    assert code == 1 and lines[0] == f"data/{LESSON}.html: missing (a page of the report)", lines


def test_a_swapped_figure_fails(built, capsys):
    root, report_dir = built
    (root / FIGURE).write_bytes(png(4, 4))  # the cited file
    code, lines = verify(capsys, report_dir)
    assert code == 1 and any(line.startswith(f"{FIGURE}: ") and "the file changed" in line for line in lines)
    assert any(line.startswith("index.html, line ") for line in lines)  # the embedded figure differs too


def test_a_missing_file_and_a_tampered_archive_fail(built, tmp_path, capsys):
    root, report_dir = built
    archive = root / "report" / f"{DATE}.zip"
    (root / TABLE).unlink()
    code, lines = verify(capsys, report_dir)
    assert code == 1 and any(line.startswith(f"{TABLE}: missing") for line in lines)
    # rewrite one member of the archive
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == f"{TOP}/{METRICS}":
                data = data.replace(b'"token_id": 2644', b'"token_id": 2645')
            dst.writestr(info, data)
    code, lines = verify(capsys, tampered)
    assert code == 1 and any("token_id): the file gives '2,645'" in line for line in lines)


def test_a_damaged_archive_is_one_line(built, tmp_path, capsys):
    root, _ = built
    data = (root / "report" / f"{DATE}.zip").read_bytes()
    with zipfile.ZipFile(root / "report" / f"{DATE}.zip") as zf:
        info = zf.getinfo(f"{TOP}/report/{DATE}/index.html")
    flipped = bytearray(data)
    flipped[info.header_offset + 30 + len(info.filename) + 200] ^= 0xFF  # inside the compressed page
    for name, damaged in (("flipped.zip", bytes(flipped)), ("truncated.zip", data[: len(data) // 2])):
        (tmp_path / name).write_bytes(damaged)
        code, lines = verify(capsys, tmp_path / name)
        assert code == 2 and len(lines) == 1 and "the archive is damaged" in lines[0], lines
        assert "Traceback" not in lines[0]


def test_added_files_are_reported(built, tmp_path, capsys):
    root, report_dir = built
    archive = root / "report" / f"{DATE}.zip"
    added = tmp_path / "added.zip"
    shutil.copy(archive, added)
    with zipfile.ZipFile(added, "a") as zf:
        zf.writestr(f"{TOP}/results/{MODEL}/extra.json", "{}")
        zf.writestr(f"{TOP}/report/{DATE}/note.html", "<p>trust me</p>")
    code, lines = verify(capsys, added)
    assert code == 1
    assert any(line.startswith(f"{TOP}/results/{MODEL}/extra.json: in the archive but not") for line in lines)
    assert any(line.startswith("note.html: in the report folder but not in its manifest") for line in lines)
    (report_dir / "extra.csv").write_text("a\n1\n")
    code, lines = verify(capsys, report_dir)
    assert code == 1 and lines[0] == "extra.csv: in the report folder but not in its manifest (an added file)"


def test_a_folder_moved_away_from_its_project_says_to_use_root(built, tmp_path, capsys):
    root, report_dir = built
    moved = tmp_path / "moved" / DATE
    shutil.copytree(report_dir, moved)
    code, lines = verify(capsys, moved)
    assert code == 2 and len(lines) == 1 and "moved away from its project" in lines[0] and "--root" in lines[0]
    code, lines = verify(capsys, moved, "--root", root)
    assert code == 0, lines


def test_not_a_report_and_a_hostile_archive_are_one_line_errors(tmp_path, capsys):
    code, lines = verify(capsys, tmp_path)
    assert code == 2 and lines == [f"bytesup: error: {tmp_path}: not a report folder (no manifest.json)"]
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../outside.txt", "x")
    code, lines = verify(capsys, evil)
    assert code == 2 and len(lines) == 1 and "outside the archive's folder" in lines[0]
    code, lines = verify(capsys, tmp_path / "nope.zip")
    assert code == 2 and "no such file or folder" in lines[0]
    (tmp_path / "text.txt").write_text("hello")
    code, lines = verify(capsys, tmp_path / "text.txt")
    assert code == 2 and "neither a report folder nor a .zip archive" in lines[0]


# --- the report's own files: re-hashed, and re-derived where they are derived -------------------------


def forge(report_dir: Path, root: Path) -> None:
    """Make the rest of the report agree with whatever was edited in its folder, as a careful forger
    would: each in-report file's manifest entry re-hashed, the pages and the manifest's citations
    re-rendered from that manifest. What verify still catches is then only what it re-derives."""
    from bytesup.report import build, render

    manifest = json.loads((report_dir / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["in_report"]:
            data = (report_dir / entry["path"]).read_bytes()
            entry["sha256"], entry["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    pages = render.render({k: v for k, v in manifest.items() if k not in render.OUTPUTS}, report_dir, root)
    manifest.update(pages.outputs())
    for name, text in pages.files().items():
        (report_dir / name).write_text(text)
    (report_dir / "manifest.json").write_text(build.manifest_text(manifest))


def test_a_file_of_the_report_folder_edited_is_named(built, capsys):
    """claims.csv with other line ends reads the same to the page: only its hash tells."""
    _, report_dir = built
    claims = report_dir / "claims.csv"
    claims.write_bytes(claims.read_bytes().replace(b"\n", b"\r\n"))
    code, lines = verify(capsys, report_dir)
    assert code == 1, lines
    assert lines[0].startswith("claims.csv: ") and "bytes, the manifest says" in lines[0]
    assert lines[1].startswith("claims.csv: sha256 ") and "(the file changed)" in lines[1]


def test_the_claims_table_forged_with_its_manifest_entry_fails(built, capsys):
    """claims.csv is every lesson's claims.csv in one table: verify builds it again from those files."""
    root, report_dir = built
    claims = report_dir / "claims.csv"
    claims.write_text(claims.read_text().replace("share of negative gates", "share of positive gates"))
    forge(report_dir, root)
    code, lines = verify(capsys, report_dir)
    assert code == 1 and len(lines) == 2, lines
    assert lines[0].startswith("claims.csv, line 4") and "positive" in lines[0] and "negative" in lines[0]


@pytest.fixture
def built_with_notebook(tmp_path):
    root = tmp_path / "project"
    run = fake_run(root)
    notebook = f"results/{MODEL}/lessons/{LESSON}/notebook.ipynb"
    cells = [
        {"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# The lesson\nThe step: x times W."},
        {"cell_type": "code", "id": "b", "metadata": {}, "execution_count": 1, "source": "print(2 + 2)",
         "outputs": [{"output_type": "stream", "name": "stdout", "text": "4\n"}]},
    ]  # fmt: skip
    (root / notebook).write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
    run["sources"][f"lesson_{LESSON}"]["notebook"] = notebook
    return root, build_and_publish(root, run)


def test_a_notebook_page_forged_with_its_manifest_entry_fails(built_with_notebook, capsys):
    root, report_dir = built_with_notebook
    assert verify(capsys, report_dir)[0] == 0
    page = report_dir / "notebooks" / f"{LESSON}.html"
    page.write_text(page.read_text().replace("<p>The step: x times W.</p>", "<p>The step: W times x.</p>"))
    forge(report_dir, root)
    code, lines = verify(capsys, report_dir)
    assert code == 1 and len(lines) == 2, lines
    assert lines[0].startswith(f"notebooks/{LESSON}.html, line ") and "W times x" in lines[0]

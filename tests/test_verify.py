"""`bytesup verify`: an untouched report passes; a changed output file or a changed number fails,
naming each difference; the archive verifies anywhere it is unpacked."""

from __future__ import annotations

import base64
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from bytesup.cli import main
from bytesup.report_doc import esc_md
from report_helpers import DATE, LESSON, MODEL, build_and_publish, fake_run, png

METRICS = f"results/{MODEL}/lessons/{LESSON}/metrics.json"
TABLE = f"results/{MODEL}/lessons/{LESSON}/flops_per_token.csv"


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
    assert code == 0 and len(lines) == 1
    assert lines[0].startswith("verify: OK: ") and " 12 files, " in lines[0] and " 1 figures" in lines[0]
    code, lines = verify(capsys, root / "report" / f"{DATE}.zip")
    assert code == 0 and len(lines) == 1 and "verify: OK" in lines[0]


def test_archive_verifies_after_unpacking_on_another_machine(built, tmp_path, capsys):
    root, _ = built
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(root / "report" / f"{DATE}.zip", elsewhere / "shared.zip")
    shutil.rmtree(root)  # the project is gone: only the archive is left
    assert verify(capsys, elsewhere / "shared.zip")[0] == 0
    with zipfile.ZipFile(elsewhere / "shared.zip") as zf:
        zf.extractall(elsewhere / "unpacked")
    code, lines = verify(capsys, elsewhere / "unpacked" / "report" / DATE)
    assert code == 0, lines
    # The Markdown's figure link resolves inside the unpacked archive
    md = (elsewhere / "unpacked" / "report" / DATE / "report.md").read_text()
    link = re.search(r"\]\(<([^>]+)>\)", md).group(1)
    assert (elsewhere / "unpacked" / "report" / DATE / link).resolve().read_bytes() == png()


def test_a_changed_output_file_fails_naming_the_file_and_each_number(built, capsys):
    root, report_dir = built
    path = root / METRICS
    data = json.loads(path.read_text())
    data["x_rms"] = 0.5
    path.write_text(json.dumps(data))
    code, lines = verify(capsys, report_dir)
    assert code == 1
    assert any(line.startswith(f"{METRICS}: sha256 ") and "the file changed" in line for line in lines)
    wrong = [line for line in lines if f"{METRICS} \u2192 x_rms" in line]
    assert wrong and all("the file gives '0.5'" in line and "index.html '0.0854512'" in line for line in wrong)
    assert lines[-1].startswith("verify: FAILED: ")
    # untouched numbers of the same file are not reported
    assert not any("x_length" in line for line in lines)


def test_one_changed_number_in_index_html_fails_naming_it(built, capsys):
    _, report_dir = built
    c = citation(report_dir, METRICS, "token_id")
    html = (report_dir / "index.html").read_text()
    html, n = re.subn(rf'(<span class="cite" id="c{c["id"]}"[^>]*>){re.escape(c["text"])}<', r"\g<1>2,645<", html)
    assert n == 1
    (report_dir / "index.html").write_text(html)
    code, lines = verify(capsys, report_dir)
    assert code == 1
    assert lines[:-1] == [f"citation {c['id']} ({METRICS} \u2192 token_id): the file gives '2,644'; "
                          "the report shows index.html '2,645'"]
    assert lines[-1].startswith("verify: FAILED: ") and "1 difference(s)" in lines[-1]


def test_one_changed_number_in_report_md_fails_naming_it(built, capsys):
    _, report_dir = built
    c = citation(report_dir, METRICS, "x_length")
    md = (report_dir / "report.md").read_text()
    old = f"{esc_md(c['text'])}[^{c['note']}]"
    assert md.count(old) == 1
    (report_dir / "report.md").write_text(md.replace(old, f"1{old}"))
    code, lines = verify(capsys, report_dir)
    assert code == 1 and len(lines) == 2
    assert f"report.md '1{esc_md(c['text'])}'" in lines[0]


def test_a_changed_table_cell_fails_naming_the_row(built, capsys):
    _, report_dir = built
    md = (report_dir / "report.md").read_text()
    md, n = re.subn(r"\| 578 \| 4 \|", "| 578 | 5 |", md)
    assert n == 1
    (report_dir / "report.md").write_text(md)
    code, lines = verify(capsys, report_dir)
    assert code == 1
    assert any(f"the table from {TABLE}" in line and "row 2" in line for line in lines)


def test_a_swapped_figure_fails(built, capsys):
    _, report_dir = built
    html = (report_dir / "index.html").read_text()
    fake = base64.b64encode(png(4, 4)).decode()
    html = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", f"data:image/png;base64,{fake}", html)
    (report_dir / "index.html").write_text(html)
    code, lines = verify(capsys, report_dir)
    assert code == 1 and any("is not the cited file" in line for line in lines)


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
            if info.filename == METRICS:
                data = data.replace(b'"token_id": 2644', b'"token_id": 2645')
            dst.writestr(info, data)
    code, lines = verify(capsys, tampered)
    assert code == 1 and any("token_id): the file gives '2,645'" in line for line in lines)


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

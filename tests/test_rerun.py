"""Rerun one stage: after a complete run, a change reruns exactly what depends on it.

Each case edits a copy of a finished tiny-model project and asks Snakemake for its plan
(`-n`); the exact set of jobs is asserted.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest
from conftest import copy_finished
from workflow_helpers import QUICK_TIMING, sha256, snakemake, write_config

from bytesup.lessons import registry
from bytesup.model.synthetic import write_tiny_llama

LESSONS = registry()
ALL_LESSONS = {f"lesson_{lesson}" for lesson in LESSONS}
UPSTREAM = {"fetch", "extract", "timing_cpu", "timing_decode", "timing_gpu", "timing_figure", "report", "all"}


def lessons_reading(*names: str) -> set[str]:
    """The lesson rules whose SPEC reads any of these run files (bytesup.lessons.spec.RUN_FILES)."""
    return {f"lesson_{s.id}" for s in LESSONS.values() if set(s.reads) & set(names)}


def lessons_taking(key: str) -> set[str]:
    """The lesson rules that take this config key as a parameter."""
    return {f"lesson_{s.id}" for s in LESSONS.values() if key in s.config_keys}


@pytest.fixture
def project(finished_tiny, tmp_path):
    """A copy of the finished project (mtimes kept), to edit."""
    return copy_finished(finished_tiny, tmp_path / "copy")


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
    os.utime(project / f"workflow/notebooks/{next(iter(LESSONS))}.ipynb", (later, later))
    assert planned_jobs(project) == {}


def test_nothing_changed_does_nothing_in_seconds(project):
    start = time.monotonic()
    assert planned_jobs(project) == {}
    assert time.monotonic() - start < 60


QUICK_LESSONS = ("00_vectors_neurons_nonlinearity", "capstone_decode_is_memory_bound")  # the rest: in the slow set


@pytest.mark.parametrize(
    "lesson", [pytest.param(x, marks=() if x in QUICK_LESSONS else pytest.mark.slow) for x in LESSONS]
)
def test_editing_one_lesson_notebook_reruns_that_lesson_and_the_report(project, lesson):
    edit_notebook(project / f"workflow/notebooks/{lesson}.ipynb")
    assert planned_jobs(project) == {f"lesson_{lesson}": 1, "report": 1, "all": 1}


def test_editing_timing_settings_reruns_timing_the_lessons_reading_it_and_the_report(project):
    write_config(project, timing={**QUICK_TIMING, "repeats": 4})
    assert set(planned_jobs(project)) == {
        "timing_cpu",
        "timing_decode",
        "timing_gpu",
        "timing_figure",
        "report",
        "all",
    } | lessons_reading(
        "timing_summary", "timing_sweep", "gpu_summary", "gpu_sweep", "decode_summary", "decode_prefill"
    )


def test_editing_the_token_reruns_only_the_lessons_taking_it(project):
    write_config(project, token=" dog")
    assert set(planned_jobs(project)) == {"report", "all"} | lessons_taking("token")


@pytest.mark.slow  # a second model's whole plan: seconds of snakemake
def test_another_model_reruns_everything_for_that_model_only(project):
    other = write_tiny_llama(project / "other.gguf", seed=1)
    write_config(
        project, model="other", models={"other": {"source": "path", "path": str(other), "sha256": sha256(other)}}
    )
    jobs = planned_jobs(project)  # the lessons come after the extract checkpoint has run
    assert set(jobs) == UPSTREAM and all(n == 1 for n in jobs.values())
    out = snakemake(project, "-n").stdout
    assert "results/tiny/" not in out.replace("results/timing/tiny/", "")  # no job writes the first model's outputs
    assert "wildcards: model=tiny" not in out


def test_forcerun_one_stage_reruns_it_and_what_depends_on_it(project):
    assert set(planned_jobs(project, "--forcerun", "timing_cpu")) == {
        "timing_cpu",
        "timing_figure",
        "report",
        "all",
    } | lessons_reading("timing_summary", "timing_sweep")


def test_forcing_the_extract_checkpoint_plans_the_lessons_after_it(project):
    """Which lessons run depends on the architecture extract reads: until it has run again, the plan
    holds it and the report; Snakemake adds the lessons reading its files once it is done."""
    assert set(planned_jobs(project, "--forcerun", "extract")) == {"extract", "report", "all"}
    out = snakemake(project, "-n", "--forcerun", "extract").stdout
    assert "checkpoint jobs" in out


# --- "Nothing to be done" must not hide a problem ------------------------------------------------------


@pytest.mark.parametrize("lesson", ["03_ffn_by_hand"])
def test_a_lesson_notebook_deleted_by_hand_is_made_again(project, lesson):
    """No other rule reads a lesson's executed notebook: rule all names it, so it is not forgotten."""
    (project / f"results/tiny/lessons/{lesson}/{lesson}.ipynb").unlink()
    assert planned_jobs(project) == {f"lesson_{lesson}": 1, "report": 1, "all": 1}


def test_the_extracted_tensors_deleted_by_hand_are_made_again(project):
    import shutil

    shutil.rmtree(project / "results/tiny/gguf/tensors")
    assert set(planned_jobs(project)) == {"extract", "report", "all"}


def test_a_deleted_cached_model_is_fetched_again_and_said(project):
    (project / "resources/models/tiny.gguf").unlink()  # the link only; the model stays where it is
    proc = snakemake(project, "-n")
    assert "resources/models/tiny.gguf is missing; fetching it again, then every stage after it reruns" in proc.stderr
    assert {"fetch", "extract", "report", "all"} <= set(planned_jobs(project))


@pytest.mark.slow  # seconds of snakemake; the quick set checks a deleted cache, and test_fetch a truncated file
def test_a_truncated_cached_model_is_fetched_again(project):
    cache = project / "resources/models/tiny.gguf"
    data = cache.read_bytes()
    cache.unlink()  # the link only; the model stays where it is
    cache.write_bytes(data[: len(data) // 2])
    proc = snakemake(project, "-n")
    assert (
        f"resources/models/tiny.gguf is truncated: {len(data) // 2} bytes, its fetch recorded {len(data)}"
        in proc.stderr
    )
    assert {"fetch", "extract", "report", "all"} <= set(planned_jobs(project))


def test_a_local_model_whose_file_is_gone_is_named_not_hidden(project):
    gone = project / "moved-away.gguf"
    write_config(project, models={"tiny": {"source": "path", "path": str(gone), "sha256": None}})
    proc = snakemake(project, "-n", check=False)
    assert proc.returncode != 0
    assert (
        f"config error: models.tiny.path: '{gone}' is not a file (no such file); put the model there or fix the path in "
        "config/config.yaml" in proc.stderr
    )
    assert "Nothing to be done" not in proc.stdout


def test_a_local_split_model_named_by_a_later_part_is_one_config_line(project):
    later = project / "m-00002-of-00003.gguf"
    write_config(project, models={"tiny": {"source": "path", "path": str(later), "sha256": None}})
    proc = snakemake(project, "-n", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert (
        f"config error: models.tiny.path names part 2 of a split model; point it at its first part, "
        f"{project / 'm-00001-of-00003.gguf'}" in proc.stderr
    )

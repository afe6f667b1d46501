"""The no-op benchmark: its arithmetic on scripted runs, its refusals, and one real round on a finished project."""

from __future__ import annotations

import subprocess

import pytest

from bytesup.timing import noop_bench as nb
from bytesup.timing.measure import TimingError


def scripted(times: dict[str, list[float]], outputs: dict[str, tuple[int, str]]):
    """A stand-in for _snakemake: per first argument, the next time from `times` and (status, stderr)."""
    calls = []

    def run(project, *args):
        calls.append(args)
        code, err = outputs[args[0]]
        return times[args[0]].pop(0), subprocess.CompletedProcess(args, code, "", err)

    return run, calls


def test_the_ratio_is_of_medians_and_the_runs_alternate(monkeypatch, tmp_path):
    done = (0, f"Building DAG of jobs...\n{nb.NOTHING_TO_DO}.\n")
    run, calls = scripted(
        {"--dry-run": [9.0], "--cores": [1.6, 1.2, 9.0], "--version": [1.0, 0.8, 1.1]},
        {"--dry-run": done, "--cores": done, "--version": (0, "9.13.7\n")},
    )
    monkeypatch.setattr(nb, "_snakemake", run)
    r = nb.noop_bench(tmp_path, repeats=3)
    assert [c[0] for c in calls] == ["--dry-run", "--cores", "--version"] * 1 + ["--cores", "--version"] * 2
    assert r["noop"]["median_s"] == 1.6 and r["version"]["median_s"] == 1.0
    assert r["noop_over_version"] == pytest.approx(1.6)
    t = r["target"]
    assert (t["name"], t["target"], t["measured"], t["met"]) == ("noop_run_over_snakemake_version", 1.5, 1.6, False)
    assert t["noisy"]  # 1.2-9.0 s around a median of 1.6


def test_a_project_with_work_to_do_is_refused_before_anything_runs(monkeypatch, tmp_path):
    run, calls = scripted({"--dry-run": [1.0]}, {"--dry-run": (0, "Job stats:\njob  count\nall  1\n")})
    monkeypatch.setattr(nb, "_snakemake", run)
    with pytest.raises(TimingError, match="not a finished project"):
        nb.noop_bench(tmp_path)
    assert calls == [("--dry-run",)]


def test_a_failing_snakemake_is_named_in_one_line(monkeypatch, tmp_path, capsys):
    run, _ = scripted({"--dry-run": [1.0]}, {"--dry-run": (1, "Error: no Snakefile found\n")})
    monkeypatch.setattr(nb, "_snakemake", run)
    assert nb.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"noop_bench: {tmp_path}: snakemake --dry-run failed: Error: no Snakefile found\n"


@pytest.mark.slow
def test_one_round_on_a_finished_project(finished_tiny, capsys):
    assert nb.main([str(finished_tiny), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "no-op snakemake --cores all" in out and "ratio" in out
    r = nb.noop_bench(finished_tiny, repeats=1)
    assert r["noop_over_version"] == pytest.approx(r["noop"]["median_s"] / r["version"]["median_s"])
    assert (
        0 < r["version"]["median_s"] < 60
        and 0 < r["noop"]["median_s"] < 60
        and r["target"]["measured"] == r["noop_over_version"]
    )

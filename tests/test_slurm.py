"""The workflow through a real SLURM: the same outputs as a local run.

A single-node cluster on this machine (tests/slurm/start_slurm.sh: munged, slurmctld, slurmd
on localhost, as root, no cgroups, no accounting database) runs the tiny synthetic model with
`--profile workflow/profiles/slurm`; a second copy of the project runs the same config locally.
Lesson 3's numbers and the extracted tensors must agree, and every job but the report (a
localrule) must have gone through SLURM with the resources its rule declares.

Skipped where the SLURM binaries are absent (apt-get install slurm-wlm munge), except under
CI=true: CI must run it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import TINY_DATE, copy_finished, tiny_project
from workflow_helpers import sha256, snakemake

from bytesup.lessons import registry

# A real SLURM cluster on localhost and a whole run through it: about two minutes, so CI's (make test-slow).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SLURM_SCRIPTS = ROOT / "tests" / "slurm"
BINARIES = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "sinfo")
REPORT_DATE = TINY_DATE

# The local cluster has no accounting database, so the plugin asks squeue (which keeps finished
# jobs for MinJobAge); it checks the first time one second after a submission, not forty.
TEST_CLUSTER_ARGS = (
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--slurm-keep-successful-logs",
)


def _unavailable(reason: str):
    """Skip on a developer's machine; fail under CI=true, where this test must run."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster():
    """Start the single-node cluster (or find it running); stop it afterwards if started here."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        _unavailable(f"SLURM binaries not found ({', '.join(missing)}): apt-get install slurm-wlm munge")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        _unavailable("snakemake-executor-plugin-slurm is not installed: pip install -e '.[slurm]'")
    proc = subprocess.run(
        [str(SLURM_SCRIPTS / "start_slurm.sh")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [""]
    if proc.returncode in (2, 3, 4):  # not root, a real cluster's slurm.conf, missing binaries
        _unavailable(message[0])
    if proc.returncode != 0:
        pytest.fail(
            f"tests/slurm/start_slurm.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}", pytrace=False
        )
    node = _sinfo_node()
    yield node
    if proc.stdout.strip().splitlines()[-1] == "started":
        subprocess.run([str(SLURM_SCRIPTS / "stop_slurm.sh"), "--purge"], capture_output=True, timeout=120)


def _sinfo_node() -> dict:
    name, cpus, mem = subprocess.run(
        ["sinfo", "-h", "-N", "-p", "debug", "-o", "%N %c %m"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[:3]
    return {"name": name, "cpus": int(cpus), "mem_mb": int(mem.rstrip("+"))}


def declared_resources(project: Path, *args: str) -> dict:
    """Each rule's threads, mem_mb and runtime as this run would ask them, from a dry run."""
    proc = snakemake(project, "-n", *args)
    rules = {}
    for block in re.split(r"\n(?=(?:rule|checkpoint) \S+:\n)", proc.stdout + proc.stderr):
        name = re.match(r"(?:rule|checkpoint) (\S+):\n", block)
        if not name:
            continue
        threads = re.search(r"^\s+threads: (\d+)$", block, re.M)
        resources = dict(re.findall(r"\b(mem_mb|runtime)=(\d+)", block.split("resources:", 1)[-1].split("\n")[0]))
        rules[name.group(1)] = {
            "threads": int(threads.group(1)) if threads else 1,
            **{key: int(value) for key, value in resources.items()},
        }
    return rules


def profile_set_resources(project: Path) -> list[str]:
    """The slurm profile's set-resources as command-line items (rule:resource=value)."""
    profile = yaml.safe_load((project / "workflow/profiles/slurm/config.yaml").read_text())
    return [
        f"{rule}:{key}={value}" for rule, res in profile.get("set-resources", {}).items() for key, value in res.items()
    ]


@pytest.fixture(scope="module")
def runs(slurm_cluster, finished_tiny, tmp_path_factory):
    """The same tiny-model config run locally and through SLURM, each in its own project copy."""
    local = finished_tiny  # the same config, run locally once for the whole session
    cluster = tiny_project(tmp_path_factory.mktemp("slurm") / "project", local / "tiny.gguf")
    cores = min(2, slurm_cluster["cpus"])  # what `threads: workflow.cores` asks of the node
    args = ["--profile", "workflow/profiles/slurm", "--cores", str(cores), *TEST_CLUSTER_ARGS]
    # The lessons join the plan only after the extract checkpoint: their resources come from a dry
    # run of the finished local project with the lessons forced (a copy: the session's run stays as it is).
    planned = copy_finished(local, tmp_path_factory.mktemp("slurm-plan") / "project")
    lessons = [f"lesson_{lesson}" for lesson in registry()]

    def declared_now() -> dict:
        return {**declared_resources(planned, *args, "--forcerun", *lessons), **declared_resources(cluster, *args)}

    declared = declared_now()
    # A small CI machine may hold less memory than a rule asks for: cap those rules to the node
    # (--set-resources replaces the profile's list, so that list goes in again first).
    caps = [
        f"{rule}:mem_mb={slurm_cluster['mem_mb']}"
        for rule, res in declared.items()
        if res.get("mem_mb", 0) > slurm_cluster["mem_mb"]
    ]
    if caps:
        args += ["--set-resources", *profile_set_resources(cluster), *caps]
        declared = declared_now()
    proc = snakemake(cluster, *args, timeout=600)
    return {"local": local, "cluster": cluster, "cores": cores, "declared": declared, "log": proc.stdout + proc.stderr}


def _slurm_jobs(project: Path) -> dict:
    """SLURM's record of each job whose log the plugin kept: job id -> fields, via squeue."""
    logs = sorted((project / ".snakemake/slurm_logs").rglob("*.log"))
    ids = [p.stem for p in logs if p.stem.isdigit()]
    assert ids, "the plugin left no SLURM log under .snakemake/slurm_logs"
    out = subprocess.run(
        ["squeue", "--states=all", "-h", "-j", ",".join(ids), "-o", "%i|%T|%k|%C|%m|%l|%P|%h"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    jobs = {}
    for line in out.splitlines():
        job_id, state, comment, cpus, mem, limit, partition, oversubscribe = line.split("|")
        jobs[job_id] = {
            "state": state,
            "rule": re.sub(r"^rule_|_wildcards_.*$", "", comment),
            "cpus": int(cpus),
            "mem": mem,
            "limit": limit,
            "partition": partition,
            "oversubscribe": oversubscribe,
        }
    assert set(jobs) == set(ids), f"squeue lists {sorted(jobs)}, the logs name {ids}"
    return jobs


def _minutes(limit: str) -> float:
    """squeue's time limit ([days-]hours:minutes:seconds, or minutes:seconds) in minutes."""
    days, _, clock = limit.rpartition("-")
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return int(days or 0) * 1440 + seconds / 60


def test_every_job_but_the_report_ran_through_slurm_as_its_rule_declares(runs):
    declared = runs["declared"]
    jobs = _slurm_jobs(runs["cluster"])
    by_rule = {job["rule"]: job for job in jobs.values()}
    expected = {rule for rule in declared if rule not in ("all", "report")}
    assert set(by_rule) == expected and len(jobs) == len(expected), sorted(by_rule)
    assert "report" in declared and "report" not in by_rule  # a localrule runs on the submit host
    for rule, job in by_rule.items():
        want = declared[rule]
        assert job["state"] == "COMPLETED", (rule, job)
        assert job["partition"] == "debug", (rule, job)
        assert job["cpus"] >= want["threads"], (rule, job, want)
        assert job["mem"] == f"{want['mem_mb']}M", (rule, job, want)
        assert _minutes(job["limit"]) == want["runtime"], (rule, job, want)
    # Timing jobs take every core the run was given and, by the profile, a node of their own.
    for rule in ("timing_cpu", "timing_gpu"):
        assert declared[rule]["threads"] == runs["cores"]
        assert by_rule[rule]["oversubscribe"] == "NO", by_rule[rule]
    assert by_rule["extract"]["oversubscribe"] != "NO"
    assert "with SLURM jobid" in runs["log"]


def test_lesson3_metrics_equal_a_local_run(runs):
    local, cluster = runs["local"], runs["cluster"]
    path = "results/tiny/lessons/03_ffn_by_hand/metrics.json"
    here, there = (json.loads((p / path).read_text()) for p in (local, cluster))
    assert set(here) == set(there)
    # timing_* are this machine's measurements: two runs differ in them and in nothing else.
    computed = [key for key in here if not key.startswith("timing_")]
    assert len(computed) > 50
    assert {k: there[k] for k in computed} == {k: here[k] for k in computed}
    assert there["model_sha256"] == sha256(local / "tiny.gguf")  # the cluster's project points at the same file


def test_extracted_tensors_are_byte_identical_to_a_local_run(runs):
    local, cluster = runs["local"], runs["cluster"]
    gguf_dir = Path("results/tiny/gguf")
    files = sorted(p.relative_to(local) for p in (local / gguf_dir).rglob("*") if p.is_file())
    assert any(p.suffix == ".npy" for p in files)
    assert sorted(p.relative_to(cluster) for p in (cluster / gguf_dir).rglob("*") if p.is_file()) == files
    for rel in files:
        assert sha256(cluster / rel) == sha256(local / rel), rel


def test_report_is_built_on_the_submit_host_and_verifies(runs):
    from bytesup.report.verify import verify_path

    cluster = runs["cluster"]
    report = cluster / "report" / REPORT_DATE
    for name in ("index.html", "report.md", "manifest.json"):
        assert (report / name).stat().st_size > 0, name
    result = verify_path(report)
    assert result.ok, result.problems[:10]
    assert result.numbers > 0 and result.files > 0
    manifest = json.loads((report / "manifest.json").read_text())
    assert manifest["config"]["model"] == "tiny"
    cited = {entry["path"] for entry in manifest["files"]}
    assert "results/tiny/lessons/03_ffn_by_hand/metrics.json" in cited


def test_gpu_on_asks_slurm_for_a_gpu(runs, tmp_path):
    """Under `gpu: on` the GPU timing job asks sbatch for one GPU; this node has none to give."""
    project = tmp_path / "gpu-project"
    shutil.copytree(runs["cluster"], project, symlinks=True, ignore=shutil.ignore_patterns("slurm_logs", "locks"))
    proc = snakemake(
        project,
        "--profile",
        "workflow/profiles/slurm",
        "--cores",
        str(runs["cores"]),
        *TEST_CLUSTER_ARGS,
        "--config",
        "gpu=on",
        "--until",
        "timing_gpu",
        check=False,
        timeout=300,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    submits = [line.strip() for line in log.splitlines() if line.strip().startswith("sbatch --")]
    # Only the GPU job was submitted (the rest of the copied run is up to date), with a GPU request.
    assert len(submits) == 1 and "--comment rule_timing_gpu" in submits[0], submits
    assert " --gpus=1" in submits[0] and " --exclusive" in submits[0], submits[0]
    # The node has no GPU (no GresTypes in its slurm.conf): SLURM itself refuses the request.
    assert "Invalid generic resource (gres) specification" in log

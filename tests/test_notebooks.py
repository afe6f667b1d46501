"""Every lesson's notebook opens standalone (STYLE §1), one test over the registry.

Run by papermill from workflow/notebooks/ of a project whose workflow has run, with every input
at its default path, each notebook writes every file of its SPEC where its parameter says and
nothing anywhere else, and computes the same metrics as the workflow's own run of it.
"""

import csv
import json
import re
from pathlib import Path

import pytest

from bytesup.lessons import ffn_by_hand, ffn_stores, registry, vectors_neurons

# Numbers a lesson measures with a clock (ms, s, speed-ups): a second run cannot repeat them.
TIMED = re.compile(r"(_ms|_s|speedup|over_cached)(_|$)")


def same(got, want, default_model: str) -> bool:
    """Equal, but for the model file's name (the notebook read the default path, a link to tiny.gguf)."""
    if isinstance(got, str) and isinstance(want, str):
        return got.replace(f"{default_model}.gguf", "tiny.gguf") == want
    return got == want


def rows(path: Path) -> list[dict]:
    """A CSV's rows without the columns measured with a clock."""
    with path.open(encoding="utf-8", newline="") as fh:
        return [{k: v for k, v in row.items() if not TIMED.search(k)} for row in csv.DictReader(fh)]


# The quick set checks the lessons whose own tests run their notebook standalone anyway (the fixture runs
# each once a session); the others' standalone runs, seconds each, are checked with the slow set (CI).
QUICK = {ffn_by_hand.SPEC.id, ffn_stores.SPEC.id, vectors_neurons.SPEC.id}


@pytest.mark.parametrize(
    "lesson", [id if id in QUICK else pytest.param(id, marks=pytest.mark.slow) for id in registry()]
)
def test_the_notebook_runs_standalone_and_computes_what_the_workflow_did(lesson, standalone, finished_tiny):
    spec = registry()[lesson]
    workflow_out = finished_tiny / "results" / "tiny" / "lessons" / lesson
    defaults = standalone.root / "results" / standalone.default_model / "lessons"
    before = sorted(defaults.rglob("*"))
    out = standalone(lesson)

    # every file where its parameter says, and nothing written at the default paths
    assert sorted(p.name for p in out.iterdir()) == sorted(f"x_{name}" for name in spec.files)
    assert sorted(defaults.rglob("*")) == before
    # the same numbers and tables as the workflow's run, but for what a clock measured
    got = json.loads((out / "x_metrics.json").read_text())
    want = json.loads((workflow_out / "metrics.json").read_text())
    assert sorted(got) == sorted(want)
    assert [
        key for key in want if not same(got[key], want[key], standalone.default_model) and not TIMED.search(key)
    ] == []
    for name in spec.files:
        if name.endswith(".csv"):
            assert rows(out / f"x_{name}") == rows(workflow_out / name), name
        elif name.endswith(".png"):
            assert (out / f"x_{name}").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name

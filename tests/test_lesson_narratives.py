"""Every number a lesson's narrative cites is one its metrics.json writes (on the tiny run).

A template's sentence is left out when its value is null: by design where the statement it makes
does not hold for the model (the verdict keys of lesson 3, a Gemma-only fact on a llama), so a
key may be null, but it must be there: a key the lesson never writes is a sentence that can never
show (a typo, or a number someone forgot to compute).
"""

import json
import re
from importlib import resources

import pytest

from bytesup.lessons import registry

SLOT = re.compile(r"\{([a-z0-9_]+:)?([^{}]+)\}")  # {key}, {output:key}: the report's narrative slots


def cited(lesson: str) -> set[str]:
    """The metrics.json keys a lesson's narrative template cites (comments left out)."""
    path = resources.files("bytesup.lessons") / "narrative" / f"{lesson}.md"
    if not path.is_file():
        return set()
    keys = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("#"):
            continue
        keys |= {m.group(2).split("/")[0] for m in SLOT.finditer(line) if not m.group(1)}
    return keys


@pytest.mark.parametrize("lesson", list(registry()))
def test_every_key_a_narrative_cites_is_written(lesson, finished_tiny):
    metrics = json.loads((finished_tiny / "results" / "tiny" / "lessons" / lesson / "metrics.json").read_text())
    assert sorted(cited(lesson) - set(metrics)) == []


def test_the_check_reads_the_templates():
    assert {"vocab_out_over_x_median", "block0_overwrites_angle_deg", "x_length"} <= cited("03_ffn_by_hand")
    assert "claims_csv" not in str(cited("03_ffn_by_hand"))  # {output:key} slots are another file's

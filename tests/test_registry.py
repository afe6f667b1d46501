"""The lesson registry: one SPEC per lesson module, in the course's order, and the files each
lesson needs besides its module (its notebook, its claims file) are where the rules look."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from bytesup.cli import main as cli
from bytesup.config import ConfigError, lesson_ids
from bytesup.lessons import registry
from bytesup.lessons.claims import load_claims
from bytesup.lessons.spec import CAPSTONE, COMPANION, SERIES, LessonSpec

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "workflow" / "notebooks"
CLAIMS = ROOT / "src" / "bytesup" / "lessons" / "claims"
LESSONS = registry()

# The course's series (text 000's first line): lesson n is the same lesson in the course and here.
COURSE_SERIES = {
    1: "What a model is on disk",
    2: "Tokens and embeddings",
    3: "A layer is matrix multiplication",
    4: "The forward pass",
    5: "Generating text",
    6: "Attention and the KV cache",
    7: "The hardware fit",
}


def notebook_parameters(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{path.name}: one cell tagged 'parameters'"
    tree = ast.parse("".join(cells[0]["source"]))
    return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]


def test_the_series_lessons_carry_the_courses_numbers_and_titles():
    series = [s for s in LESSONS.values() if s.kind == SERIES]
    assert series, "no series lesson declared"
    for spec in series:
        n = int(spec.position)
        assert spec.position == n and spec.id.startswith(f"{n:02d}_"), spec.id
        assert spec.title.lower() == COURSE_SERIES[n].lower(), spec.id
        assert spec.heading.startswith(f"Lesson {n} \u00b7 ")


def test_the_registry_is_in_the_courses_order_companions_beside_their_lesson_and_the_capstone_last():
    specs = list(LESSONS.values())
    assert [s.position for s in specs] == sorted(s.position for s in specs)
    assert specs[-1].kind == CAPSTONE and specs[-1].heading.startswith("Capstone \u00b7 ")
    numbered = {f"{int(s.position):02d}_" for s in specs if s.kind == SERIES}
    for spec in specs:
        if spec.kind == COMPANION:  # an id that cannot be mistaken for a lesson of the series
            assert not any(spec.id.startswith(p) for p in numbered), spec.id
            assert "text 0" not in spec.source.lower()  # said in words a reader understands
    assert "00_vectors_neurons_nonlinearity" in LESSONS and LESSONS["00_vectors_neurons_nonlinearity"].kind == COMPANION
    assert LESSONS["03b_what_the_ffn_stores"].heading.startswith("Lesson 3, deep dive \u00b7 ")


@pytest.mark.parametrize("lesson", list(LESSONS))
def test_each_lesson_has_its_notebook_declaring_exactly_its_parameters(lesson):
    spec = LESSONS[lesson]
    path = NOTEBOOKS / f"{lesson}.ipynb"
    assert path.is_file()
    assert sorted(notebook_parameters(path)) == sorted(spec.parameter_names())
    assert (CLAIMS / f"{lesson}.yaml").is_file()
    for headline in spec.headlines:
        assert headline.label and headline.key
    claim_ids = {c.claim_id for c in load_claims(lesson)}
    assert set(spec.compare or ()) <= claim_ids, "compare names claims of the lesson's claims file"


def test_a_spec_keeps_its_section_short():
    base = dict(id="x", title="x", kind=SERIES, position=1, source="x", tables=("a.csv", "b.csv", "c.csv"))
    LessonSpec(**base, key_tables=("a.csv", "b.csv"), figures={"f.png": "F"}, key_figures=("f.png",))
    for bad in (
        {"key_tables": ("a.csv", "b.csv", "c.csv")},
        {"key_tables": ("z.csv",)},
        {"key_figures": ("g.png",)},
        {"compare": tuple("abcdefghi")},
    ):
        with pytest.raises(ValueError, match="lesson x"):
            LessonSpec(**base, **bad)


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_committed_notebooks_carry_no_outputs_and_belong_to_a_lesson(path):
    nb = json.loads(path.read_text())
    ids = [cell.get("id") for cell in nb["cells"]]  # nbformat 4.5: every cell has one (else a random one per run)
    assert None not in ids and len(set(ids)) == len(ids), path.name
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, path.name
    assert path.stem in LESSONS, f"{path.name} is no lesson's notebook (no module declares its SPEC)"


def test_no_notebook_sets_up_matplotlib_or_names_an_output_file():
    for path in NOTEBOOKS.glob("*.ipynb"):
        source = "".join(
            "".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"
        )
        assert "matplotlib.use" not in source, path.name
        spec = LESSONS[path.stem]
        body = source.split("\n", 1)[1] if source else ""
        for name in spec.files:
            assert f'"{name}"' not in body and f"'{name}'" not in body, f"{path.name} writes {name} by name"


def test_config_takes_all_or_known_ids_in_the_courses_order():
    assert lesson_ids("all") == list(LESSONS)
    some = [list(LESSONS)[-1], list(LESSONS)[0]]
    assert lesson_ids(some) == [list(LESSONS)[0], list(LESSONS)[-1]]
    with pytest.raises(ConfigError, match=r"^lessons: '07_decode_is_memory_bound' not known; known lessons: "):
        lesson_ids(["07_decode_is_memory_bound"])


def test_a_spec_refuses_unknown_run_files_and_kinds():
    with pytest.raises(ValueError, match="reads unknown run files"):
        LessonSpec(id="x", title="x", kind=SERIES, position=9, source="s", reads=("weights_npz",))
    with pytest.raises(ValueError, match="kind must be"):
        LessonSpec(id="x", title="x", kind="appendix", position=9, source="s")


def test_a_lesson_for_one_architecture_refuses_another_in_one_line():
    spec = LessonSpec(id="x", title="x", kind=SERIES, position=9, source="s", architectures=("llama",))
    assert spec.refusal("llama") is None
    why = spec.refusal("gemma3")
    assert "\n" not in why and "gemma3" in why and "llama" in why


def test_a_file_the_forward_pass_cannot_follow_stops_the_lessons_that_run_it(tmp_path):
    """A llama file holding a tensor the recipe would ignore: the lessons that run the network are
    not run (one line, the tensor named), the others are; a file the recipe follows stops none."""
    from bytesup.gguf.file import GGUFFile
    from bytesup.model.arch import recipe_problem
    from bytesup.model.synthetic import write_tiny_llama

    with GGUFFile(write_tiny_llama(tmp_path / "tiny.gguf")) as f:
        metadata, names = dict(f.metadata), [t.name for t in f.tensors]
    assert recipe_problem(metadata, names) is None
    odd = recipe_problem(metadata, [*names, "blk.0.mystery.weight"])
    assert odd == "tensor 'blk.0.mystery.weight' is not part of the llama recipe (bytesup.model.arch): the forward" \
        " pass would ignore it, so it refuses the file"  # fmt: skip
    refused = {lesson for lesson, spec in LESSONS.items() if spec.refusal("llama", odd)}
    assert refused == {lesson for lesson, spec in LESSONS.items() if spec.runs_model} and len(refused) >= 4
    assert LESSONS["04_the_forward_pass"].refusal("llama", odd).endswith(odd)
    assert {lesson for lesson, spec in LESSONS.items() if spec.refusal("llama", None)} == set()


def test_bytesup_lessons_lists_every_lesson_in_order(capsys):
    assert cli(["lessons"]) == 0
    out = capsys.readouterr().out
    positions = [out.index(f"{lesson}\n") for lesson in LESSONS]
    assert positions == sorted(positions)

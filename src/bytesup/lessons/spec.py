"""A lesson, declared once: what it is, where it sits in the course, what it reads and writes.

Every lesson module defines ``SPEC = LessonSpec(...)``; the registry (``bytesup.lessons.registry``)
finds them. Everything else derives from the spec:

    workflow/rules/lessons.smk   one rule per lesson: inputs from ``reads``, outputs from
                                 ``outputs()``, the config keys in ``config_keys`` as params
    workflow/rules/extract.smk   the tensors to dequantize: the union of ``tensors``
    config validation            the known lesson ids and their default order
    the report                   section order and title, headline numbers, figure captions, and
                                 its layout: the claims compared at the top (``compare``), the
                                 figures and short tables in the section (``key_figures``,
                                 ``key_tables``); everything else goes to the lesson's data page
    tests                        the rerun job sets, the notebooks' parameter cells

Adding a lesson is its module (with its SPEC), its notebook ``workflow/notebooks/<id>.ipynb``,
its claims file ``claims/<id>.yaml`` and its tests; nothing else.

Notebook parameters: every file the lesson reads or writes reaches its notebook as a papermill
parameter named after the file (``metrics.json`` -> ``metrics_json``), plus ``model``,
``model_sha256`` and the config keys the spec lists. ``parameter_names()`` is that list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where a lesson sits: a lesson of the course's series, a companion text from another series,
# or the capstone that closes the series.
SERIES, COMPANION, CAPSTONE = "series", "companion", "capstone"

# Files a lesson may read, by the notebook parameter that carries them -> "rule.output" that
# writes them. The rule file resolves each to rules.<rule>.output.<name>.
RUN_FILES = {
    "model_gguf": "fetch.gguf",
    "metadata_json": "extract.metadata",
    "tensors_index": "extract.index",
    "tensors_csv": "extract.tensors_csv",
    "timing_summary": "timing_cpu.summary",
    "timing_sweep": "timing_cpu.sweep",
    "gpu_summary": "timing_gpu.summary",
    "gpu_sweep": "timing_gpu.sweep",
    "decode_summary": "timing_decode.summary",
    "decode_prefill": "timing_decode.prefill",
}

ALWAYS_PARAMETERS = ("model", "model_sha256")

# The report's limits for a lesson's section (its data page holds the rest).
COMPARE = 8  # claims side by side at the top
KEY_TABLES = 2  # short tables
KEY_TABLE_ROWS = 12  # rows of each


def parameter(file_name: str) -> str:
    """The notebook parameter (and rule output name) of a file a lesson writes."""
    return file_name.replace(".", "_")


@dataclass(frozen=True)
class Headline:
    """One headline number of a lesson: a metrics.json key, a label a reader understands,
    its unit ("" for a count or a plain ratio) and what kind of number it is, for the report's one
    rule per kind (bytesup.report.formats): fmt "%" a share, "d" an exact count, "cut:N" a long
    text; None (or a bare precision such as ".3f", which the report does not use) a number written
    by the one rule, four significant digits. A unit of bytes, kB, MB or GB makes it a size, written
    with the one prefix its size calls for (96.58 MB), wherever it is cited."""

    key: str
    label: str
    unit: str = ""
    fmt: str | None = None

    @property
    def text(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


@dataclass(frozen=True)
class LessonSpec:
    id: str  # the notebook's and the claims file's name; ids of series lessons start with their number
    title: str
    kind: str  # SERIES, COMPANION or CAPSTONE
    position: float  # order in the course: series lesson n at n, its companions just after (3.5), capstone last
    source: str  # where the text comes from, in words a reader understands
    reads: tuple[str, ...] = ()  # keys of RUN_FILES
    tensors: tuple[str, ...] = ()  # extract-stage patterns ("?" = when present)
    tables: tuple[str, ...] = ()  # CSV files it writes besides metrics.json and claims.csv
    figures: dict[str, str] = field(default_factory=dict)  # PNG file -> caption
    headlines: tuple[Headline, ...] = ()
    config_keys: tuple[str, ...] = ()  # config keys passed as notebook parameters (token, seed, ...)
    architectures: tuple[str, ...] | None = None  # general.architecture values it follows; None: any file
    runs_model: bool = False  # runs the forward pass: its job also holds up to forward.resident_budget_mb
    mem_mb: int = 2000  # peak memory of the job besides that, true for the course's specimen (7.16 GB Q8_0)
    runtime: int = 30  # minutes
    # How the report lays the lesson out: its section opens with the course's numbers beside this
    # run's, then the narrative, the key figures and at most KEY_TABLES short tables; every table,
    # number and claim is on the lesson's data page. The defaults need nothing from a lesson.
    compare: tuple[str, ...] | None = None  # claim ids side by side at the top (COMPARE at most); None: picked
    key_figures: tuple[str, ...] | None = None  # of `figures`, those in the section; None: all of them
    key_tables: tuple[str, ...] = ()  # of `tables`, those in the section (their first KEY_TABLE_ROWS rows)

    def __post_init__(self):
        if self.kind not in (SERIES, COMPANION, CAPSTONE):
            raise ValueError(f"lesson {self.id}: kind must be series, companion or capstone, not {self.kind!r}")
        unknown = [name for name in self.reads if name not in RUN_FILES]
        if unknown:
            raise ValueError(f"lesson {self.id}: reads unknown run files {unknown}; known: {sorted(RUN_FILES)}")
        if not set(self.key_tables) <= set(self.tables) or len(self.key_tables) > KEY_TABLES:
            raise ValueError(f"lesson {self.id}: key_tables must be at most {KEY_TABLES} of its tables")
        if not set(self.key_figures or ()) <= set(self.figures):
            raise ValueError(f"lesson {self.id}: key_figures must be some of its figures")
        if self.compare is not None and len(self.compare) > COMPARE:
            raise ValueError(f"lesson {self.id}: compare lists at most {COMPARE} claims")

    @property
    def files(self) -> tuple[str, ...]:
        """Every file the lesson writes into its folder, the executed notebook aside."""
        return ("metrics.json", "claims.csv", *self.tables, *self.figures)

    def outputs(self, folder: str) -> dict[str, str]:
        """Parameter name -> path of every file it writes into `folder`, the notebook last."""
        outs = {parameter(name): f"{folder}/{name}" for name in self.files}
        outs["notebook"] = f"{folder}/{self.id}.ipynb"
        return outs

    def parameter_names(self) -> list[str]:
        """Exactly the parameters its rule passes to the notebook (the notebook declares these)."""
        return [*ALWAYS_PARAMETERS, *self.config_keys, *self.reads, *(parameter(n) for n in self.files)]

    @property
    def heading(self) -> str:
        """The section title, numbered the way the course numbers it."""
        if self.kind == SERIES:
            return f"Lesson {self.position:g} \u00b7 {self.title}"
        if self.kind == CAPSTONE:
            return f"Capstone \u00b7 {self.title}"
        where = f"Lesson {int(self.position)}, deep dive" if self.position >= 1 else "Background"
        return f"{where} \u00b7 {self.title}"

    def follows(self, architecture: str | None) -> bool:
        return self.architectures is None or architecture in self.architectures

    def refusal(self, architecture: str | None, recipe_problem: str | None = None) -> str | None:
        """None when the lesson follows this architecture, else the one line saying why it does not run.

        recipe_problem (bytesup.model.arch.recipe_problem): why the forward pass cannot follow this
        file of a known architecture; a lesson that runs the network is then not run either."""
        if not self.follows(architecture):
            return (
                f"it follows {', '.join(self.architectures)} only, and this model's architecture is "
                f"{architecture!r}; it is not run rather than apply that recipe to another architecture"
            )
        if recipe_problem and self.runs_model:
            return f"it runs the network, which cannot follow this file: {recipe_problem}"
        return None

# Validation, model lookup and target helpers shared by every rule file.
import datetime
import sys

from bytesup.config import ConfigError, model_spec, validate
from bytesup.lessons import read_metadata, registry
from bytesup.runlock import clear_owner, record_owner, remove_stale_lock
from snakemake.exceptions import WorkflowError

LESSONS = registry()  # every lesson the package declares, in the course's order

try:
    validate(config, workflow.source_path("../schemas/config.schema.yaml"))
    MODEL = config["model"]
    MODEL_SPEC = model_spec(config, MODEL)
except ConfigError as err:
    sys.exit(f"config error: {err}")

# A run killed with SIGKILL leaves Snakemake's lock behind; a live run's lock is kept.
_stale = remove_stale_lock()
if _stale:
    print(_stale, file=sys.stderr)


onstart:
    record_owner()


onsuccess:
    clear_owner()


onerror:
    clear_owner()


# The report's date is the one volatile value that shapes a path; it enters only
# through the report rule (upstream outputs never depend on it).
REPORT_DATE = config.get("report_date") or datetime.date.today().isoformat()


wildcard_constraints:
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    date=r"\d{4}-\d{2}-\d{2}",


def gguf_path(wildcards=None):
    return f"resources/models/{MODEL}.gguf"


def report_targets():
    """The dated report, and the timing outputs: the report needs them too, but they are named here
    so that `snakemake -n` lists the timing jobs before the extract checkpoint has run.
    """
    names = ("index.html", "report.md", "manifest.json", "claims.csv")
    dated = [f"report/{REPORT_DATE}/{name}" for name in names] + [
        f"report/{REPORT_DATE}.zip"
    ]
    timing = [
        f"results/timing/{MODEL}/sweep.png",
        f"results/timing/{MODEL}/cpu/decode.json",
    ]
    return dated + timing


# --- fetch ---------------------------------------------------------------------------


def fetch_inputs(wildcards):
    """A local model is an input, so replacing the file reruns everything downstream."""
    spec = model_spec(config, wildcards.model)
    return [spec["path"]] if spec["source"] == "path" else []


def fetch_spec(wildcards):
    return model_spec(config, wildcards.model)


# --- extract -------------------------------------------------------------------------


def extract_patterns():
    """The tensors the selected lessons read, in a stable order: a lesson's "?" pattern is
    optional unless another lesson needs the same tensors for sure."""
    patterns = []
    for lesson in config["lessons"]:
        for p in LESSONS[lesson].tensors:
            if p not in patterns:
                patterns.append(p)
    return [p for p in patterns if not (p.startswith("?") and p[1:] in patterns)]


# --- lessons -------------------------------------------------------------------------


def lesson_mem_mb(spec):
    """A lesson job's memory: its own, plus the float32 weights it may keep resident."""
    return spec.mem_mb + (
        config["forward"]["resident_budget_mb"] if spec.runs_model else 0
    )


def model_architecture(model):
    """general.architecture of a model, read from the extract checkpoint's metadata.json."""
    path = checkpoints.extract.get(model=model).output.metadata
    return read_metadata(path).get("general.architecture")


def lessons_run(model):
    """(lessons that run, {lesson: why it does not}) for a model, from its architecture."""
    arch = model_architecture(model)
    run, refused = [], {}
    for lesson in config["lessons"]:
        why = LESSONS[lesson].refusal(arch)
        if why:
            refused[lesson] = why
        else:
            run.append(lesson)
    return run, refused


# --- report --------------------------------------------------------------------------


def named_outputs(rule_name, **wildcards):
    """{output name: path} of a rule, its wildcards filled in."""
    return {
        name: path.format(**wildcards)
        for name, path in getattr(rules, rule_name).output.items()
    }


def every_core():
    """The cores the run was given (the timing rules take them all, so nothing shares the machine).
    None are given to `snakemake --report`, `--lint` or a dry run, which run no job: 1 then.
    """
    try:
        return workflow.cores
    except WorkflowError:
        return 1


def report_sources(wildcards):
    """Every file the report may cite, by the rule that writes it and that rule's output name."""
    m = MODEL
    upstream = ("fetch", "timing_cpu", "timing_decode", "timing_gpu", "timing_figure")
    sources = {name: named_outputs(name, model=m) for name in upstream}
    extract = named_outputs("extract", model=m)
    # the .npy files: the report cites extract.json, which hashes each
    extract.pop("tensors_dir")
    sources["extract"] = extract
    for lesson in lessons_run(m)[0]:
        # the executed notebook too: the report renders it as a page of its own
        outs = named_outputs(f"lesson_{lesson}", model=m)
        sources[f"lesson_{lesson}"] = outs
    # the model itself is cited by its record (name, size, sha256)
    sources["fetch"].pop("gguf")
    return sources


def report_input_files(wildcards):
    return [
        path for outs in report_sources(wildcards).values() for path in outs.values()
    ]


def lessons_refused(wildcards):
    return lessons_run(MODEL)[1]

# Validation, model lookup and target helpers shared by every rule file.
import datetime
import sys

from bytesup.config import ConfigError, model_spec, validate
from bytesup.runlock import clear_owner, record_owner, remove_stale_lock

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
    lesson=r"\d\d_[a-z0-9_]+",
    date=r"\d{4}-\d{2}-\d{2}",


def gguf_path(wildcards=None):
    return f"resources/models/{MODEL}.gguf"


def report_targets():
    names = ("index.html", "report.md", "manifest.json", "claims.csv")
    return [f"report/{REPORT_DATE}/{name}" for name in names] + [f"report/{REPORT_DATE}.zip"]


# --- fetch ---------------------------------------------------------------------------


def fetch_inputs(wildcards):
    """A local model is an input, so replacing the file reruns everything downstream."""
    spec = model_spec(config, wildcards.model)
    return [spec["path"]] if spec["source"] == "path" else []


def fetch_spec(wildcards):
    return model_spec(config, wildcards.model)


# --- report --------------------------------------------------------------------------


def report_inputs(wildcards):
    """Every file the report may cite, by the rule that writes it (rule name -> paths)."""
    m = MODEL
    by_rule = {
        "fetch": [f"resources/models/{m}.json"],
        "extract": [
            f"results/{m}/gguf/metadata.json",
            f"results/{m}/gguf/tensors.csv",
            f"results/{m}/gguf/extract.json",
        ],
        "timing_cpu": expand(rules.timing_cpu.output, model=m),
        "timing_gpu": expand(rules.timing_gpu.output, model=m),
        "timing_figure": expand(rules.timing_figure.output, model=m),
    }
    for lesson in config["lessons"]:
        outs = lesson_outputs(lesson, m)
        outs.pop("notebook")
        by_rule[f"lesson_{lesson}"] = list(outs.values())
    return by_rule


def report_input_files(wildcards):
    return [path for paths in report_inputs(wildcards).values() for path in paths]


def report_sources(wildcards):
    return {p: rule for rule, ps in report_inputs(wildcards).items() for p in ps}


def report_lessons(wildcards):
    return {lesson: lesson_outputs(lesson, MODEL) for lesson in config["lessons"]}

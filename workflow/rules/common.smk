# Validation, model lookup and target helpers shared by every rule file.
import datetime
import sys
from pathlib import Path

from bytesup.config import ConfigError, model_spec, validate
from bytesup.errors import BytesupError
from bytesup.run.fetch import local_files
from bytesup.run.model_cache import cached_model_problem
from bytesup.run.paths import not_a_file
from bytesup.lessons import read_metadata, registry
from bytesup.model.arch import recipe_problem
from bytesup.model.param_counts import read_tensor_table
from bytesup.run.runlock import clear_owner, record_owner, remove_stale_lock
from snakemake.exceptions import WorkflowError

LESSONS = registry()  # every lesson the package declares, in the course's order

# Snakemake writes the interpreter's path into each job's command line unquoted (an open upstream
# bug), so when it holds a space every job fails (bash: No such file or directory). That is
# the case of a checkout whose path has a space once `make` puts its .venv inside it.
if any(c.isspace() for c in sys.executable):
    sys.exit(
        f"error: the path of the Python running Snakemake has a space in it ({sys.executable!r}); Snakemake "
        "does not quote it in its jobs' commands, so every job would fail: move the project (and its .venv) "
        "to a path without spaces, or use a Python installed at one, and run again"
    )

# Every rule's benchmark file (benchmarks/) records its job's wall time and peak memory. Snakemake
# samples a job's memory every 0.5 s for its first 15 s, then only every 30 s (snakemake.benchmark),
# so a lesson that peaks 20 s in would show a fraction of its peak: sample every 0.5 s throughout.
BENCHMARK_INTERVAL_S = 0.5
try:
    from snakemake import benchmark as _snakemake_benchmark

    _snakemake_benchmark.benchmarked.__wrapped__.__defaults__ = (
        None,
        None,
        BENCHMARK_INTERVAL_S,
    )
except (AttributeError, TypeError):
    pass  # another Snakemake: its own sampling, and long jobs' peaks may read low

try:
    validate(config, workflow.source_path("../schemas/config.schema.yaml"))
    MODEL = config["model"]
    MODEL_SPEC = model_spec(config, MODEL)
    for _local in local_files(MODEL, MODEL_SPEC):  # a split model's every part
        if not_a_file(_local):
            raise ConfigError(
                f"models.{MODEL}.path: {_local!r} is not a file ({not_a_file(_local)}); put the model there or fix "
                "the path in config/config.yaml (the outputs already made from it are kept)"
            )
# a ConfigError, or the fetch's word on a split model's path
except BytesupError as err:
    sys.exit(f"config error: {err}")

if workflow.is_main_process:
    # A run killed with SIGKILL leaves Snakemake's lock (and maybe its jobs) behind; a live
    # run's lock is kept. Its left-over jobs are ended first, so nothing writes beside this run.
    _stale = remove_stale_lock()
    if _stale:
        print(_stale, file=sys.stderr)
    # The cached model is checked before any stage reads it (hashed in full only when it changed
    # on disk since it was last verified); one that is damaged, truncated or gone is fetched again.
    _gguf = Path(f"resources/models/{MODEL}.gguf")
    _record = Path(f"resources/models/{MODEL}.json")
    _problem = cached_model_problem(MODEL, MODEL_SPEC, _gguf, _record)
    if _problem:
        print(
            f"{_problem}; fetching it again, then every stage after it reruns",
            file=sys.stderr,
        )
        # without its output (the record) the fetch runs first, and every stage after it
        _record.unlink(missing_ok=True)


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


def shown_model_path(model):
    """The model's file as the user knows it: their own file for a local model, else the cache."""
    spec = model_spec(config, model)
    return (
        spec["path"] if spec["source"] == "path" else f"resources/models/{model}.gguf"
    )


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


def kept_outputs():
    """Outputs that no later stage reads (the model and its record, the extracted tensors), named as
    targets, so that one deleted by hand is made again instead of "Nothing to be done". Static, not
    behind the extract checkpoint: a checkpoint only checks its first output before it is trusted.
    """
    fetch = named_outputs("fetch", model=MODEL)
    return [
        fetch["gguf"],
        fetch["record"],
        named_outputs("extract", model=MODEL)["tensors_dir"],
    ]


def lesson_notebooks(wildcards):
    """Each lesson's executed notebook, which no later stage reads either, as a target too."""
    return [
        named_outputs(f"lesson_{lesson}", model=MODEL)["notebook"]
        for lesson in lessons_run(MODEL)[0]
    ]


# --- fetch ---------------------------------------------------------------------------


def redo_incomplete():
    """Redo the outputs a cut-off job left (kill, Ctrl-C, power), as --rerun-incomplete does.

    The default workflow profile's `rerun-incomplete: true` is not enough: Snakemake reads a default
    workflow profile only from profiles/default beside the Snakefile or in the working directory,
    and the Snakefile sits at the top. Nor can the Snakefile set it while it is read (the DAG's
    settings are attached after that), so this runs from the fetch's input function: every DAG holds
    the fetch, and Snakemake evaluates input functions before it checks for incomplete outputs.
    """
    if workflow.dag_settings is not None:
        workflow.dag_settings.force_incomplete = True


def fetch_inputs(wildcards):
    """A local model is an input, so replacing the file reruns everything downstream."""
    redo_incomplete()
    return local_files(wildcards.model, model_spec(config, wildcards.model))


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


# lessons_run's answers, by model and the two files it reads (their size and change time): the
# DAG asks about ten times per model, and metadata.json, with the vocabulary, takes ~20 ms to parse
_LESSONS_RUN = {}


def lessons_run(model):
    """(lessons that run, {lesson: why it does not}) for a model, from its architecture and whether
    the forward pass can follow its file (both read from the extract checkpoint's outputs).
    """
    outputs = checkpoints.extract.get(model=model).output
    stats = [Path(p).stat() for p in (outputs.metadata, outputs.tensors_csv)]
    key = (model, *((s.st_size, s.st_mtime_ns) for s in stats))
    if key not in _LESSONS_RUN:
        metadata = read_metadata(outputs.metadata)
        arch = metadata.get("general.architecture")
        problem = recipe_problem(
            metadata, [row["name"] for row in read_tensor_table(outputs.tensors_csv)]
        )
        run, refused = [], {}
        for lesson in config["lessons"]:
            why = LESSONS[lesson].refusal(arch, problem)
            if why:
                refused[lesson] = why
            else:
                run.append(lesson)
        _LESSONS_RUN[key] = run, refused
    run, refused = _LESSONS_RUN[key]
    return list(run), dict(refused)


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


def declared_resource(rule, name):
    """A rule's declared resource (mem_mb, runtime) as a number; None when not a plain number."""
    resource = rule.resources.get(name)
    value = getattr(
        resource, "raw", resource
    )  # Snakemake 9 wraps each value in a Resource
    return value if isinstance(value, int) else None


def report_jobs(wildcards):
    """{job: its benchmark file, declared mem_mb and runtime} for every job upstream of the report
    (bytesup.report.job_resources puts the measured peak and wall time beside them)."""
    names = [
        "fetch",
        "extract",
        "timing_cpu",
        "timing_decode",
        "timing_gpu",
        "timing_figure",
    ]
    names += [f"lesson_{lesson}" for lesson in lessons_run(MODEL)[0]]
    jobs = {}
    for name in names:
        proxy = getattr(rules, name)
        jobs[name] = {
            "benchmark": str(proxy.benchmark).format(model=MODEL),
            "mem_mb": declared_resource(proxy.rule, "mem_mb"),
            "runtime": declared_resource(proxy.rule, "runtime"),
        }
    return jobs

# Stage 3: one papermill notebook per lesson. The lessons are the registry of the package
# (bytesup.lessons.registry(): each lesson module's SPEC); nothing here names a lesson.
# The source notebook is an input; the executed notebook and every file it writes are outputs,
# and every one of those paths reaches the notebook as a papermill parameter of the same name.
from bytesup.lessons.spec import RUN_FILES


def run_file(name):
    """A file a lesson reads, by its notebook parameter: the named output of the rule writing it."""
    rule_name, output = RUN_FILES[name].split(".")
    return getattr(getattr(rules, rule_name).output, output)


def lesson_rule_outputs(spec):
    """The lesson's outputs by parameter name, its figures flagged for `snakemake --report`."""
    outs = spec.outputs(f"results/{{model}}/lessons/{spec.id}")
    for name in spec.figures:
        key = name.replace(".", "_")
        outs[key] = report(
            outs[key],
            caption="../report/lesson_figure.rst",
            category="Lessons",
            subcategory=spec.heading,
            labels={"lesson": spec.id, "figure": name},
        )
    return outs


for _spec in LESSONS.values():

    rule:
        name:
            f"lesson_{_spec.id}"
        input:
            **{name: run_file(name) for name in _spec.reads},
            notebook=f"workflow/notebooks/{_spec.id}.ipynb",
            model_record=rules.fetch.output.record,
        output:
            **lesson_rule_outputs(_spec),
        log:
            notebook=f"logs/lessons/{{model}}/{_spec.id}.ipynb",
        benchmark:
            f"benchmarks/lessons/{{model}}/{_spec.id}.tsv"
        conda:
            "../envs/bytesup.yaml"
        resources:
            mem_mb=lesson_mem_mb(_spec),
            runtime=_spec.runtime,
        params:
            lesson=_spec.id,
            heading=_spec.heading,
            captions=_spec.figures,
            settings={key: config[key] for key in _spec.config_keys},
            shown=lambda wc: shown_model_path(wc.model),
        script:
            "../scripts/run_notebook.py"

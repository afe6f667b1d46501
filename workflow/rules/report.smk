# Stage 5: the dated report. Dates, hostnames and versions enter here and nowhere upstream.


def report_inputs(wildcards):
    """Every file the report may cite, by the rule that writes it (rule name -> paths)."""
    m = MODEL
    by_rule = {
        "fetch": [f"resources/models/{m}.json"],
        "extract": [f"results/{m}/gguf/metadata.json", f"results/{m}/gguf/tensors.csv", f"results/{m}/gguf/extract.json"],
        "timing_cpu": expand(rules.timing_cpu.output, model=m),
        "timing_gpu": expand(rules.timing_gpu.output, model=m),
    }
    for lesson in config["lessons"]:
        outs = lesson_outputs(lesson, m)
        outs.pop("notebook")
        by_rule[f"lesson_{lesson}"] = list(outs.values())
    return by_rule


def report_input_files(wildcards):
    return [path for paths in report_inputs(wildcards).values() for path in paths]


rule report:
    input:
        report_input_files,
    output:
        html="report/{date}/index.html",
        md="report/{date}/report.md",
        manifest="report/{date}/manifest.json",
    params:
        sources=lambda wc: {p: rule for rule, ps in report_inputs(wc).items() for p in ps},
        model=MODEL,
        lessons=lambda wc: {lesson: lesson_outputs(lesson, MODEL) for lesson in config["lessons"]},
    log:
        "logs/report/{date}.log",
    localrule: True
    script:
        "../scripts/report.py"

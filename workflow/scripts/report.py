"""Build the dated report from the run's outputs (called by the report rule).

The report is built in report/.<date>.building/ (same depth, so relative links hold), then
moved into place by bytesup.report.publish.publish, which keeps an earlier report of the same date
aside as report/<date>.<n>/ (and its archive as report/<date>.<n>.zip) instead of
overwriting it. The rule's outputs are flagged update(), so Snakemake leaves the earlier
report where it is until this script has moved it.
"""

import errno
import logging
import shutil
import sys
from pathlib import Path

from bytesup.errors import BytesupError
from bytesup.report import build, job_resources, provenance, publish
from bytesup.run import joblog

sm = snakemake  # noqa: F821  (injected by Snakemake's script directive)
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(message)s")

started = provenance.now()
sources = {rule: dict(outputs) for rule, outputs in sm.params.sources.items()}  # {rule: {output name: path}}
run = {
    "date": sm.wildcards.date,
    "started": started,
    "config": sm.config,
    "machine": provenance.machine(),
    "packages": provenance.package_versions(),
    "git_describe": provenance.git_describe(),
    "sources": sources,
    "refused": dict(sm.params.refused),
    "job_times": {path: provenance.job_times(path) for outputs in sources.values() for path in outputs.values()},
    # each job's wall time and peak memory (its benchmark file) beside its declared runtime and mem_mb
    "job_resources": job_resources.job_rows({job: dict(d) for job, d in sm.params.jobs.items()}),
}
for line in job_resources.over(run["job_resources"]):
    logging.warning("over its declared resources: %s", line)
for lesson, why in run["refused"].items():
    logging.info("lesson %s did not run: %s", lesson, why)

final = Path(sm.output.html).parent
stage = final.with_name(f".{final.name}.building")
shutil.rmtree(stage, ignore_errors=True)
try:
    manifest = build.build(run, stage)
    kept = publish.publish(stage, final, Path(sm.output.archive))
except BytesupError as err:  # a cited key missing from its file, a benchmark unreadable: one line
    shutil.rmtree(stage, ignore_errors=True)
    logging.error("%s", err)
    sys.exit(f"error: {err}")
except OSError as err:
    shutil.rmtree(stage, ignore_errors=True)
    if err.errno != errno.ENOSPC:
        raise
    message = joblog.no_space_message("report", err)  # one line; nothing half-written is left
    logging.error("%s", message)
    sys.exit(f"error: {message}")
except Exception:
    shutil.rmtree(stage, ignore_errors=True)
    raise
logging.info("report: %d files cited, %d numbers", len(manifest["files"]), len(manifest["citations"]))
if manifest["inputs_not_cited"]:
    logging.info("inputs the report does not cite: %s", ", ".join(manifest["inputs_not_cited"]))
if kept:
    logging.info("the earlier report of %s was kept as %s", sm.wildcards.date, kept)
    print(f"earlier report of {sm.wildcards.date} kept as {kept}/ (and {kept}.zip)", file=sys.stderr)
print(f"report written to {sm.output.html} (archive {sm.output.archive})", file=sys.stderr)

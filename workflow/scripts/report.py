"""Build the dated report from the run's outputs (called by the report rule)."""

import datetime
import logging
import sys
from pathlib import Path

from bytesup import provenance, report

sm = snakemake  # noqa: F821  (injected by Snakemake's script directive)
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(message)s")

model = sm.params.model
sources = dict(sm.params.sources)
lessons = {
    lesson: {Path(path).name: path for name, path in files.items() if name != "notebook"}
    for lesson, files in sm.params.lessons.items()
}
timing = {}
for path in sources:
    p = Path(path)
    if p.parts[:2] == ("results", "timing"):
        kind = p.parent.name  # cpu or gpu
        timing[f"{kind}_summary" if p.name == "summary.json" else p.stem + "_csv" if kind == "cpu" else f"gpu_{p.stem}_csv"] = path

machine = provenance.machine()
run = {
    "date": sm.wildcards.date,
    "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    "config": sm.config,
    "machine": machine,
    "packages": provenance.package_versions(),
    "git_describe": provenance.git_describe(),
    "model_record": f"resources/models/{model}.json",
    "sources": sources,
    "lessons": lessons,
    "timing": timing,
}
manifest = report.build(run, Path(sm.output.html).parent)
logging.info("report: %d files cited, %d numbers", len(manifest["files"]), len(manifest["citations"]))
print(f"report written to {sm.output.html}", file=sys.stderr)

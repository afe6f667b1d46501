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
    return [f"report/{REPORT_DATE}/{name}" for name in ("index.html", "report.md", "manifest.json")]

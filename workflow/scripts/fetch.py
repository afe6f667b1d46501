"""Fetch one model for rule `fetch`: the verified GGUF at output.gguf, its record at output.record.

All logic lives in bytesup.run.fetch; this only wires the rule's params, outputs and log to it.
After the checksum, the file's GGUF structure is validated too, so a malformed file stops
the workflow here, before any stage reads it. An expected failure ends the job with its
one-line message, without a traceback, and leaves no model behind. Messages about a local
model (source: path) name the user's file, not the copy or link under resources/.
"""

from pathlib import Path

from bytesup.gguf.file import GGUFFile, GGUFFormatError
from bytesup.run.fetch import fetch_model, mark_verified, write_record
from bytesup.run.joblog import job_logging


def main(sm) -> None:
    dest = Path(sm.output.gguf)
    spec = dict(sm.params.spec)
    shown = spec["path"] if spec.get("source") == "path" else str(dest)
    with job_logging(sm.log[0] if sm.log else None, shown={str(dest): shown}) as logger:
        record = fetch_model(sm.params.name, spec, dest)
        try:
            with GGUFFile(dest) as gguf:
                logger.info(
                    "%s: GGUF v%d, %d tensors, %d metadata keys",
                    shown,
                    gguf.version,
                    len(gguf.tensors),
                    len(gguf.metadata),
                )
        except GGUFFormatError:
            dest.unlink(missing_ok=True)  # a malformed model is not left for a later stage to read
            raise
        write_record(record, Path(sm.output.record))
        mark_verified(dest, record["sha256"])  # the next run's check of the cache need not re-read it


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

"""Fetch one model for rule `fetch`: the verified GGUF at output.gguf, its record at output.record.

All logic lives in bytesup.run.fetch; this only wires the rule's params, outputs and log to it.
After the checksum, the file's GGUF structure is validated too (every part of a split model), so a
malformed file stops the workflow here, before any stage reads it. An expected failure ends the job
with its one-line message, without a traceback, and leaves no model behind. Messages about a local
model (source: path) name the user's file, not the copy or link under resources/.
"""

from pathlib import Path

from bytesup.gguf.file import GGUFFile, GGUFFormatError
from bytesup.run.fetch import fetch_model, write_record
from bytesup.run.joblog import job_logging
from bytesup.run.model_cache import mark_verified, model_files


def main(sm) -> None:
    dest = Path(sm.output.gguf)
    spec = dict(sm.params.spec)
    shown = {str(dest): spec["path"] if spec.get("source") == "path" else str(dest)}
    with job_logging(sm.log[0] if sm.log else None, shown=shown) as logger:
        record = fetch_model(sm.params.name, spec, dest)
        files = [path for path, _, _ in model_files(dest, record)]
        if spec.get("source") == "path":  # each part by the user's name for it
            shown.update({str(f): p["path"] for f, p in zip(files, record.get("parts", []), strict=False)})
        try:
            with GGUFFile(dest) as gguf:
                logger.info(
                    "%s: GGUF v%d, %d tensors, %d metadata keys, %d file(s)",
                    shown[str(dest)],
                    gguf.version,
                    len(gguf.tensors),
                    len(gguf.metadata),
                    len(gguf.parts),
                )
        except GGUFFormatError:
            for path in files:  # a malformed model is not left for a later stage to read
                path.unlink(missing_ok=True)
            raise
        write_record(record, Path(sm.output.record))
        mark_verified(dest, record)  # the next run's check of the cache need not re-read it


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

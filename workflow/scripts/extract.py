"""Extract one model for rule `extract`: metadata.json, tensors.csv, tensors/*.npy, extract.json.

All logic lives in bytesup.extract; this only wires the rule's input, outputs, params and
log to it. A malformed GGUF or a pattern that matches nothing ends the job with its
one-line message, without a traceback.
"""

import logging
import sys

from bytesup.extract import TensorSelectionError, extract
from bytesup.gguf_file import GGUFFormatError


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
        extract(
            sm.input.gguf,
            None,
            list(sm.params.patterns),
            metadata_path=sm.output.metadata,
            tensors_csv_path=sm.output.tensors_csv,
            index_path=sm.output.index,
            tensors_dir=sm.output.tensors_dir,
        )
    except (GGUFFormatError, TensorSelectionError) as err:
        logger.error("%s", err)
        sys.exit(1)
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

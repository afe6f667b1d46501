"""CPU timing for rule `timing_cpu`: summary.json plus sweep, stream and dequant CSVs.

All logic lives in bytesup.timing; this wires the rule's input, outputs, params, threads
and log to it. BLAS and the STREAM workers use the rule's `threads`. An expected failure
(malformed GGUF, no FFN to time, bad setting) ends the job with one line, no traceback.
"""

import logging
import sys

from bytesup.gguf_file import GGUFFormatError
from bytesup.timing import TimingError, run_cpu, write_results


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
            result = run_cpu(sm.input.gguf, dict(sm.params.timing, seed=sm.params.seed), threads=sm.threads)
        except (GGUFFormatError, TimingError) as err:
            logger.error("%s", err)
            sys.exit(1)
        write_results(result, sm.output.summary,
                      {"sweep": sm.output.sweep, "stream": sm.output.stream, "dequant": sm.output.dequant})
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

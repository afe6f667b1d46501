"""Extract one model for rule `extract`: metadata.json, tensors.csv, tensors/*.npy, extract.json.

All logic lives in bytesup.extract; this only wires the rule's input, outputs, params and
log to it. A malformed GGUF or a pattern that matches nothing ends the job with its
one-line message, without a traceback.
"""

import fnmatch
import sys

from bytesup.extract import TensorSelectionError, extract
from bytesup.gguf_file import GGUFFormatError, UnsupportedTypeError
from bytesup.joblog import job_logging


def lessons_needing(tensor: str, needs: dict) -> list[str]:
    """The lessons whose tensor patterns (see rule `extract`, params.needed_by) match `tensor`."""
    return sorted(
        lesson for lesson, patterns in needs.items() if any(fnmatch.fnmatchcase(tensor, p.lstrip("?")) for p in patterns)
    )


def main(sm) -> None:
    with job_logging(sm.log[0] if sm.log else None) as logger:
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
        except UnsupportedTypeError as err:
            lessons = lessons_needing(err.tensor, sm.params.needed_by)
            who = f"lessons that cannot run: {', '.join(lessons)}" if lessons else "no lesson reads it"
            logger.error("%s; %s; remove it from extract.tensors in config/config.yaml to go on without it", err, who)
            sys.exit(1)
        except (GGUFFormatError, TensorSelectionError) as err:
            logger.error("%s", err)
            sys.exit(1)


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

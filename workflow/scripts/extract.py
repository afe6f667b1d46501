"""Extract one model for rule `extract`: metadata.json, tensors.csv, tensors/*.npy, extract.json.

All logic lives in bytesup.gguf.extract; this only wires the rule's input, outputs, params and
log to it. A malformed GGUF, NaN or infinite weights in a tensor a lesson reads, a hyperparameter no
model has (a NaN eps, head_count 0: bytesup.model.arch.check_hyperparameters), a model that is not the
one the fetch recorded, or a pattern that matches nothing ends the job with its one-line message,
without a traceback (bytesup.run.joblog).
"""

import fnmatch
import json
from pathlib import Path

from bytesup.errors import BytesupError
from bytesup.gguf.extract import extract
from bytesup.gguf.file import UnsupportedTypeError
from bytesup.model.arch import check_hyperparameters
from bytesup.run.joblog import job_logging
from bytesup.run.model_cache import reading_model


def lessons_needing(tensor: str, needs: dict) -> list[str]:
    """The lessons whose tensor patterns (see rule `extract`, params.needed_by) match `tensor`."""
    return sorted(
        lesson
        for lesson, patterns in needs.items()
        if any(fnmatch.fnmatchcase(tensor, p.lstrip("?")) for p in patterns)
    )


def main(sm) -> None:
    # The model's sha256 was verified on fetch, and reading_model checks that the file is still that
    # one (before and after): the record gives it, so a 7 GB model is not read in full only to hash it.
    sha256 = json.loads(Path(sm.input.record).read_text())["sha256"]
    shown = {str(sm.input.gguf): sm.params.shown}
    with job_logging(sm.log[0] if sm.log else None, shown=shown), reading_model(sm.input.gguf, sm.input.record):
        try:
            extract(
                sm.input.gguf,
                None,
                list(sm.params.patterns),
                metadata_path=sm.output.metadata,
                tensors_csv_path=sm.output.tensors_csv,
                index_path=sm.output.index,
                tensors_dir=sm.output.tensors_dir,
                gguf_sha256=sha256,
                check=lambda f: check_hyperparameters(f.metadata, path=f.path),  # every lesson reads checked numbers
            )
        except UnsupportedTypeError as err:
            lessons = lessons_needing(err.tensor, sm.params.needed_by)
            if lessons:
                advice = (f"lessons that cannot run: {', '.join(lessons)}; to go on without them, list the"
                          " other lessons under 'lessons:' in config/config.yaml")  # fmt: skip
            else:
                advice = "no lesson reads it"
            raise BytesupError(f"{err}; {advice}") from None  # one line, naming the user's file


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

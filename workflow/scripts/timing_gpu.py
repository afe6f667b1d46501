"""GPU timing for rule `timing_gpu`: summary.json plus sweep and stream CSVs.

All logic lives in bytesup.timing.gpu; this wires the rule's input, outputs, params and log to
it. Without a CUDA device, gpu: auto (or off) writes a 'skipped' summary and header-only
CSVs; gpu: on ends the job with one line saying what is missing.
"""

from bytesup.run.joblog import job_logging
from bytesup.run.model_cache import reading_model
from bytesup.timing.cpu import write_results
from bytesup.timing.gpu import run_gpu


def main(sm) -> None:
    with job_logging(sm.log[0] if sm.log else None), reading_model(sm.input.gguf, sm.input.record):
        result = run_gpu(sm.input.gguf, dict(sm.params.timing, seed=sm.params.seed), mode=sm.params.mode)
        write_results(result, sm.output.summary, {"sweep": sm.output.sweep, "stream": sm.output.stream})


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

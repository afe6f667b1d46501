"""CPU timing for rule `timing_cpu`: summary.json plus sweep, stream and dequant CSVs.

All logic lives in bytesup.timing.cpu; this wires the rule's input, outputs, params, threads
and log to it. BLAS, the STREAM workers and the hand dequantizers use the rule's `threads`.
An expected failure (malformed GGUF, no FFN to time, bad setting) ends the job with one line,
no traceback.
"""

from bytesup.run.joblog import job_logging
from bytesup.run.model_cache import reading_model
from bytesup.timing.cpu import run_cpu, write_results


def main(sm) -> None:
    with job_logging(sm.log[0] if sm.log else None), reading_model(sm.input.gguf, sm.input.record):
        result = run_cpu(sm.input.gguf, dict(sm.params.timing, seed=sm.params.seed), threads=sm.threads)
        write_results(
            result,
            sm.output.summary,
            {"sweep": sm.output.sweep, "stream": sm.output.stream, "dequant": sm.output.dequant},
        )


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

"""Whole-model decode and prefill timing for rule `timing_decode`: decode.json and prefill.csv.

All logic lives in bytesup.timing.decode; this wires the rule's input, outputs, params, threads
and log to it. The float32 copy llama.cpp decodes is written in a temporary folder beside the
outputs and removed with it. An expected failure (malformed GGUF, an architecture the forward pass
does not follow, a bad setting) ends the job with one line, no traceback.
"""

from pathlib import Path

from bytesup.run.joblog import job_logging
from bytesup.run.model_cache import reading_model
from bytesup.timing.decode import run_decode, write_decode_results


def main(sm) -> None:
    with job_logging(sm.log[0] if sm.log else None), reading_model(sm.input.gguf, sm.input.record):
        scratch = Path(sm.output.summary).parent
        scratch.mkdir(parents=True, exist_ok=True)
        result = run_decode(
            sm.input.gguf,
            dict(sm.params.timing, seed=sm.params.seed),
            threads=sm.threads,
            resident_budget_bytes=int(sm.params.resident_budget_mb) * 2**20,
            scratch_dir=scratch,
        )
        write_decode_results(result, sm.output.summary, sm.output.prefill)


main(snakemake)  # noqa: F821  (injected by Snakemake's script directive)

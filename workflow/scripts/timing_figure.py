"""The sweep figure for rule `timing_figure` (bytesup.timing.plots)."""

from bytesup.timing.plots import sweep_figure

sm = snakemake  # noqa: F821  (injected by Snakemake's script directive)
sweep_figure(sm.input.cpu_summary, sm.input.cpu_sweep, sm.input.gpu_summary, sm.input.gpu_sweep, sm.output[0])

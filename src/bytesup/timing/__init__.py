"""Timing jobs: CPU sweeps and dequantizer speed (`cpu`), decode (`decode`), the GPU job (`gpu`),
the machine, plots, reading results. Imports `model`, `gguf` and `run` below it."""

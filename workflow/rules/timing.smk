# Stage: timing. Is decode memory-bound on this machine? (bytesup.timing.cpu, bytesup.timing.gpu)
# Timing jobs never share the machine: `threads: every_core()` takes every core the run
# was given, so Snakemake starts no other job beside them (nor the two beside each other).
# The GPU job asks the scheduler for a GPU only under `gpu: on`; under `auto` it measures
# when it lands where CUDA is visible and otherwise writes a 'skipped' record.


rule timing_cpu:
    input:
        gguf="resources/models/{model}.gguf",
        record="resources/models/{model}.json",  # checked before and after (run.model_cache)
    output:
        summary="results/timing/{model}/cpu/summary.json",
        sweep="results/timing/{model}/cpu/sweep.csv",
        stream="results/timing/{model}/cpu/stream.csv",
        dequant="results/timing/{model}/cpu/dequant.csv",
    log:
        "logs/timing/{model}/cpu.log",
    benchmark:
        "benchmarks/timing/{model}/cpu.tsv"
    conda:
        "../envs/bytesup.yaml"
    threads: every_core()
    resources:
        mem_mb=2000,  # STREAM's 3 x 256 MB, then two FFN matrices as float32 and their column-major copies (918 MB modelled on the specimen)
        runtime=30,
    params:
        timing=config["timing"],
        seed=config["seed"],
    script:
        "../scripts/timing_cpu.py"


rule timing_decode:
    input:
        gguf="resources/models/{model}.gguf",
        record="resources/models/{model}.json",  # checked before and after (run.model_cache)
    output:
        summary="results/timing/{model}/cpu/decode.json",
        prefill="results/timing/{model}/cpu/prefill.csv",
    log:
        "logs/timing/{model}/decode.log",
    benchmark:
        "benchmarks/timing/{model}/decode.tsv"
    conda:
        "../envs/bytesup.yaml"
    threads: every_core()
    resources:
        # resident float32 weights (at most the budget) in both layouts (bytesup.model.weights.LAYOUTS,
        # timed in turns) with, at the worst moment, llama.cpp's map of the float32 copy of the same model
        # (at most the budget again) and the memory kernels' 3 x 256 MiB measured in turns with them (or,
        # one layout closed, the context sweep's KV cache, at most 1 GiB), plus the interpreter. Streamed
        # (the specimen): one block as float32 + a head chunk + the memory kernels, 1.8 GB (docs/memory.md).
        mem_mb=3 * config["forward"]["resident_budget_mb"] + 1500,
        # the default model: about 3 minutes (decode beside llama.cpp, 4 contexts up to 8,192, prefill,
        # a streamed split, the Q8_0 product); the specimen, streamed: about 25 minutes on 2 loaded cores
        runtime=60,
    params:
        timing=config["timing"],
        seed=config["seed"],
        resident_budget_mb=config["forward"]["resident_budget_mb"],
    script:
        "../scripts/timing_decode.py"


rule timing_gpu:
    input:
        gguf="resources/models/{model}.gguf",
        record="resources/models/{model}.json",  # checked before and after (run.model_cache)
    output:
        summary="results/timing/{model}/gpu/summary.json",
        sweep="results/timing/{model}/gpu/sweep.csv",
        stream="results/timing/{model}/gpu/stream.csv",
    log:
        "logs/timing/{model}/gpu.log",
    benchmark:
        "benchmarks/timing/{model}/gpu.tsv"
    conda:
        "../envs/bytesup.yaml"
    threads: every_core()
    resources:
        mem_mb=8000,
        runtime=30,
        gpu=1 if config["gpu"] == "on" else 0,
    params:
        timing=config["timing"],
        seed=config["seed"],
        mode=config["gpu"],
    script:
        "../scripts/timing_gpu.py"


rule timing_figure:
    input:
        cpu_summary="results/timing/{model}/cpu/summary.json",
        cpu_sweep="results/timing/{model}/cpu/sweep.csv",
        gpu_summary="results/timing/{model}/gpu/summary.json",
        gpu_sweep="results/timing/{model}/gpu/sweep.csv",
    output:
        figure=report(
            "results/timing/{model}/sweep.png",
            caption="../report/timing_sweep.rst",
            category="Timing",
        ),
    log:
        "logs/timing/{model}/figure.log",
    benchmark:
        "benchmarks/timing/{model}/figure.tsv"
    conda:
        "../envs/bytesup.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/timing_figure.py"

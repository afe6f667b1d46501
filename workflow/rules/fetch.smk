# Stage 1: the GGUF file, checked against its pinned sha256 before it becomes visible.


rule fetch:
    input:
        fetch_inputs,
    output:
        gguf="resources/models/{model}.gguf",
        record="resources/models/{model}.json",
    log:
        "logs/fetch/{model}.log",
    benchmark:
        "benchmarks/fetch/{model}.tsv"
    retries: 1
    conda:
        "../envs/bytesup.yaml"
    resources:
        mem_mb=1000,
        runtime=240,
    params:
        name=lambda wc: wc.model,
        spec=fetch_spec,
    script:
        "../scripts/fetch.py"

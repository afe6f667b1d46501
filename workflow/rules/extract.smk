# Stage 2: metadata, the tensor table, and float32 .npy files of the tensors the lessons read
# (the union of the lessons' SPEC.tensors). A checkpoint: which lessons can run depends on the
# architecture its metadata.json names (a lesson that does not follow it is not run, and the
# report says why).


checkpoint extract:
    input:
        gguf="resources/models/{model}.gguf",
        record="resources/models/{model}.json",  # its sha256, verified on fetch: not hashed again
    output:
        metadata="results/{model}/gguf/metadata.json",
        tensors_csv="results/{model}/gguf/tensors.csv",
        index="results/{model}/gguf/extract.json",
        tensors_dir=directory("results/{model}/gguf/tensors"),
    log:
        "logs/extract/{model}.log",
    benchmark:
        "benchmarks/extract/{model}.tsv"
    priority: 10  # first after the fetch: the lessons wait on it, and its errors name them
    conda:
        "../envs/bytesup.yaml"
    resources:
        mem_mb=1000,  # tensor by tensor, 64 MB of rows at a time: 206 MB on the specimen (docs/memory.md)
        runtime=20,
    params:
        shown=lambda wc: shown_model_path(wc.model),
        patterns=extract_patterns(),
        needed_by={
            lesson: list(LESSONS[lesson].tensors) for lesson in config["lessons"]
        },
    script:
        "../scripts/extract.py"

# Stage 2: metadata, the tensor table, and float32 .npy files of the tensors the lessons read.


rule extract:
    input:
        gguf="resources/models/{model}.gguf",
    output:
        metadata="results/{model}/gguf/metadata.json",
        tensors_csv="results/{model}/gguf/tensors.csv",
        index="results/{model}/gguf/extract.json",
        tensors_dir=directory("results/{model}/gguf/tensors"),
    params:
        patterns=config["extract"]["tensors"],
        needed_by={lesson: LESSONS[lesson].get("tensors", []) for lesson in config["lessons"]},
    log:
        "logs/extract/{model}.log",
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../envs/bytesup.yaml"
    script:
        "../scripts/extract.py"

# Stage 1: the GGUF file, checked against its pinned sha256 before it becomes visible.


def fetch_inputs(wildcards):
    """A local model is an input, so replacing the file reruns everything downstream."""
    spec = model_spec(config, wildcards.model)
    return [spec["path"]] if spec["source"] == "path" else []


rule fetch:
    input:
        fetch_inputs,
    output:
        gguf="resources/models/{model}.gguf",
        record="resources/models/{model}.json",
    params:
        name=lambda wc: wc.model,
        spec=lambda wc: model_spec(config, wc.model),
    log:
        "logs/fetch/{model}.log",
    retries: 1
    resources:
        mem_mb=1000,
        runtime=240,
    script:
        "../scripts/fetch.py"

# Stage 3: one papermill notebook per lesson. The source notebook is an input, the
# executed notebook and every figure and table it writes are outputs.
from pathlib import Path


# Per lesson: the files it reads (notebook parameter name -> path), the tensors it needs
# from the extract stage (so a tensor that cannot be read names the lessons it stops),
# and the files it writes into its folder results/{model}/lessons/<lesson>/.
LESSONS = {
    "01_gguf_on_disk": {
        "reads": {
            "model_gguf": "resources/models/{model}.gguf",
        },
        "writes": [
            "metrics.json",
            "claims.csv",
            "metadata_table.csv",
            "tensor_table.csv",
            "byte_accounting.csv",
            "bytes_by_type.csv",
            "bytes_by_type.png",
            "q8_0_block.csv",
            "q4_1_block.csv",
        ],
    },
    "02_tokens_and_embeddings": {
        "tensors": ["token_embd.weight"],
        "reads": {
            "metadata_json": "results/{model}/gguf/metadata.json",
            "tensors_index": "results/{model}/gguf/extract.json",
            "model_gguf": "resources/models/{model}.gguf",
        },
        "writes": [
            "metrics.json",
            "claims.csv",
            "token_row.csv",
            "nearest_neighbours.csv",
            "random_vector_variants.csv",
            "cosine_random_vs_nearest.png",
        ],
    },
    "03_ffn_by_hand": {
        "tensors": ["token_embd.weight", "blk.0.ffn_*"],
        "reads": {
            "metadata_json": "results/{model}/gguf/metadata.json",
            "tensors_index": "results/{model}/gguf/extract.json",
            "timing_summary": "results/timing/{model}/cpu/summary.json",
            "timing_sweep": "results/timing/{model}/cpu/sweep.csv",
        },
        "writes": [
            "metrics.json",
            "claims.csv",
            "flops_per_token.csv",
            "matvec_vs_matmul.csv",
            "gate_histogram.png",
            "flops_per_token.png",
        ],
    },
    "00_vectors_neurons_nonlinearity": {
        "reads": {},
        "writes": [
            "metrics.json",
            "claims.csv",
            "mlp_by_hand.csv",
            "llama3_numbers.csv",
            "activations.png",
            "composition.png",
            "fold.png",
        ],
    },
    "03b_what_the_ffn_stores": {
        "tensors": ["token_embd.weight", "blk.0.ffn_*", "?output.weight"],
        "reads": {
            "metadata_json": "results/{model}/gguf/metadata.json",
            "tensors_index": "results/{model}/gguf/extract.json",
            "tensors_csv": "results/{model}/gguf/tensors.csv",
        },
        "writes": [
            "metrics.json",
            "claims.csv",
            "top_slots.csv",
            "value_vectors.csv",
            "parameters.csv",
            "rome_drift.csv",
            "slot_coefficients.png",
            "rome_drift.png",
            "parameter_shares.png",
        ],
    },
    "capstone_decode_is_memory_bound": {
        "reads": {
            "metadata_json": "results/{model}/gguf/metadata.json",
            "tensors_csv": "results/{model}/gguf/tensors.csv",
            "timing_summary": "results/timing/{model}/cpu/summary.json",
            "timing_sweep": "results/timing/{model}/cpu/sweep.csv",
            "gpu_summary": "results/timing/{model}/gpu/summary.json",
            "gpu_sweep": "results/timing/{model}/gpu/sweep.csv",
        },
        "writes": [
            "metrics.json",
            "claims.csv",
            "tensor_reads.csv",
            "bytes_per_token.csv",
            "decode_ceilings.csv",
            "roofline_points.csv",
            "bytes_per_token.png",
            "roofline.png",
        ],
    },
}


def lesson_outputs(lesson, model="{model}"):
    """Every file one lesson writes, keyed by a name usable as a notebook parameter."""
    folder = f"results/{model}/lessons/{lesson}"
    files = {name.replace(".", "_"): f"{folder}/{name}" for name in LESSONS[lesson]["writes"]}
    files["notebook"] = f"{folder}/{lesson}.ipynb"
    return files


def lesson_rule_outputs(lesson):
    """lesson_outputs with every figure flagged for `snakemake --report`, captioned by
    workflow/report/<lesson>.<figure>.rst when there is one, else lesson_figure.rst."""
    outs = {}
    for name, path in lesson_outputs(lesson).items():
        if path.endswith(".png"):
            stem = Path(path).stem
            caption = f"{lesson}.{stem}.rst"
            if not Path(workflow.basedir, "workflow", "report", caption).is_file():
                caption = "lesson_figure.rst"
            path = report(path, caption=f"../report/{caption}", category="Lessons", subcategory=lesson,
                          labels={"lesson": lesson, "figure": stem})
        outs[name] = path
    return outs


for _lesson, _spec in LESSONS.items():

    rule:
        name:
            f"lesson_{_lesson}"
        input:
            notebook=f"workflow/notebooks/{_lesson}.ipynb",
            model_record="resources/models/{model}.json",
            **_spec["reads"],
        output:
            **lesson_rule_outputs(_lesson),
        params:
            lesson=_lesson,
            out_dir=f"results/{{model}}/lessons/{_lesson}",
            model=lambda wc: wc.model,
            token=config["token"],
            seed=config["seed"],
        log:
            notebook=f"logs/lessons/{{model}}/{_lesson}.ipynb",
        resources:
            mem_mb=4000,
            runtime=30,
        conda:
            "../envs/bytesup.yaml"
        script:
            "../scripts/run_notebook.py"

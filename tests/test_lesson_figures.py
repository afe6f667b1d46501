"""Every lesson figure, drawn from a tiny model's run, is readable on a phone (figure_checks.problems):
type at least MIN_FONT_PT, no text over other text, legends off the data, nothing cut off."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest
from figure_checks import problems

from bytesup.gguf.extract import extract
from bytesup.gguf.file import GGUFFile
from bytesup.lessons import TensorFiles, read_metadata
from bytesup.lessons import attention_kv as l6
from bytesup.lessons import decode_memory_bound as cap
from bytesup.lessons import ffn_by_hand as l3
from bytesup.lessons import ffn_stores as l3b
from bytesup.lessons import forward_pass as l4
from bytesup.lessons import generating_text as l5
from bytesup.lessons import gguf_on_disk as l1
from bytesup.lessons import hardware_fit as l7
from bytesup.lessons import tokens_and_embeddings as l2
from bytesup.lessons import vectors_neurons as l0
from bytesup.lessons.attention_kv import figures as f6
from bytesup.lessons.decode_memory_bound import figures as fcap
from bytesup.lessons.ffn_by_hand import figures as f3
from bytesup.lessons.ffn_stores import figures as f3b
from bytesup.lessons.hardware_fit import figures as f7
from bytesup.model import param_counts as pc
from bytesup.model.synthetic import write_tiny_gemma3, write_tiny_llama

PROMPT = "the cat sat"
# titles as the notebooks write them, with the longest model name the catalogue holds: a long title must fit too
NAME = "gemma3-270m-q4-k-m"
GIB = 2**30


def sweep(ns=(1, 2, 4, 8, 16, 32, 64, 128, 256), rows=1536, cols=576):
    """A timing sweep as sweep.csv holds it: a matvec at N = 1 and matmuls, a little faster per token as N grows."""
    out = []
    for n in ns:
        seconds = 1e-3 * (1 + n / 16)
        flops, nbytes = 2 * rows * cols * n, 4 * (rows * cols + cols * n + rows * n)
        out.append({"n": str(n), "rows": str(rows), "cols": str(cols), "median_s": str(seconds), "flops": str(flops),
                    "bytes": str(nbytes), "gflops": str(flops / seconds / 1e9), "dtype": "fp32"})  # fmt: skip
    return out


def decode_summary():
    return {
        "status": "measured",
        "engine": "bytesup",
        "weights": "resident",
        "threads": 2,
        "stream_copy_gbps": 10.0,
        "decode_tokens_per_s": 12.0,
        "decode_bytes_per_token": 500_000_000,
        "decode_ceiling_tokens_per_s": 20.0,
        "decode_fraction_of_ceiling": 0.6,
        "decode_gbps": 6.0,
        "decode_flops_per_token": 270_000_000,
        "prefill_tokens_per_s": {"1": 12.0, "8": 80.0, "32": 200.0, "128": 260.0},
        "prefill_gflops": {"1": 3.2, "8": 21.6, "32": 54.0, "128": 70.2},
    }


def drawn(tmp_path_factory):
    """Every lesson figure, by name, from runs on tiny models."""
    tmp = tmp_path_factory.mktemp("figures")
    gguf = write_tiny_llama(tmp / "tiny.gguf")
    gemma = write_tiny_gemma3(tmp / "gemma.gguf")
    patterns = sorted({p for s in (l2.SPEC, l3.SPEC, l3b.SPEC) for p in s.tensors})
    extract(gguf, tmp / "gguf", patterns)
    meta, tensors = read_metadata(tmp / "gguf" / "metadata.json"), TensorFiles(tmp / "gguf" / "extract.json")
    rows = pc.read_tensor_table(tmp / "gguf" / "tensors.csv")
    forward = {"resident_budget_mb": 100}
    figs = {}

    _, t0 = l0.run(seed=0, n_points=200)
    figs["00 activations"] = l0.plot_activations()
    figs["00 composition"] = l0.plot_composition()
    figs["00 fold"] = l0.plot_fold(t0["fold"], title="200 random points through the 2 → 3 → 2 MLP")

    with GGUFFile(gguf) as f:
        _, t1 = l1.run(f, " cat")
        figs["01 bytes by type"] = l1.plot_by_type(t1["by_type"], title=f"{NAME}: parameters and bytes by type")
        m2, t2 = l2.compute(meta, tensors, f, " cat")
    figs["02 closeness"] = l2.plot_closeness(t2["closeness"], m2["embedding_length"], title=f"{NAME}: cosines")

    m3, t3 = l3.run(meta, tensors, " cat", model_gguf=gguf, forward=forward)
    figs["03 gate histogram"] = f3.plot_gate_histogram(t3["walk"].trace.g, title=f"{NAME}: block 0 gate values")
    figs["03 flops"] = f3.plot_flops(t3["flops"], title=f"{NAME}: FLOPs per token, one block")
    figs["03 across blocks"] = f3.plot_across_blocks(
        t3["across"], {"ratio": 40.0, "angle": 88.0}, {"ratio": 0.34, "angle": 18.0}, title=f"{NAME}: the FFN half"
    )

    run3b = l3b.run(meta, tensors, rows, " cat", " dog", n_keys=50)
    figs["03b slots"] = f3b.plot_slots(run3b.slots, run3b.rebuild_curve, title=f"{NAME}: block 0 FFN slots")
    figs["03b rome"] = f3b.plot_rome(run3b.rome, title=f"{NAME}: rank-one edit")
    figs["03b parameters"] = f3b.plot_parameters(run3b.archs, run3b.counted)

    m4, t4 = l4.compute(gguf, meta, PROMPT, forward)
    figs["04 residual norms"] = l4.plot_residual_norms(t4["logit_lens"], title=f"{NAME}: the residual stream")
    figs["04 logit lens"] = l4.plot_logit_lens(t4["logit_lens"], m4["next_token"], title=f"{NAME}: the logit lens")

    generate = {"max_new_tokens": 4, "temperatures": [0.5, 1.0, 2.0], "top_k": 5, "top_p": 0.95}
    m5, t5 = l5.compute(gguf, meta, PROMPT, generate, 0, forward)
    figs["05 distribution"] = l5.plot_distribution(t5["distribution"], m5["temperatures"], title=f"{NAME}: next token")

    with GGUFFile(gemma) as g:
        gmeta = dict(g.metadata)
    m6, t6 = l6.run(gemma, gmeta, PROMPT, forward, contexts=(4, 8), repeats=1, decode_steps=1)
    figs["06 attention"] = f6.plot_attention(
        t6["attention"],
        t6["tokens"],
        t6["spec"],
        title=f"{NAME}: attention weights over {'The capital of France is'!r}",
    )
    figs["06 kv size"] = f6.plot_kv_size(t6["kv_size"], title="KV cache against context, and the weights")
    figs["06 timing"] = f6.plot_timing(t6["timing"], title=f"{NAME}: one generated token")

    cpu = {"stream_copy_gbps": 10.0, "matvec_cold_gbps": 8.0, "machine": {"memory_bytes": 16 * GIB}}
    _, t7 = l7.run(meta, rows, timing_summary=cpu, model="tiny")
    figs["07 what fits where"] = f7.plot_what_fits_where(t7["fit"], "4k", title="What fits where at 4k context")

    s = sweep()
    summary = {"stream_copy_gbps": 10.0, "matvec_cold_gbps": 8.0, "matvec_warm_gbps": 30.0}
    run = cap.run(meta, rows, timing_summary=summary, timing_sweep=s, decode_summary=decode_summary(), model="tiny")
    figs["cap bytes per token"] = fcap.plot_bytes_per_token(run.accounts, title="Bytes read per generated token")
    figs["cap roofline"] = fcap.plot_roofline(
        run.points,
        run.roofs,
        warm_gbps=30.0,
        markers=fcap.decode_markers(run.accounts),
        whole_model=run.whole_model,
        course=run.course_points,
        course_gbps=273.0,
        title="Roofline of this run's timing sweep",
    )
    figs["cap prefill"] = fcap.plot_prefill(
        run.whole_model,
        ceiling_tps=20.0,
        peak_gflops=run.roofs["cpu"]["peak_gflops"],
        title=f"{NAME}: prefill and decode",
    )
    return figs


@pytest.fixture(scope="module")
def all_figures(tmp_path_factory):
    plt.rcParams["figure.max_open_warning"] = 0  # the module draws every lesson figure at once
    figs = drawn(tmp_path_factory)
    yield figs
    for fig in figs.values():
        plt.close(fig)


def test_every_lesson_figure_is_drawn_here(all_figures):
    from bytesup.lessons import registry

    wanted = sum(len(spec.figures) for spec in registry().values())
    assert len(all_figures) == wanted


@pytest.mark.parametrize(
    "name",
    ["00 activations", "00 composition", "00 fold", "01 bytes by type", "02 closeness", "03 gate histogram",
     "03 flops", "03 across blocks", "03b slots", "03b rome", "03b parameters", "04 residual norms",
     "04 logit lens", "05 distribution", "06 attention", "06 kv size", "06 timing", "07 what fits where",
     "cap bytes per token", "cap roofline", "cap prefill"],
)  # fmt: skip
def test_figure_reads_on_a_phone(all_figures, name):
    assert problems(all_figures[name]) == []


def test_the_checks_catch_what_they_check():
    """A deliberately bad figure: small type, two labels on top of each other, a legend over the data."""
    from bytesup.lessons import figure

    fig, ax = figure()
    ax.plot([0, 1], [0, 1], label="a line")
    ax.text(0.5, 0.5, "small", fontsize=7)
    ax.text(0.2, 0.2, "one label")
    ax.text(0.2, 0.2, "another label")
    ax.legend(loc="center")
    found = problems(fig)
    plt.close(fig)
    assert any("under" in p for p in found) and any("overlaps" in p for p in found)
    assert any("legend" in p for p in found) and not math.isnan(len(found))

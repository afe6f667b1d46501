"""Lesson 4, the forward pass: values against independent computations.

* tiny synthetic llamas: the next-token logits, the residual stream after every block and the logit
  lens against a float64 llama written here from gguf-py's reader and dequantizer (no bytesup code);
  the residual norms also against a second Trace of a different pass (all positions at once);
* the FLOPs the trace counted against the metadata's count and a formula written out here; the
  bytes against gguf-py's own tensor sizes;
* the default model (slow): the top-5 next tokens and their logits, and the residual stream after
  every block, against Hugging Face transformers loading the same GGUF in float32;
* Gemma 3 through the same table: a tiny synthetic gemma3 (prompt longer than its window) against an
  independent float64 Gemma, its notebook; the real Gemma 3 270M (slow) against transformers;
* the notebook end to end with papermill, on a tiny model and on the default model.
"""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from reference_llama import reference_gemma3, reference_pass
from tiny_rows import ROWS, write_row
from workflow_helpers import run_lesson_notebook

from bytesup.gguf.file import GGUFFile
from bytesup.lessons import LessonInputError, claims, plain
from bytesup.lessons import forward_pass as lesson
from bytesup.model.arch import ARCHITECTURES
from bytesup.model.forward import Model
from bytesup.model.synthetic import write_tiny_gemma3, write_tiny_llama
from bytesup.model.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "workflow" / "notebooks" / "04_the_forward_pass.ipynb"
PROMPT = "The capital of France is"
TINY_PROMPT = " the cat sat on the mat"
TINY_CASES = {
    "untied-gqa2": {"n_head": 4, "n_head_kv": 2, "n_layers": 2},
    "tied-mqa-3blocks": {"n_head": 4, "n_head_kv": 1, "n_layers": 3, "tied": True, "seed": 3},
}


# -- an independent float64 llama (tests/reference_llama.py) ---------------------------------------


def tensor_sizes(path) -> tuple[dict, dict]:
    """gguf-py's own count of each tensor's elements and bytes in the file (no dequantizing)."""
    reader = GGUFReader(path)
    return {t.name: int(t.n_elements) for t in reader.tensors}, {t.name: int(t.n_bytes) for t in reader.tensors}


@pytest.fixture(params=sorted(TINY_CASES))
def tiny(request, tmp_path):
    path = write_tiny_llama(tmp_path / f"{request.param}.gguf", **TINY_CASES[request.param])
    with GGUFFile(path) as f:
        return path, dict(f.metadata)


def rel_err(got, want) -> float:
    """max |got - want| / max |want|."""
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


# The float32 lesson against the float64 references, measured on the tiny files: logits within 9.6e-7 of
# their largest value (llama) and 2.6e-7 (gemma3); each probability within 5.4e-6 of itself, residual
# norms within 1.8e-7 (5.1e-8 on gemma3). The tolerances below are about three times that; without
# the RMSNorm epsilon every one of them fails (the logits move by 1.8e-5, gemma3's by 1.2e-6).
LOGITS_REL, GEMMA_LOGITS_REL = 3e-6, 8e-7
PROBS_RTOL, NORMS_RTOL, GEMMA_NORMS_RTOL = 1.5e-5, 6e-7, 2.5e-7


def test_tiny_model_next_token_residuals_and_lens_match_a_float64_llama(tiny):
    path, meta = tiny
    m, tables = lesson.compute(path, meta, TINY_PROMPT)
    ids = m["prompt_ids"]
    assert ids == [34, 37, 56, 58, 34, 61]  # " the" " cat" " sat" " on" " the" " mat"
    ref = reference_pass(path, ids)
    stream, logits, lens = ref["stream"], ref["logits"][-1], ref["lens"]
    # the next token: top 5 ids in the same order, logits and probabilities close
    want = np.argsort(-logits, kind="stable")[:5]
    assert [r["id"] for r in m["top5"]] == want.tolist() and m["next_token_id"] == int(want[0])
    assert [r["logit"] for r in m["top5"]] == tables["logits"][want].tolist()
    assert rel_err(tables["logits"], logits) < LOGITS_REL
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose([r["prob"] for r in m["top5"]], p[want], rtol=PROBS_RTOL)
    # the residual stream's length after the embedding and after every block
    assert len(m["residual_norms"]) == meta["llama.block_count"] + 1
    np.testing.assert_allclose(m["residual_norms"], [np.linalg.norm(r) for r in stream], rtol=NORMS_RTOL)
    # the logit lens: the top token at every point, the final token's rank and probability there
    assert m["logit_lens_top_ids"] == [int(np.argmax(lg)) for lg in lens]
    nxt = m["next_token_id"]
    assert m["logit_lens_next_token_ranks"] == [1 + int((lg > lg[nxt]).sum()) for lg in lens]  # 1 = top
    lens_p = [np.exp(lg[nxt] - lg.max()) / np.exp(lg - lg.max()).sum() for lg in lens]
    np.testing.assert_allclose(m["logit_lens_next_token_probs"], lens_p, rtol=PROBS_RTOL)
    assert m["logit_lens_next_token_ranks"][-1] == 1 and m["logit_lens_top_ids"][-1] == nxt
    with GGUFFile(path) as f:
        tied = "output.weight" not in f.tensor_names
    assert m["tied"] is tied and m["head_tensor"] == ("token_embd.weight" if tied else "output.weight")


def test_residual_norms_equal_a_second_trace_of_a_full_pass(tiny_gguf):
    """The lesson traces the last token alone (prefill N-1, then decode); a Trace of the whole prompt at
    once (all positions kept) walks another code path to the same stream, up to float32 rounding."""
    with GGUFFile(tiny_gguf) as f:
        meta = dict(f.metadata)
    m, tables = lesson.compute(tiny_gguf, meta, TINY_PROMPT)
    with Model.from_gguf(tiny_gguf) as model:
        full = Trace(all_positions=True)
        logits = model.forward(m["prompt_ids"], trace=full)
    norms = [float(np.linalg.norm(r[-1].astype(np.float64))) for r in full.residual]
    np.testing.assert_allclose(m["residual_norms"], norms, rtol=1e-5)
    np.testing.assert_allclose(tables["trace"].final_norm, full.final_norm[-1], rtol=1e-5, atol=1e-6)
    assert int(logits[-1].argmax()) == m["next_token_id"]
    assert [r["residual_norm"] for r in tables["logit_lens"]] == m["residual_norms"]


def test_traced_flops_and_bytes_equal_the_metadata_and_gguf_py(tiny):
    path, meta = tiny
    m, tables = lesson.compute(path, meta, TINY_PROMPT)
    n = len(m["prompt_ids"])
    d, ff, L = meta["llama.embedding_length"], meta["llama.feed_forward_length"], meta["llama.block_count"]
    heads, kv = meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]
    hd, vocab = d // heads, len(meta["tokenizer.ggml.tokens"])
    # written out here: Q K V, scores + weighted sum over n positions, output, gate up down; the head
    macs = L * (d * (heads * hd + 2 * kv * hd) + 2 * heads * hd * n + heads * hd * d + 3 * d * ff) + vocab * d
    assert m["context_len"] == n
    assert m["macs_traced"] == m["macs_per_token_metadata"] == macs
    assert m["flops_per_token_traced"] == m["flops_per_token_metadata"] == 2 * macs
    assert m["flops_traced_equal_metadata"] is True and m["costs_agree"] is True
    assert sum(r["flops"] for r in tables["cost"]) == 2 * macs
    # bytes: gguf-py's own tensor sizes; a decode step reads every block tensor, the final norm, the head
    # whole, and one row of the embedding (its row bytes: the tensor's bytes / its rows)
    elements, n_bytes = tensor_sizes(path)
    head = "token_embd.weight" if "output.weight" not in n_bytes else "output.weight"
    named = [k for k in n_bytes if k.startswith("blk.")] + ["output_norm.weight", head]
    row_file = n_bytes["token_embd.weight"] // vocab
    assert (
        m["weight_bytes_per_token_file"]
        == m["weight_bytes_per_token_file_traced"]
        == (sum(n_bytes[k] for k in named) + row_file)
    )
    assert (
        m["weight_bytes_per_token_float32"]
        == m["weight_bytes_per_token_float32_traced"]
        == 4 * (sum(elements[k] for k in named) + d)
    )
    assert sum(r["file_bytes"] for r in tables["cost"]) == m["weight_bytes_per_token_file"]
    assert sum(r["float32_bytes"] for r in tables["cost"]) == m["weight_bytes_per_token_float32"]
    assert m["flops_per_file_byte"] == pytest.approx(2 * macs / m["weight_bytes_per_token_file"])


# -- bad input: one line naming the key or file, before any heavy work -----------------------------------


def one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    "prompt, forward, message",
    [
        ("", None, r"^prompt = '': the prompt is empty"),
        (None, None, r"^prompt = None: the prompt is empty"),
        (" cat" * 200, None, r"^prompt: 200 tokens exceed llama\.context_length = 128 \(metadata\.json\); shorten"),
        ("TFQ", None, r"^prompt = 'TFQ' gives no tokens in this file's vocabulary"),
        (" cat", {"resident_budget_mb": -1}, r"^forward\.resident_budget_mb = -1: use a number of MB, 0 or more"),
        (" cat", {"resident_budget_mb": "big"}, r"^forward\.resident_budget_mb = 'big'"),
        (" cat", [1], r"^forward = \[1\]: use a mapping"),
    ],
)
def test_bad_input_is_one_line_before_the_model_is_opened(tiny_gguf, tmp_path, prompt, forward, message):
    with GGUFFile(tiny_gguf) as f:
        meta = dict(f.metadata)
    missing = tmp_path / "no-such-model.gguf"  # compute() would fail on it if it got as far as the weights
    with pytest.raises(LessonInputError, match=message) as err:  # ForwardPassError, or the shared budget check's
        lesson.compute(missing, meta, prompt, forward)
    one_line(err)


def test_other_architectures_and_broken_metadata_are_refused_in_one_line(tmp_path):
    assert lesson.SPEC.architectures == tuple(ARCHITECTURES) and "gemma3" in lesson.SPEC.architectures
    path = write_tiny_llama(tmp_path / "p.gguf", arch="mamba")  # an architecture the table lacks
    with GGUFFile(path) as f:
        meta = dict(f.metadata)
    rows = ", ".join(ARCHITECTURES)
    want = rf"^04_the_forward_pass: it follows {rows} only, .*'mamba'.*general\.architecture"
    with pytest.raises(lesson.ForwardPassError, match=want) as e:
        lesson.prepare(meta, PROMPT)
    one_line(e)
    path = write_tiny_llama(tmp_path / "t.gguf")
    with GGUFFile(path) as f:
        meta = dict(f.metadata)
    del meta["llama.context_length"]
    with pytest.raises(lesson.ForwardPassError, match=r"metadata\.json: metadata key 'llama\.context_length'") as e:
        lesson.prepare(meta, PROMPT)
    one_line(e)


# -- the notebook -----------------------------------------------------------------------------------------


def notebook_parameters() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1
    tree = ast.parse("".join(cells[0]["source"]))
    return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]


def test_the_notebook_declares_exactly_its_parameters_and_does_the_steps_in_cells():
    assert notebook_parameters() == lesson.SPEC.parameter_names()
    code = "\n".join(
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"
    )
    for step in (
        "x = embed(W, np.array(ids))",
        "xn = rms_norm(x, w0.attn_norm, eps)",
        "q, k, v = matmul(xn, w0.wq), matmul(xn, w0.wk), matmul(xn, w0.wv)",
        "q, k = rms_norm(q, w0.q_norm, eps), rms_norm(k, w0.k_norm, eps)",
        "q, k = rope(q, cos, sin, spec.rope_layout), rope(k, cos, sin, spec.rope_layout)",
        "scores[future] = -np.inf",
        "weights = softmax(scores)",
        "attn_out = matmul(att.reshape(N, spec.q_dim), w0.wo)",
        "attn_out = rms_norm(attn_out, w0.post_attn_norm, eps)",
        "x_mid = x + attn_out",
        "h_ffn = activation(spec.activation)(g) * u",
        "x_block0 = x_mid + ffn_out",
        "logits = unembed(x_final, W, spec)[0]",
    ):
        assert step in code, step


@pytest.mark.slow  # a whole notebook again: make test runs every notebook once (test_notebooks)
def test_notebook_on_a_tiny_model(tmp_path):
    gguf = write_tiny_llama(tmp_path / "tiny.gguf", n_layers=3, tied=True)
    streamed = {"resident_budget_mb": 0.001}
    got, out = run_lesson_notebook(lesson.SPEC, gguf, tmp_path, model="tiny", prompt=TINY_PROMPT, forward=streamed)
    with GGUFFile(gguf) as f:
        meta = dict(f.metadata)
    want = plain(lesson.compute(gguf, meta, TINY_PROMPT, streamed)[0])  # streamed too: the same sums, bit for bit
    for key in (
        "prompt_ids",
        "top5",
        "next_token_id",
        "next_token",
        "residual_norms",
        "logit_lens_top_ids",
        "logit_lens_next_token_ranks",
        "flops_per_token_metadata",
        "flops_per_token_traced",
        "weight_bytes_per_token_file",
        "weight_bytes_per_token_float32",
    ):
        assert got[key] == want[key], key
    assert got["weights_mode"] == "streaming"  # a 1 KiB budget: the notebook's block 0 by hand reads streamed weights
    assert got["block0_by_hand_max_abs_diff"] <= 1e-5 and got["block0_by_hand_vs_trace_max_abs_diff"] <= 1e-5
    assert got["model"] == "tiny" and got["is_specimen"] is False
    with (out / "claims.csv").open(encoding="utf-8") as f:
        assert f.read() == ",".join(claims.COLUMNS) + "\n"  # no course numbers to compare with
    with (out / "next_token_top5.csv").open(encoding="utf-8") as f:
        assert [int(r["id"]) for r in csv.DictReader(f)] == [r["id"] for r in got["top5"]]
    with (out / "logit_lens.csv").open(encoding="utf-8") as f:
        assert [int(r["top_id"]) for r in csv.DictReader(f)] == got["logit_lens_top_ids"]
    for png in lesson.SPEC.figures:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- every other row of the table ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_row_through_the_lesson(tmp_path, name):
    """The lesson on tests/tiny_rows.py's files: its logits are the model's, the logit lens ends on
    them (gemma2's capped logits included), and the cost table adds up to the traced pass (phi3's
    stacked tensors counted once, as attn_qkv and ffn_up)."""
    path = write_row(name, tmp_path)
    prompt = "the cat sat on the mat"
    with GGUFFile(path) as f:
        meta = dict(f.metadata)
    m, tables = lesson.compute(path, meta, prompt)
    with Model.from_gguf(path) as model:
        want = model.forward(m["prompt_ids"])[-1]
    np.testing.assert_allclose(tables["logits"], want, rtol=0, atol=1e-5)
    assert m["logit_lens_top_ids"][-1] == m["next_token_id"] == int(np.argmax(want))
    assert m["costs_agree"] is True
    for column, total in (("float32_bytes", "weight_bytes_per_token_float32"), ("file_bytes", "weight_bytes_per_token_file"),
                          ("flops", "flops_per_token_metadata")):  # fmt: skip
        assert sum(r[column] for r in tables["cost"]) == m[total], column
    steps = {r["step"]: r["weights"] for r in tables["cost"]}
    stacked = name.startswith("phi3")
    assert steps["Q K V projections"] == ("attn_qkv" if stacked else "attn_q, attn_k, attn_v")
    assert steps["FFN gate, up, down"] == ("ffn_up, ffn_down" if stacked else "ffn_gate, ffn_up, ffn_down")
    if name == "gemma2":
        assert np.abs(tables["logits"]).max() < 4.0  # the file's final cap


@pytest.mark.slow  # papermill, about 25 s each on the loaded machine
@pytest.mark.parametrize("name", ["gemma2", "llama3-rope-freqs", "phi3-long-context"])
def test_notebook_on_every_other_row(tmp_path, name):
    """The notebook's block 0 by hand (rope with the file's factors and scaling, gemma2's capped scores)
    lands on the package's block and the lesson's trace."""
    gguf = write_row(name, tmp_path)
    got, _ = run_lesson_notebook(lesson.SPEC, gguf, tmp_path, model=name, prompt="the cat sat on the mat")
    assert got["block0_by_hand_max_abs_diff"] <= 1e-5 and got["block0_by_hand_vs_trace_max_abs_diff"] <= 1e-5
    assert got["costs_agree"] is True


# -- Gemma 3 through the same table --------------------------------------------------------------------------

GEMMA_TINY_PROMPT = "the cat sat on the mat, a kitten ran"  # 13 tokens, past the tiny file's window of 4


@pytest.fixture
def tiny_gemma(tmp_path):
    path = write_tiny_gemma3(tmp_path / "tiny-gemma3.gguf")
    with GGUFFile(path) as f:
        return path, dict(f.metadata)


def test_tiny_gemma3_next_token_residuals_lens_and_costs_match_a_float64_gemma(tiny_gemma):
    path, meta = tiny_gemma
    m, tables = lesson.compute(path, meta, GEMMA_TINY_PROMPT)
    ids = m["prompt_ids"]
    assert len(ids) == 13 and ids[0] == 2  # BOS, then SentencePiece pieces; longer than the window
    ref = reference_gemma3(path, ids)
    logits = ref["logits"][-1]
    want = np.argsort(-logits, kind="stable")[:5]
    assert [r["id"] for r in m["top5"]] == want.tolist()
    assert rel_err(tables["logits"], logits) < GEMMA_LOGITS_REL
    np.testing.assert_allclose(m["residual_norms"], [np.linalg.norm(r) for r in ref["stream"]], rtol=GEMMA_NORMS_RTOL)
    assert m["logit_lens_top_ids"] == [int(np.argmax(lg)) for lg in ref["lens"]]
    assert (m["architecture"], m["activation"]) == ("gemma3", "gelu_tanh")
    assert (m["sliding_window"], m["global_layers"]) == (4, [5])
    assert m["architecture_recipe"].startswith("gemma3: embedding x sqrt(d_model)")
    assert m["head_tensor"] == "token_embd.weight" and m["tied"] is True
    # costs: the q/k and post norms are read (bytes) but multiply nothing; every row adds up
    assert m["costs_agree"] is True
    elements, n_bytes = tensor_sizes(path)
    d, vocab = meta["gemma3.embedding_length"], len(meta["tokenizer.ggml.tokens"])
    named = [k for k in n_bytes if k.startswith("blk.")] + ["output_norm.weight", "token_embd.weight"]
    assert m["weight_bytes_per_token_float32"] == 4 * (sum(elements[k] for k in named) + d)
    assert m["weight_bytes_per_token_file"] == sum(n_bytes[k] for k in named) + n_bytes["token_embd.weight"] // vocab
    extra = [r for r in tables["cost"] if r["step"] == "gemma3's extra norms"]
    assert len(extra) == 1 and extra[0]["flops"] == 0
    assert extra[0]["float32_bytes"] == 4 * sum(
        elements[k] for k in named if "_norm" in k and ("attn_q_norm" in k or "attn_k_norm" in k or "post_" in k)
    )
    assert sum(r["float32_bytes"] for r in tables["cost"]) == m["weight_bytes_per_token_float32"]
    assert sum(r["flops"] for r in tables["cost"]) == m["flops_per_token_metadata"]


@pytest.mark.slow  # about 25 s (papermill) on the loaded machine
def test_notebook_on_a_tiny_gemma3(tmp_path):
    """The notebook's block 0 by hand follows the table (embedding scale, q/k norms, NeoX rope at the
    local base, the window, post norms, GELU-tanh) and lands on the package's block."""
    gguf = write_tiny_gemma3(tmp_path / "tiny-gemma3.gguf")
    got, out = run_lesson_notebook(lesson.SPEC, gguf, tmp_path, model="tiny-gemma3", prompt=GEMMA_TINY_PROMPT)
    with GGUFFile(gguf) as f:
        want = plain(lesson.compute(gguf, dict(f.metadata), GEMMA_TINY_PROMPT)[0])
    for key in (
        "prompt_ids",
        "top5",
        "next_token_id",
        "residual_norms",
        "logit_lens_top_ids",
        "flops_per_token_traced",
    ):
        assert got[key] == want[key], key
    assert got["block0_by_hand_max_abs_diff"] <= 1e-5 and got["block0_by_hand_vs_trace_max_abs_diff"] <= 1e-5


@pytest.mark.slow
def test_gemma3_270m_logits_match_transformers_over_the_whole_vocabulary(gemma_gguf, gemma_hf):
    """Lesson 4's pass on the real Gemma 3 270M (Q4_K_M) against transformers loading the same GGUF in
    float32: the same prompt ids, every one of the 262,144 logits within 1e-2, the same top 5."""
    torch, tokenizer, hf_model = gemma_hf
    with GGUFFile(gemma_gguf) as f:
        meta = dict(f.metadata)
    m, tables = lesson.compute(gemma_gguf, meta, PROMPT)
    ids = tokenizer(PROMPT)["input_ids"]
    assert m["prompt_ids"] == ids and ids[0] == 2
    with torch.no_grad():
        out = hf_model(torch.tensor([ids]), output_hidden_states=True)
    logits = out.logits[0, -1].double().numpy()
    assert tables["logits"].shape == logits.shape == (262144,)
    assert np.abs(tables["logits"] - logits).max() <= 1e-2
    assert [r["id"] for r in m["top5"]] == np.argsort(-logits, kind="stable")[:5].tolist()
    # hidden_states[0] is the scaled embedding, [i] the input of layer i
    hidden = [h[0, -1].double().numpy() for h in out.hidden_states]
    np.testing.assert_allclose(m["residual_norms"][:18], [np.linalg.norm(h) for h in hidden[:18]], rtol=1e-4)
    assert m["global_layers"] == [5, 11, 17] and m["weights_mode"] == "resident"


# -- the default model (slow): one notebook run, transformers once ------------------------------------------


@pytest.fixture(scope="module")
def default_run(default_gguf, tmp_path_factory):
    """The notebook on the default model with the config's defaults: (metrics, output folder)."""
    return run_lesson_notebook(
        lesson.SPEC, default_gguf, tmp_path_factory.mktemp("lesson4-default"), model="smollm2-135m"
    )


@pytest.fixture(scope="module")
def hf_pass(hf):
    """transformers on the prompt: (ids, last position's logits, hidden states of the last position)."""
    torch, tokenizer, model = hf
    ids = tokenizer(PROMPT)["input_ids"]
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    hidden = [h[0, -1].double().numpy() for h in out.hidden_states]
    return ids, out.logits[0, -1].double().numpy(), hidden


@pytest.mark.slow
def test_default_model_next_token_matches_transformers(default_run, hf_pass):
    m, out = default_run
    ids, logits, _ = hf_pass
    assert m["prompt"] == PROMPT and m["prompt_ids"] == ids == [504, 3575, 282, 4649, 314]
    want = np.argsort(-logits, kind="stable")[:5]
    assert [r["id"] for r in m["top5"]] == want.tolist()
    assert np.abs(np.array([r["logit"] for r in m["top5"]]) - logits[want]).max() <= 1e-3
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose([r["prob"] for r in m["top5"]], p[want], atol=2e-4)
    assert m["next_token_id"] == int(want[0]) and m["next_token_logit"] == m["top5"][0]["logit"]
    assert m["next_token"] == " Paris"  # a property of this model, not a course claim
    assert m["head_tensor"] == "token_embd.weight" and m["tied"] is True
    with (out / "next_token_top5.csv").open(encoding="utf-8") as f:
        assert [int(r["id"]) for r in csv.DictReader(f)] == want.tolist()


@pytest.mark.slow
def test_default_model_residual_stream_matches_transformers(default_run, hf_pass):
    """transformers' hidden_states[i] is the input of layer i (so [0] is the embedding), and its last
    entry is the output of the final norm."""
    m, _ = default_run
    _, _, hidden = hf_pass
    n_layers = m["n_layers"]
    assert len(hidden) == n_layers + 1
    np.testing.assert_allclose(
        m["residual_norms"][:n_layers], [np.linalg.norm(h) for h in hidden[:n_layers]], rtol=1e-4
    )
    assert m["final_norm_length"] == pytest.approx(np.linalg.norm(hidden[-1]), rel=1e-4)
    assert m["block0_by_hand_max_abs_diff"] <= 1e-3 and m["block0_by_hand_vs_trace_max_abs_diff"] <= 1e-3


@pytest.mark.slow
def test_default_model_costs_and_lens(default_run, default_gguf):
    m, out = default_run
    # SmolLM2-135M: 30 blocks, d 576, 9 heads of 64 sharing 3 K/V heads, FFN 1536, vocabulary 49152, tied;
    # the traced token attends to the 5 prompt positions
    macs = 30 * (576 * (576 + 2 * 192) + 2 * 9 * 64 * 5 + 576 * 576 + 3 * 576 * 1536) + 49152 * 576
    assert m["macs_traced"] == m["macs_per_token_metadata"] == macs == 134_652_672
    assert m["flops_per_token_traced"] == m["flops_per_token_metadata"] == 269_305_344
    assert m["costs_agree"] is True
    elements, n_bytes = tensor_sizes(default_gguf)
    named = [k for k in n_bytes if k.startswith("blk.")] + ["output_norm.weight", "token_embd.weight"]
    row = n_bytes["token_embd.weight"] // 49152
    assert (
        m["weight_bytes_per_token_file"]
        == m["weight_bytes_per_token_file_traced"]
        == sum(n_bytes[k] for k in named) + row
    )
    assert m["weight_bytes_per_token_float32"] == 4 * (sum(elements[k] for k in named) + 576) == 538_062_336
    # the lens: the final point is the model's own prediction; " Paris" is ranked top only there
    assert m["logit_lens_top_ids"][-1] == m["next_token_id"] and m["logit_lens_next_token_ranks"][-1] == 1
    assert m["logit_lens_next_token_probs"][-1] == pytest.approx(m["next_token_prob"], rel=1e-6)
    assert m["logit_lens_first_block_top1"] == m["logit_lens_settled_block"] == 29
    assert m["logit_lens_next_token_ranks"][0] > 1000  # the embedding alone says nothing about Paris
    with (out / "cost_per_token.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert sum(int(r["flops"]) for r in rows) == 269_305_344

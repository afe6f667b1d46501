"""bytesup.model.param_counts: every tensor a file holds is counted, and a configuration predicts them all."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bytesup.gguf.file import GGUFFile
from bytesup.model import param_counts as pc
from bytesup.model.configs import Architecture, llama_tensor_shapes
from bytesup.model.synthetic import write_tiny_llama

# Gemma 3 270M as its GGUF's metadata gives it (d 640, FFN 2048, 18 blocks, 4 heads, 1 KV head,
# key_length 256, vocabulary 262,144, tied), with the q/k norms and post-norms of its blocks.
GEMMA3_270M = Architecture("gemma3-270m", d_model=640, d_ff=2048, n_layers=18, vocab=262144, n_heads=4,
                           n_kv_heads=1, head_dim=256, tied=True, qk_norm=True, post_norms=True)  # fmt: skip
GEMMA3_270M_FILE_PARAMETERS = 268_098_176  # the sum of every tensor's elements in the Q4_K_M file


def rows_of(f: GGUFFile) -> list[dict]:
    return pc.tensor_rows(f.tensors)


def test_roles_of_gemma_and_qwen_tensors():
    for name in ("blk.0.attn_q_norm.weight", "blk.3.attn_k_norm.weight", "blk.17.post_attention_norm.weight",
                 "blk.2.post_ffw_norm.weight", "blk.0.ffn_norm.weight"):  # fmt: skip
        assert pc.role(name) == "norms", name
    assert pc.role("blk.0.attn_q.bias") == "attn_q" and pc.role("blk.0.attn_v.bias") == "attn_v"
    assert pc.role("blk.0.attn_q.weight") == "attn_q"
    assert pc.role("blk.0.attn_q_normal.weight") == "other"  # not a norm by prefix
    assert pc.role("rope_freqs.weight") == "other"


def test_gemma_layout_and_count_agree_tensor_by_tensor():
    layout = llama_tensor_shapes(GEMMA3_270M)
    assert len(layout) == 1 + 18 * 13 + 1  # token_embd, 13 per block, output_norm; tied: no output.weight
    per_block = {name.split(".", 2)[2]: shape for name, shape in layout if name.startswith("blk.0.")}
    assert per_block["attn_q_norm.weight"] == per_block["attn_k_norm.weight"] == (256,)
    assert per_block["post_attention_norm.weight"] == per_block["post_ffw_norm.weight"] == (640,)
    assert per_block["attn_q.weight"] == (1024, 640) and per_block["attn_k.weight"] == (256, 640)
    total = sum(math.prod(s) for _, s in layout)
    c = pc.count(GEMMA3_270M)
    assert c["block_norms"] == 2 * 640 + 2 * 256 + 2 * 640
    assert c["total"] == total == GEMMA3_270M_FILE_PARAMETERS
    # without the extra norms the count is 32,256 short: what lesson 3b printed before
    plain = dataclasses.replace(GEMMA3_270M, qk_norm=False, post_norms=False)
    assert GEMMA3_270M_FILE_PARAMETERS - pc.count(plain)["total"] == 18 * (2 * 256 + 2 * 640) == 32_256


def test_qkv_bias_adds_q_k_v_bias_vectors():
    a = Architecture("qwen-like", d_model=64, d_ff=128, n_layers=2, vocab=100, n_heads=4, n_kv_heads=2,
                     head_dim=16, qkv_bias=True)  # fmt: skip
    plain = dataclasses.replace(a, qkv_bias=False)
    assert pc.count(a)["total"] - pc.count(plain)["total"] == 2 * (64 + 32 + 32)
    layout = dict(llama_tensor_shapes(a))
    assert layout["blk.1.attn_q.bias"] == (64,) and layout["blk.1.attn_v.bias"] == (32,)
    assert "blk.1.attn_output.bias" not in layout
    assert sum(math.prod(s) for s in layout.values()) == pc.count(a)["total"]


def test_architecture_from_gguf_reads_the_extras_from_the_names():
    d = {"embedding_length": 640, "feed_forward_length": 2048, "block_count": 18, "head_count": 4,
         "head_count_kv": 1, "head_dim": 256}  # fmt: skip
    names = [n for n, _ in llama_tensor_shapes(GEMMA3_270M)]
    a = pc.architecture_from_gguf(d, names, 262144)
    assert (a.qk_norm, a.post_norms, a.qkv_bias, a.biases, a.tied) == (True, True, False, False, True)
    assert pc.count(a)["total"] == GEMMA3_270M_FILE_PARAMETERS
    qwen = pc.architecture_from_gguf(d, names[:5] + ["blk.0.attn_q.bias"], 262144)
    assert qwen.qkv_bias and not qwen.biases and not qwen.qk_norm


def test_tiny_llama_counts_every_tensor(tmp_path):
    path = write_tiny_llama(tmp_path / "tiny.gguf", extra_metadata=None)
    with GGUFFile(path) as f:
        rows = rows_of(f)
        table = pc.table_counts(rows)
        assert sum(table["params"].values()) == sum(t.n_elements for t in f.tensors)
        assert "other" not in table["params"]
        d = {"embedding_length": 32, "feed_forward_length": 64, "block_count": 2, "head_count": 4,
             "head_count_kv": 2, "head_dim": 8}  # fmt: skip
        a = pc.architecture_from_gguf(d, f.tensor_names, len(f.metadata["tokenizer.ggml.tokens"]))
        assert pc.count(a)["total"] == sum(t.n_elements for t in f.tensors)
        assert dict(llama_tensor_shapes(a)) == {t.name: t.shape for t in f.tensors}


def test_tensor_rows_total_and_by_type(tmp_path):
    with GGUFFile(write_tiny_llama(tmp_path / "tiny.gguf")) as f:
        rows = pc.tensor_rows(f.tensors)
        assert [r["name"] for r in rows] == [t.name for t in f.tensors]
        assert rows[0] == {
            "name": f.tensors[0].name,
            "type": f.tensors[0].type_name,
            "bytes": f.tensors[0].n_bytes,
            "shape": "x".join(map(str, f.tensors[0].shape)),
            "elements": f.tensors[0].n_elements,
        }
        t = pc.table_counts(rows)
        assert t["total"] == sum(x.n_elements for x in f.tensors) == 22_816
        assert sum(g["tensors"] for g in t["by_type"].values()) == len(f.tensors)
        assert sum(g["bytes"] for g in t["by_type"].values()) == sum(x.n_bytes for x in f.tensors)
        q41 = [x for x in f.tensors if x.type_name == "Q4_1"]
        assert t["by_type"]["Q4_1"] == {"tensors": len(q41), "parameters": sum(x.n_elements for x in q41),
                                        "bytes": sum(x.n_bytes for x in q41)}  # fmt: skip


def test_an_unknown_tensor_is_counted_as_other():
    rows = [{"name": "token_embd.weight", "elements": 10, "bytes": 40},
            {"name": "blk.0.mystery.weight", "elements": 7, "bytes": 28}]  # fmt: skip
    t = pc.table_counts(rows)
    assert t["params"] == {"token_embd": 10, "other": 7} and t["total"] == 17
    assert t["by_type"] == {}  # rows without a type column: counted, but under no type


def test_per_token_reads_cover_every_tensor_of_a_gemma_layout():
    rows = [{"name": n, "type": "F32", "shape": "x".join(map(str, s)), "elements": math.prod(s),
             "bytes": 4 * math.prod(s)} for n, s in llama_tensor_shapes(GEMMA3_270M)]  # fmt: skip
    reads = pc.per_token_reads(rows)
    assert {r["name"] for r in reads if "(tied" not in r["name"]} == {r["name"] for r in rows}
    assert sum(r["elements_in_file"] for r in reads if not r.get("second_pass")) == GEMMA3_270M_FILE_PARAMETERS
    assert {r["part"] for r in reads if "norm" in r["name"] and r["name"] != "output_norm.weight"} == {"norms"}


def test_default_model_counts_every_tensor(default_gguf):
    with GGUFFile(default_gguf) as f:
        table = pc.table_counts(rows_of(f))
    assert sum(table["params"].values()) == 134_515_008 and "other" not in table["params"]


@pytest.mark.slow
def test_gemma_file_counts_every_tensor(gemma_gguf):
    with GGUFFile(gemma_gguf) as f:
        rows = rows_of(f)
        assert dict(llama_tensor_shapes(GEMMA3_270M)) == {t.name: t.shape for t in f.tensors}
    table = pc.table_counts(rows)
    assert sum(table["params"].values()) == GEMMA3_270M_FILE_PARAMETERS and "other" not in table["params"]
    assert table["params"]["norms"] == 18 * (2 * 640 + 2 * 256 + 2 * 640)

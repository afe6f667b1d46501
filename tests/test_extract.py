"""bytesup.gguf.extract: tensor selection, the four outputs, and the Snakemake entry point."""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bytesup.gguf.extract import TensorSelectionError, extract, select_tensors, tensor_file_name
from bytesup.gguf.file import GGUFFile, GGUFFormatError
from bytesup.model.synthetic import raw_gguf, write_tiny_llama
from bytesup.run.files import sha256_file

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "blk.1.attn_q.weight",
         "blk.10.attn_q.weight", "output_norm.weight"]  # fmt: skip
PATTERNS = ["token_embd.weight", "blk.0.*", "output_norm.weight", "?output.weight"]  # the default config


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- selection --------------------------------------------------------------------------


def test_select_in_file_order_each_once():
    assert select_tensors(NAMES, ["output_norm.weight", "blk.0.*", "blk.0.attn_q.weight"]) == [
        "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "output_norm.weight"]  # fmt: skip
    assert select_tensors(NAMES, ["blk.1.*"]) == ["blk.1.attn_q.weight"]  # not blk.10
    assert select_tensors(NAMES, ["blk.*.attn_q.weight"]) == [n for n in NAMES if "attn_q" in n]
    assert select_tensors(NAMES, None) == NAMES
    assert select_tensors(NAMES, []) == []


def test_optional_patterns_may_match_nothing():
    assert select_tensors(NAMES, ["token_embd.weight", "?output.weight"]) == ["token_embd.weight"]
    assert select_tensors(NAMES, ["token_embd.weight"], optional=["output.weight"]) == ["token_embd.weight"]
    assert select_tensors(NAMES + ["output.weight"], ["?output.weight"]) == ["output.weight"]
    # the leading '?' is always the marker: '??' is optional + a one-character wildcard
    assert select_tensors(NAMES, ["??lk.1.*"]) == ["blk.1.attn_q.weight"]


def test_required_pattern_matching_nothing_is_one_clear_error():
    with pytest.raises(TensorSelectionError) as info:
        select_tensors(NAMES, ["blk.0.*", "blk.0.ffn_gate"], source="m.gguf")
    message = str(info.value)
    assert message.startswith("m.gguf: pattern 'blk.0.ffn_gate' matches no tensor")
    assert "'blk.0.attn_q.weight'" in message and "prefix it with '?'" in message
    with pytest.raises(TypeError):
        select_tensors(NAMES, "blk.0.*")


def test_tensor_file_names_stay_inside_the_directory():
    assert tensor_file_name("blk.0.attn_q.weight") == "blk.0.attn_q.weight.npy"
    for hostile in ["../../etc/passwd", "/abs", "..", ".", "", "a/b", "a\\b", "x\n\x00y", "<script>", "Ġcat"]:
        name = tensor_file_name(hostile)
        assert "/" not in name and "\\" not in name and not name.startswith(".") and name.isprintable()
        assert name.endswith(".npy") and name.isascii()
    assert tensor_file_name("a/b") != tensor_file_name("a%2Fb")
    assert len(tensor_file_name("x" * 5000)) < 255


# -- extract ----------------------------------------------------------------------------


def test_extract_writes_the_four_outputs(tiny_gguf, tmp_path, caplog):
    out = tmp_path / "gguf"
    with caplog.at_level(logging.INFO, logger="bytesup"):
        index = extract(tiny_gguf, out, PATTERNS)
    assert json.loads((out / "extract.json").read_text()) == index
    expected = ["token_embd.weight"] + [f"blk.0.{p}.weight" for p in (
        "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")] + [
        "output_norm.weight", "output.weight"]  # fmt: skip
    assert list(index["tensors"]) == expected
    assert index["gguf"] == {"file": "tiny.gguf", "file_size": tiny_gguf.stat().st_size, "sha256": sha256(tiny_gguf)}
    assert index["patterns"] == PATTERNS and index["metadata"] == "metadata.json"
    assert index["tensors_csv"] == "tensors.csv"
    with GGUFFile(tiny_gguf) as f:
        for name, entry in index["tensors"].items():
            npy = out / entry["file"]
            assert entry["file"] == f"tensors/{name}.npy"
            assert entry["sha256"] == sha256(npy)
            array = np.load(npy)
            assert array.dtype == np.float32 and list(array.shape) == entry["shape"] == list(f.tensor(name).shape)
            assert np.array_equal(array, f.load(name))
            assert entry["type"] == f.tensor(name).type_name and entry["dequantizer"] == "hand"
            assert entry["offset"] == f.tensor(name).offset and entry["elements"] == array.size
    assert index["tensors"]["blk.0.ffn_down.weight"]["shape"] == [32, 64]
    assert sorted(p.name for p in (out / "tensors").iterdir()) == sorted(f"{n}.npy" for n in expected)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert "[3/12] blk.0.attn_q.weight Q4_1 32x32: 640 bytes" in caplog.text


def test_metadata_json_keeps_everything(tiny_gguf, tmp_path):
    extract(tiny_gguf, tmp_path, [])
    doc = json.loads((tmp_path / "metadata.json").read_text(encoding="utf-8"))
    with GGUFFile(tiny_gguf) as f:
        assert doc["metadata"] == f.metadata and doc["types"] == f.metadata_types
        assert doc["gguf"]["data_offset"] == f.data_offset and doc["gguf"]["tensor_count"] == 21
    tokens = doc["metadata"]["tokenizer.ggml.tokens"]
    assert "Ġcat" in tokens and len(tokens) == doc["metadata"]["llama.vocab_size"]  # in full, not summarised
    assert doc["metadata"]["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))


def test_tensors_csv_lists_every_tensor(tiny_gguf, tmp_path):
    extract(tiny_gguf, tmp_path, ["token_embd.weight"])
    with open(tmp_path / "tensors.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["name", "type", "shape", "offset", "bytes", "elements"]
    assert len(rows) == 21
    by_name = {r["name"]: r for r in rows}
    assert by_name["blk.0.ffn_down.weight"]["shape"] == "32x64"  # numpy order: rows x row length
    assert by_name["blk.0.ffn_up.weight"]["type"] == "Q4_0"
    assert by_name["output_norm.weight"]["shape"] == "32"
    with GGUFFile(tiny_gguf) as f:
        emb = f.tensor("token_embd.weight")
    assert by_name["token_embd.weight"] == {"name": "token_embd.weight", "type": "Q8_0", "shape": f"{emb.shape[0]}x32",
                                            "offset": str(emb.offset), "bytes": str(emb.n_bytes),
                                            "elements": str(emb.n_elements)}  # fmt: skip


def test_tied_model_and_missing_pattern(tiny_gguf_tied, tmp_path):
    index = extract(tiny_gguf_tied, tmp_path / "a", PATTERNS)
    assert "output.weight" not in index["tensors"] and "output_norm.weight" in index["tensors"]
    with pytest.raises(TensorSelectionError, match="pattern 'output.weight' matches no tensor"):
        extract(tiny_gguf_tied, tmp_path / "b", ["output.weight"])
    assert not (tmp_path / "b" / "extract.json").exists()


def test_explicit_paths_and_determinism(tiny_gguf, tmp_path):
    kw = dict(metadata_path=tmp_path / "m" / "meta.json", tensors_csv_path=tmp_path / "t.csv",
              index_path=tmp_path / "i" / "index.json", tensors_dir=tmp_path / "npy")  # fmt: skip
    first = extract(tiny_gguf, None, ["blk.1.*"], **kw)
    assert first["metadata"] == "../m/meta.json" and first["tensors_csv"] == "../t.csv"
    assert first["tensors"]["blk.1.attn_k.weight"]["file"] == "../npy/blk.1.attn_k.weight.npy"
    assert {e["type"] for e in first["tensors"].values()} >= {"BF16", "Q5_0", "Q5_1"}
    snapshot = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    second = extract(tiny_gguf, None, ["blk.1.*"], **kw)
    assert first == second
    assert snapshot == {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match="give out_dir"):
        extract(tiny_gguf, None, ["blk.1.*"], index_path=tmp_path / "x.json")


def test_fallback_dequantizer_and_hostile_names(tmp_path):
    """A TQ2_0 tensor (gguf.quants does it, bytesup does not) with a path-like name; strings that are not text."""
    rng = np.random.default_rng(0)
    tq2 = rng.integers(0, 256, size=64, dtype=np.uint8).tobytes() + np.float16(0.5).tobytes()  # quants, scale
    metadata = [("general.name", "STRING", "<script>alert(1)</script>\n\x1b[31m"), ("nan", "FLOAT32", math.nan),
                ("infs", "ARRAY", ("FLOAT64", [math.inf, -math.inf, 1.5]))]  # fmt: skip
    path = tmp_path / "odd.gguf"
    path.write_bytes(raw_gguf(metadata, [("../../escape", (256,), 35, 0)], tq2))  # ggml type 35: TQ2_0
    out = tmp_path / "out"
    with np.errstate(all="ignore"):
        index = extract(path, out, ["*"])
    entry = index["tensors"]["../../escape"]
    assert entry["dequantizer"] == "fallback" and entry["type"] == "TQ2_0"
    npy = (out / entry["file"]).resolve()
    assert npy.parent == (out / "tensors").resolve() and npy.name == "%2E.%2F..%2Fescape.npy"
    doc = json.loads((out / "metadata.json").read_text(encoding="utf-8"))  # strict JSON: no bare NaN
    assert doc["metadata"]["general.name"] == "<script>alert(1)</script>\n\x1b[31m"
    assert doc["metadata"]["nan"] == "NaN" and doc["metadata"]["infs"] == ["Infinity", "-Infinity", 1.5]


def test_malformed_gguf_raises_format_error(tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + bytes(10))
    with pytest.raises(GGUFFormatError):
        extract(path, tmp_path / "out", None)


# -- the Snakemake entry point --------------------------------------------------------------


def run_script(gguf: Path, out: Path, patterns: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)  # Snakemake creates the log's directory
    record = out.parent / "model.json"  # the fetch record: the sha256 extract takes instead of re-reading the model
    record.write_text(json.dumps({"sha256": sha256_file(gguf), "size": gguf.stat().st_size}))  # as the fetch writes it
    sm = SimpleNamespace(
        input=SimpleNamespace(gguf=str(gguf), record=str(record)),
        output=SimpleNamespace(
            metadata=str(out / "metadata.json"),
            tensors_csv=str(out / "tensors.csv"),
            index=str(out / "extract.json"),
            tensors_dir=str(out / "tensors"),
        ),  # fmt: skip
        params=SimpleNamespace(patterns=patterns, shown=str(gguf), needed_by={}),
        log=[str(out.parent / "extract.log")],
    )
    runpy.run_path(str(ROOT / "workflow" / "scripts" / "extract.py"), init_globals={"snakemake": sm})


def test_workflow_script(tiny_gguf_tied, tmp_path):
    out = tmp_path / "results" / "gguf"
    run_script(tiny_gguf_tied, out, PATTERNS)
    index = json.loads((out / "extract.json").read_text())
    assert len(index["tensors"]) == 11 and (out / "tensors" / "token_embd.weight.npy").is_file()
    assert "[11/11] output_norm.weight F32 32" in (tmp_path / "results" / "extract.log").read_text()


def test_workflow_script_fails_in_one_line(tiny_gguf, tmp_path, capsys):
    out = tmp_path / "results" / "gguf"
    with pytest.raises(SystemExit) as info:
        run_script(tiny_gguf, out, ["blk.99.*"])
    assert info.value.code == 1
    log = (tmp_path / "results" / "extract.log").read_text()
    assert log.startswith("ERROR ") and "pattern 'blk.99.*' matches no tensor" in log
    assert "Traceback" not in capsys.readouterr().err


def test_workflow_script_refuses_a_hyperparameter_no_model_has(tmp_path, capsys):
    """head_count 0 (it divided by zero in lesson 3's dims) and a NaN eps: one line naming the key and the
    file once, before anything is written, so no lesson reads them."""
    for key, value in (("llama.attention.head_count", (0, "UINT32")),
                       ("llama.attention.layer_norm_rms_epsilon", (float("nan"), "FLOAT32"))):  # fmt: skip
        gguf = write_tiny_llama(tmp_path / "odd.gguf", extra_metadata={key: value})
        out = tmp_path / "results" / "gguf"
        with pytest.raises(SystemExit):
            run_script(gguf, out, ["*"])
        [line] = (tmp_path / "results" / "extract.log").read_text().splitlines()
        assert line.startswith(f"ERROR {gguf}: metadata key '{key}' is ") and line.count(str(gguf)) == 1, line
        assert not (out / "extract.json").exists() and not (out / "metadata.json").exists()
    assert "Traceback" not in capsys.readouterr().err


# -- the real default model ---------------------------------------------------------------


def test_default_model_extract(default_gguf, tmp_path):
    index = extract(default_gguf, tmp_path, PATTERNS)
    assert len(index["tensors"]) == 11  # token_embd, 9 of blk.0, output_norm; no output.weight (tied)
    emb = index["tensors"]["token_embd.weight"]
    assert emb["shape"] == [49152, 576] and emb["type"] == "Q8_0" and emb["dequantizer"] == "hand"
    assert index["tensors"]["blk.0.ffn_down.weight"]["shape"] == [576, 1536]
    assert index["gguf"]["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    doc = json.loads((tmp_path / "metadata.json").read_text(encoding="utf-8"))
    assert len(doc["metadata"]["tokenizer.ggml.tokens"]) == 49152
    assert len(doc["metadata"]["tokenizer.ggml.merges"]) == 48900


def test_parse_shape_reads_what_shape_text_writes():
    from bytesup.gguf.sizes import parse_shape, shape_text

    assert parse_shape(shape_text((49152, 576))) == (49152, 576)
    assert parse_shape("576") == (576,)
    assert parse_shape([3, 4]) == (3, 4)
    with pytest.raises(ValueError, match="is not like 49152x576"):
        parse_shape("a x b")

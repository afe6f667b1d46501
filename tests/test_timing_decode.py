"""Whole-model decode and prefill timing (bytesup.timing.decode) on tiny synthetic models: the
bytes a token reads, the ceiling and the fraction follow from the measurements as stated, and an
architecture the forward pass does not follow is a 'skipped' record, not a failed job."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from gguf import GGUFReader

from bytesup.model import llama_cpp_ref
from bytesup.model.synthetic import write_tiny_llama
from bytesup.timing.decode import PREFILL_COLUMNS, run_decode, write_decode_results

QUICK = {"repeats": 3, "warmup": 1, "decode_tokens": 4, "prefill_sizes": [1, 4, 16], "stream_bytes": 4 << 20}


def float32_bytes_per_token(path) -> int:
    """Every tensor read once as float32, but one row of the embedding (gguf-py's reader, not ours)."""
    reader = GGUFReader(path)
    total, tied = 0, True
    for t in reader.tensors:
        n = int(np.prod(t.shape))
        if t.name == "token_embd.weight":
            total += 4 * int(t.shape[0])  # one row: GGUF lists the row length first
        else:
            total += 4 * n
        tied &= t.name != "output.weight"
    if tied:
        total += 4 * sum(int(np.prod(t.shape)) for t in reader.tensors if t.name == "token_embd.weight")
    return total


@pytest.mark.parametrize("tied", [False, True])
def test_decode_reads_every_weight_once_and_the_ceiling_follows(tmp_path, tied):
    path = write_tiny_llama(tmp_path / "m.gguf", tied=tied, n_layers=3)
    result = run_decode(path, QUICK, threads=1)
    s = result["summary"]
    assert s["status"] == "measured" and s["weights"].startswith("resident")
    assert s["decode_bytes_per_token"] == s["decode_float32_bytes_per_token"] == float32_bytes_per_token(path)
    assert s["decode_tokens_per_s"] == pytest.approx(1 / s["decode_median_s"])
    assert len(s["stream_copy_before_after_gbps"]) == 2 and s["stream_copy_gbps"] == max(
        s["stream_copy_before_after_gbps"]
    )
    assert s["decode_ceiling_tokens_per_s"] == pytest.approx(s["stream_copy_gbps"] * 1e9 / s["decode_bytes_per_token"])
    assert s["decode_fraction_of_ceiling"] == pytest.approx(s["decode_tokens_per_s"] / s["decode_ceiling_tokens_per_s"])
    assert s["target"]["goal"] == 0.6 and s["target"]["met"] == (s["decode_fraction_of_ceiling"] >= 0.6)
    assert [r["n"] for r in result["prefill"]] == [1, 4, 16]
    for row in result["prefill"]:
        assert row["tokens_per_s"] == pytest.approx(row["n"] / row["median_s"])
        assert s["prefill_tokens_per_s"][str(row["n"])] == row["tokens_per_s"]
    usable, why = llama_cpp_ref.status(path)
    if usable:
        lc = s["llama_cpp"]
        assert lc["decode_bytes_per_token"] == s["decode_file_bytes_per_token"]
        assert lc["decode_fraction_of_ceiling"] == pytest.approx(
            lc["decode_tokens_per_s"] / lc["decode_ceiling_tokens_per_s"]
        )
    else:
        assert s["llama_cpp"] == {"skipped": why}  # not installed, or a file llama.cpp refuses (tiny vocabularies)
    assert 0 <= s["other_processes_cpu_fraction"] and isinstance(s["machine_shared"], bool)


def test_streaming_weights_count_the_files_bytes(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf")
    s = run_decode(path, QUICK, threads=1, resident_budget_bytes=0)["summary"]
    assert s["weights"].startswith("streamed")
    assert s["decode_bytes_per_token"] == s["decode_file_bytes_per_token"] < s["decode_float32_bytes_per_token"]
    assert s["target"]["applies"] is False and s["decode_tokens"] == 3


def test_another_architecture_is_a_skipped_record(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf")
    data = path.read_bytes().replace(b"llama", b"gemma", 1)  # general.architecture's value, same length
    other = tmp_path / "g.gguf"
    other.write_bytes(data)
    result = run_decode(other, QUICK, threads=1)
    assert result["summary"]["status"] == "skipped"
    assert "gemma" in result["summary"]["skipped"] and "\n" not in result["summary"]["skipped"]
    write_decode_results(result, tmp_path / "d.json", tmp_path / "p.csv")
    assert json.loads((tmp_path / "d.json").read_text())["status"] == "skipped"
    assert next(csv.reader((tmp_path / "p.csv").open())) == PREFILL_COLUMNS


def test_a_tensor_nothing_can_dequantize_is_a_skipped_record(tmp_path):
    import struct

    path = write_tiny_llama(tmp_path / "m.gguf", types={"blk.1.ffn_up.weight": "F16"})
    data = bytearray(path.read_bytes())
    name = b"blk.1.ffn_up.weight"
    at = data.index(name) + len(name)  # then: n_dims u32, 2 dims u64, type u32
    struct.pack_into("<I", data, at + 4 + 16, 25)  # F16 -> I16: same size, nothing dequantizes it
    path.write_bytes(bytes(data))
    s = run_decode(path, QUICK, threads=1)["summary"]
    assert s["status"] == "skipped" and "blk.1.ffn_up.weight" in s["skipped"] and "I16" in s["skipped"]

"""The `bytesup` console script, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bytesup.model.synthetic import default_tokens, raw_gguf, write_tiny_llama

SCRIPT = Path(sys.executable).with_name("bytesup")


def bytesup(*args: str) -> subprocess.CompletedProcess:
    command = [str(SCRIPT)] if SCRIPT.exists() else [shutil.which("bytesup") or "bytesup"]
    return subprocess.run(command + [str(a) for a in args], capture_output=True, text=True, timeout=60)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("bytesup: error: ")
    return lines[0]


def test_inspect_json(tiny_gguf):
    result = bytesup("inspect", tiny_gguf, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    size = tiny_gguf.stat().st_size
    h = doc["header"]
    assert (h["magic"], h["version"], h["tensor_count"], h["metadata_count"], h["alignment"]) == ("GGUF", 3, 21, 18, 32)
    assert h["file_size"] == size and h["data_offset"] % 32 == 0
    meta = doc["metadata"]
    assert meta["llama.embedding_length"] == {"type": "UINT32", "value": 32}
    n = len(default_tokens())
    assert meta["tokenizer.ggml.tokens"] == {"type": "ARRAY[STRING]",
                                             "value": {"length": n, "head": default_tokens()[:8]}}  # fmt: skip
    assert len(doc["tensors"]) == 21
    down = next(t for t in doc["tensors"] if t["name"] == "blk.0.ffn_down.weight")
    assert (down["type"], down["shape"], down["shape_gguf"], down["bytes"]) == ("Q4_1", [32, 64], [64, 32], 1280)
    assert doc["by_type"]["Q4_1"] == {"tensors": 8, "parameters": 2 * (1024 + 1024 + 2048 + 2048), "bytes": 7680,
                                      "bits_per_weight": 5.0}  # fmt: skip
    assert doc["by_type"]["Q8_0"]["bits_per_weight"] == 8.5
    assert doc["parameters"] == sum(t["elements"] for t in doc["tensors"])
    acc = doc["byte_accounting"]
    assert acc["header"] + acc["metadata"] + acc["tensor_infos"] + acc["padding"] + acc["tensor_data"] == size


def test_inspect_text(tiny_gguf):
    result = bytesup("inspect", tiny_gguf)
    assert result.returncode == 0 and result.stderr == ""
    out = result.stdout
    assert "magic GGUF  version 3  tensors 21  metadata keys 18  alignment 32" in out
    assert "tokenizer.ggml.tokens" in out and f"({len(default_tokens())} items)" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("blk.0.ffn_down.weight"))
    assert line.split() == ["blk.0.ffn_down.weight", "Q4_1", "32x64", line.split()[3], "1,280"]
    assert "byte accounting:" in out and f"= file size   {tiny_gguf.stat().st_size:,}" in out.replace("  ", "  ")
    no_tensors = bytesup("inspect", tiny_gguf, "--no-tensors").stdout
    assert "blk.0.ffn_down.weight" not in no_tensors and "by type:" in no_tensors
    assert "tensors" not in json.loads(bytesup("inspect", tiny_gguf, "--json", "--no-tensors").stdout)


def test_hostile_strings_print_on_one_line_each(tmp_path):
    tokens = default_tokens() + ["<script>alert('x')</script>", "new\nline", "\x1b[2J\x1b[31mred", "tab\there",
                                 "\u2028sep", "\x00nul", ""]  # fmt: skip
    extra = {"weird.key\nwith newline": "value\r\nx", "general.description": "\x07"}
    path = write_tiny_llama(tmp_path / "odd.gguf", tokens=tokens, n_layers=1, extra_metadata=extra)
    result = bytesup("inspect", path)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x00" not in result.stdout and "\x07" not in result.stdout
    assert "\u2028" not in result.stdout and "\r" not in result.stdout
    assert "weird.key\\nwith newline" in result.stdout and "'value\\r\\nx'" in result.stdout
    doc = json.loads(bytesup("inspect", path, "--json").stdout)
    assert doc["metadata"]["weird.key\nwith newline"]["value"] == "value\r\nx"


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "nope.gguf: no such file"),
        (b"", "file is empty; a GGUF header needs 24 bytes at byte 0"),
        (b"PK\x03\x04" + bytes(100), "not a GGUF file: magic is b'PK\\x03\\x04', expected b'GGUF' at byte 0"),
        (raw_gguf(version=7), "version: unsupported GGUF version 7 (this reader reads versions 2 and 3) at byte 4"),
        (
            raw_gguf([("k", "STRING", "v")]).replace(b"\x01\x00\x00\x00\x00\x00\x00\x00v", b"\xff" * 8 + b"v"),
            "metadata 'k': string length 18446744073709551615 exceeds the 1 bytes left in the file at byte 37",
        ),
    ],
)
def test_errors_are_one_line_exit_2(tmp_path, content, expected):
    path = tmp_path / "nope.gguf"
    if content is not None:
        path.write_bytes(content)
    line = one_line_error(bytesup("inspect", path))
    assert line == f"bytesup: error: {path}: {expected}".replace(f"{path}: nope.gguf:", f"{path}:")


def test_truncated_and_directory(tiny_gguf, tmp_path):
    data = tiny_gguf.read_bytes()
    for cut in (30, 500):  # inside the header or the metadata: nothing to show
        (tmp_path / "cut.gguf").write_bytes(data[:cut])
        line = one_line_error(bytesup("inspect", tmp_path / "cut.gguf"))
        assert "cut.gguf: " in line and " at byte " in line
    assert one_line_error(bytesup("inspect", tmp_path)) == f"bytesup: error: {tmp_path}: not a regular file at byte 0"


def test_a_partial_download_shows_its_header_and_what_is_missing(tiny_gguf, tmp_path):
    data = tiny_gguf.read_bytes()
    whole = json.loads(bytesup("inspect", tiny_gguf, "--json").stdout)
    for cut in (len(data) // 2, len(data) - 1):
        (tmp_path / "cut.gguf").write_bytes(data[:cut])
        result = bytesup("inspect", tmp_path / "cut.gguf")
        assert result.returncode == 0 and result.stderr == "", result.stderr
        line = next(ln for ln in result.stdout.splitlines() if ln.startswith("partial file: "))
        assert f"partial file: {len(data) - cut:,} bytes of tensor data are missing" in line
        assert f"the whole file would be {len(data):,} bytes" in line
        doc = json.loads(bytesup("inspect", tmp_path / "cut.gguf", "--json").stdout)
        assert doc["metadata"] == whole["metadata"] and doc["tensor_data_missing"]["bytes"] == len(data) - cut
        assert [t["complete"] for t in doc["tensors"]].count(False) == len(doc["tensor_data_missing"]["tensors"]) > 0
        assert "(cut off)" in result.stdout


def test_a_split_model_inspects_as_one_and_a_missing_part_is_named(tiny_gguf, tmp_path):
    from bytesup.model.synthetic import write_split

    parts = write_split(tiny_gguf, tmp_path / "m.gguf", 3)
    doc = json.loads(bytesup("inspect", parts[0], "--json").stdout)
    whole = json.loads(bytesup("inspect", tiny_gguf, "--json").stdout)
    assert doc["parts"] == [str(p) for p in parts] and doc["parameters"] == whole["parameters"]
    assert [t["name"] for t in doc["tensors"]] == [t["name"] for t in whole["tensors"]]
    assert {t["part"] for t in doc["tensors"]} == {1, 2, 3}
    assert "split model: 3 parts, " in bytesup("inspect", parts[0]).stdout
    parts[1].unlink()
    assert one_line_error(bytesup("inspect", parts[0])) == (
        f"bytesup: error: {parts[1]}: part 2 of 3 of m-00001-of-00003.gguf is missing; put it beside the first"
        " part (or fetch the model again)"
    )


def test_a_symlink_loop_and_a_dangling_link_say_what_they_are(tmp_path):
    (tmp_path / "a.gguf").symlink_to(tmp_path / "b.gguf")
    (tmp_path / "b.gguf").symlink_to(tmp_path / "a.gguf")
    assert one_line_error(bytesup("inspect", tmp_path / "a.gguf")) == (
        f"bytesup: error: {tmp_path / 'a.gguf'}: a symlink loop (a link that leads back to itself)"
    )
    (tmp_path / "c.gguf").symlink_to(tmp_path / "gone.gguf")
    assert one_line_error(bytesup("inspect", tmp_path / "c.gguf")) == (
        f"bytesup: error: {tmp_path / 'c.gguf'}: a link to {tmp_path / 'gone.gguf'}, which is gone"
    )


def test_usage():
    assert bytesup().returncode == 2  # a subcommand is required
    assert "inspect" in bytesup("--help").stdout
    assert bytesup("--version").stdout.startswith("bytesup ")


def test_default_model_inspect(default_gguf):
    result = bytesup("inspect", default_gguf, "--json")
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    assert doc["header"] == {"magic": "GGUF", "version": 3, "tensor_count": 272, "metadata_count": 33,
                             "alignment": 32, "data_offset": 1785664, "file_size": 98362432}  # fmt: skip
    assert doc["metadata"]["tokenizer.ggml.tokens"]["value"]["length"] == 49152
    assert doc["parameters"] == 134_515_008
    assert doc["by_type"]["Q4_1"] == {"tensors": 210, "parameters": 106_168_320, "bytes": 66_355_200,
                                      "bits_per_weight": 5.0}  # fmt: skip
    assert doc["byte_accounting"]["tensor_data"] == 96_576_768

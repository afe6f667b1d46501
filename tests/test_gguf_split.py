"""Split models (llama.cpp's gguf-split) and partial files, read as one model or as far as they go.

Split files are written with gguf-py's writer (bytesup.model.synthetic.write_split, as gguf-split
lays them out: the metadata in the first part, split.no / split.count / split.tensors.count in each).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from bytesup.errors import quote
from bytesup.gguf.extract import extract
from bytesup.gguf.file import GGUFFile, GGUFFormatError, NonFiniteWeightsError
from bytesup.model.synthetic import raw_gguf, write_split, write_tiny_llama
from bytesup.run.files import part_paths

PARTS = ("header", "metadata", "tensor_infos", "padding", "tensor_data")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("split") / "tiny.gguf", seed=3)


@pytest.fixture
def split3(model, tmp_path) -> list[Path]:
    return write_split(model, tmp_path / "m.gguf", 3)


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and len(text) < 600, text
    return text


def test_a_split_model_reads_as_the_unsplit_one(model, split3):
    assert [p.name for p in split3] == [f"m-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
    with GGUFFile(model) as whole, GGUFFile(split3[0]) as split:
        assert split.parts == split3 and split.split.count == 3
        assert split.tensor_names == whole.tensor_names
        assert {t.part for t in split.tensors} == {0, 1, 2}
        for name in whole.tensor_names:
            assert np.array_equal(split.load(name), whole.load(name)), name
            assert split.file_of(name) == split3[split.tensor(name).part]
        assert {k: v for k, v in split.metadata.items() if not k.startswith("split.")} == whole.metadata
        assert split.file_size == sum(p.stat().st_size for p in split3)
        acc = split.byte_accounting()
        assert sum(acc[k] for k in PARTS) == acc["file_size"] == split.file_size
        assert (
            acc["header"] == 3 * 24
            and acc["parts"] == 3
            and acc["tensor_data"] == whole.byte_accounting()["tensor_data"]
        )


def test_a_first_part_without_tensors_and_a_first_part_renamed(model, tmp_path):
    parts = write_split(model, tmp_path / "e.gguf", 3, first_empty=True)
    with GGUFFile(parts[0], parts=False) as first:
        assert first.tensors == []  # gguf-split --no-tensor-first-split
    # the fetch's names: resources/models/<model>.gguf for the first, <model>-0000k-of-00003.gguf beside it
    for path, target in zip(parts, part_paths(tmp_path / "cache" / "local.gguf", 3), strict=True):
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(path, target)
    with GGUFFile(model) as whole, GGUFFile(tmp_path / "cache" / "local.gguf") as split:
        assert split.tensor_names == whole.tensor_names and len(split.parts) == 3
        assert np.array_equal(split.load("output.weight"), whole.load("output.weight"))


def test_a_link_to_the_first_part_finds_the_parts_beside_its_target(split3, tmp_path):
    link = tmp_path / "elsewhere" / "model.gguf"
    link.parent.mkdir()
    link.symlink_to(split3[0])
    with GGUFFile(link) as f:
        assert f.parts == [link, *split3[1:]]


def test_a_missing_part_is_one_line_naming_it(split3):
    split3[2].unlink()
    with pytest.raises(GGUFFormatError) as err:
        GGUFFile(split3[0])
    assert one_line(err.value) == (
        f"{split3[2]}: part 3 of 3 of m-00001-of-00003.gguf is missing; put it beside the first part (or fetch"
        " the model again)"
    )


def test_opening_a_later_part_names_the_first(split3):
    with pytest.raises(GGUFFormatError, match=r"is part 2 of 3 of a split model: open m-00001-of-00003\.gguf"):
        GGUFFile(split3[1])
    with GGUFFile(split3[1], parts=False) as alone:
        assert alone.split.no == 1 and len(alone.parts) == 1 and alone.tensors


def test_parts_of_two_models_do_not_mix(model, split3, tmp_path):
    other = write_split(write_tiny_llama(tmp_path / "other.gguf", n_layers=3), tmp_path / "o.gguf", 3)
    shutil.copyfile(other[1], split3[1])  # part 2 of 3 of a model with more tensors
    with pytest.raises(GGUFFormatError) as err:
        GGUFFile(split3[0])
    assert "the parts do not belong together" in one_line(err.value) and str(split3[1]) in str(err.value)
    four = write_split(model, tmp_path / "f.gguf", 4)
    shutil.copyfile(four[2], split3[2])  # part 3 of 4 named as part 3 of 3
    shutil.copyfile(write_split(model, tmp_path / "g.gguf", 3)[1], split3[1])
    with pytest.raises(GGUFFormatError, match=r"says it is part 3 of 4 .* named as part 3 of 3"):
        GGUFFile(split3[0])


def test_a_part_without_split_keys_and_split_keys_out_of_range(model, split3, tmp_path):
    shutil.copyfile(model, split3[1])
    with pytest.raises(GGUFFormatError, match="is not a part of a split model"):
        GGUFFile(split3[0])
    data = raw_gguf([("split.no", "UINT16", 3), ("split.count", "UINT16", 3), ("split.tensors.count", "INT32", 0)])
    (tmp_path / "bad.gguf").write_bytes(data)
    with pytest.raises(GGUFFormatError, match=r"'split.no': split number 3 is not a part of 3 \(0 to 2\) at byte 24"):
        GGUFFile(tmp_path / "bad.gguf")
    (tmp_path / "bad.gguf").write_bytes(raw_gguf([("split.count", "STRING", "3")]))
    with pytest.raises(GGUFFormatError, match="'split.count': must be an integer, found STRING"):
        GGUFFile(tmp_path / "bad.gguf")
    (tmp_path / "bad.gguf").write_bytes(raw_gguf([("split.count", "UINT16", 2)]))
    with pytest.raises(GGUFFormatError, match="needs split.no, split.tensors.count too"):
        GGUFFile(tmp_path / "bad.gguf")


def test_a_tensor_in_two_parts_and_a_wrong_tensor_count(tmp_path):
    one = [("split.no", "UINT16", 0), ("split.count", "UINT16", 2), ("split.tensors.count", "INT32", 2)]
    two = [("split.no", "UINT16", 1), ("split.count", "UINT16", 2), ("split.tensors.count", "INT32", 2)]
    tensor = [("w", (32,), 0, 0)]
    (tmp_path / "d-00001-of-00002.gguf").write_bytes(raw_gguf(one, tensor, bytes(128)))
    (tmp_path / "d-00002-of-00002.gguf").write_bytes(raw_gguf(two, tensor, bytes(128)))
    with pytest.raises(GGUFFormatError, match=r"duplicate tensor name 'w' \(also in an earlier part\)"):
        GGUFFile(tmp_path / "d-00001-of-00002.gguf")
    (tmp_path / "d-00002-of-00002.gguf").write_bytes(raw_gguf(two, [], b""))
    with pytest.raises(GGUFFormatError, match="the 2 parts hold 1 tensors, split.tensors.count says 2"):
        GGUFFile(tmp_path / "d-00001-of-00002.gguf")


def test_extract_of_a_split_model_writes_the_same_tensors(model, split3, tmp_path):
    a = extract(model, tmp_path / "a", None)
    b = extract(split3[0], tmp_path / "b", None)
    assert list(a["tensors"]) == list(b["tensors"])
    for name, entry in a["tensors"].items():
        other = b["tensors"][name]
        assert (entry["sha256"], entry["shape"], entry["type"]) == (other["sha256"], other["shape"], other["type"])
        assert other["part"] in (1, 2, 3) and "part" not in entry
    assert [p["file"] for p in b["gguf"]["parts"]] == [p.name for p in split3]
    assert b["gguf"]["file_size"] == sum(p["size"] for p in b["gguf"]["parts"])
    csv_header = (tmp_path / "b" / "tensors.csv").read_text().splitlines()[0]
    assert csv_header == "name,type,shape,offset,bytes,elements,part"


def test_llama_cpp_reads_the_fetched_split_model_as_the_unsplit_one(tmp_path):
    """llama.cpp finds a split model's parts from its first part's name: the fetch links that name."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from bytesup.model import llama_cpp_ref
    from bytesup.run.fetch import fetch_model

    whole = write_tiny_llama(tmp_path / "w.gguf", types={"blk.1.attn_norm.weight": "F32"})  # no BF16 on its CPU
    parts = write_split(whole, tmp_path / "mine" / "model.gguf", 3)
    dest = tmp_path / "models" / "tiny.gguf"
    fetch_model("tiny", {"source": "path", "path": str(parts[0]), "sha256": None, "link": True}, dest)
    assert llama_cpp_ref.model_path(dest) == str(dest.with_name("tiny-00001-of-00003.gguf"))
    assert llama_cpp_ref.model_path(whole) == str(whole)
    assert llama_cpp_ref.status(dest)[0], llama_cpp_ref.status(dest)
    scores = []
    for path in (llama_cpp_ref.model_path(dest), str(whole)):
        llm = llama_cpp.Llama(model_path=path, n_ctx=32, n_threads=1, logits_all=True, verbose=False)
        llm.eval([1, 5, 9])
        scores.append(np.array(llm.scores[2]))
        llm.close()
    assert np.array_equal(scores[0], scores[1])


# -- partial files ----------------------------------------------------------------------------------


def test_a_partial_file_reads_as_far_as_it_goes(model, tmp_path):
    data = model.read_bytes()
    with GGUFFile(model) as whole:
        cut_at = whole.tensor("blk.1.attn_norm.weight").offset + 8
        last_end = max(t.offset + t.n_bytes for t in whole.tensors)
        whole_metadata = whole.metadata
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:cut_at])
    with pytest.raises(GGUFFormatError) as err:
        GGUFFile(cut)
    assert f"the tensor data lack {last_end - cut_at:,} bytes: an unfinished download?" in one_line(err.value)
    with GGUFFile(cut, partial=True) as f:
        assert f.metadata == whole_metadata and f.missing_bytes == last_end - cut_at
        assert f.incomplete[0] == "blk.1.attn_norm.weight" and f.incomplete == f.tensor_names[-len(f.incomplete) :]
        assert f.load("blk.0.attn_q.weight").shape == (32, 32)  # the tensors it holds load as ever
        with pytest.raises(GGUFFormatError, match=r"tensor 'blk.1.attn_norm.weight': data \[\d+, \d+\) are not"):
            f.raw("blk.1.attn_norm.weight")
        acc = f.byte_accounting()
        assert sum(acc[k] for k in PARTS) == acc["file_size"] == cut_at
        assert acc["tensor_data_missing"] == f.missing_bytes


def test_a_partial_file_whose_tensors_are_bigger_than_what_it_holds(tmp_path):
    """The first 95 MB of a 4.7 GB file: every tensor is bigger than the file, and that is no error."""
    big = [("w", (4096, 4096), 0, 0), ("v", (4096,), 0, 4096 * 4096 * 4)]  # 64 MiB of F32, then 16 KiB
    path = tmp_path / "big.gguf"
    path.write_bytes(raw_gguf([("general.architecture", "STRING", "llama")], big, bytes(1000)))
    with GGUFFile(path, partial=True) as f:
        assert f.incomplete == ["w", "v"] and f.missing_bytes == 4096 * 4096 * 4 + 4096 * 4 - 1000
    with pytest.raises(GGUFFormatError, match="more than the whole file"):
        GGUFFile(path)


# -- numbers and long names -------------------------------------------------------------------------


def test_nan_and_infinite_weights_are_one_line_naming_the_tensor(tmp_path):
    values = np.ones(64, np.float32)
    values[5], values[40] = np.nan, np.inf
    path = tmp_path / "nan.gguf"
    path.write_bytes(raw_gguf([], [("ok", (32,), 0, 0), ("blk.0.ffn_up.weight", (64,), 0, 128)],
                              bytes(np.ones(32, np.float32)) + values.tobytes()))  # fmt: skip
    with GGUFFile(path) as f:
        assert f.load("ok").sum() == 32
        first_bad = f.tensor("blk.0.ffn_up.weight").offset + 5 * 4  # F32: a block is one weight
        with pytest.raises(NonFiniteWeightsError) as err:
            f.load("blk.0.ffn_up.weight")
    assert one_line(err.value) == (
        f"{path}: tensor 'blk.0.ffn_up.weight': holds 1 NaN and 1 infinite weights among its elements (the first"
        f" at element 5): the file is damaged or was converted wrong; download or convert it again at byte"
        f" {err.value.offset}"
    )
    assert err.value.tensor == "blk.0.ffn_up.weight" and err.value.offset == first_bad
    with pytest.raises(NonFiniteWeightsError, match="'blk.0.ffn_up.weight': holds 1 NaN and 1 infinite"):
        extract(path, tmp_path / "out", ["*"])


def test_a_misread_4_7_mb_key_makes_a_short_line(tmp_path):
    """A length misread as 4.7 MB reads that much text as the key: the line quotes 200 characters of it."""
    key = "tokenizer.ggml." + "x" * 4_700_000
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", 99)
    path = tmp_path / "key.gguf"
    path.write_bytes(data + bytes(8))
    with pytest.raises(GGUFFormatError) as err:
        GGUFFile(path)
    line = one_line(err.value)
    assert f"metadata {quote(key)}: unknown value type 99" in line and "(4,700,015 characters)" in line


def test_quote_cuts_long_values_and_keeps_short_ones():
    assert quote("blk.0.attn_q.weight") == "'blk.0.attn_q.weight'"
    assert quote("a\nb\x1b") == "'a\\nb\\x1b'"
    assert quote("y" * 1000) == repr("y" * 200) + "... (1,000 characters)"
    long = quote(list(range(10**6)))
    assert long.startswith("[0, 1, 2, ") and long.endswith(", ...] (1,000,000 items)") and len(long) < 260
    assert quote([1, 2]) == "[1, 2]" and quote(b"\x00" * 300).endswith("... (300 bytes)")
    assert len(quote({"k" * 500: "v" * 500})) < 500


# -- the whole workflow on a split model --------------------------------------------------------------


def differing(a, b, prefix=""):
    """Keys (dotted) whose values differ between two metrics documents, floats to 1e-9 relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{prefix}{k}" for k in a.keys() ^ b.keys()]
        for k in a.keys() & b.keys():
            out += differing(a[k], b[k], f"{prefix}{k}.")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [k for x, y in zip(a, b, strict=True) for k in differing(x, y, prefix)]
    if isinstance(a, float) and isinstance(b, float):
        return [] if a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b)) else [prefix.rstrip(".")]
    return [] if a == b else [prefix.rstrip(".")]


# Lesson 1 reads one file's bytes (of a split model, its first part: GGUFFile(parts=False)); every other
# lesson reads the model, and must give the unsplit model's numbers.
FILE_LESSON = "01_gguf_on_disk"
# Where the model's bytes lie: the sha256 of 3 files joined, a row's byte offset in the file that holds it,
# the bytes of the files (three headers) and lesson 6's ratios to them.
LAYOUT_KEYS = ("model_sha256", "row_offset", "model_file_bytes", "kv_cache_equals_weights_tokens",
               "kv_cache_never_reaches_weights_share", "kv_cache_at_context_share_of_weights")  # fmt: skip
# Lessons that quote this machine's timings: their measured numbers differ from one run to the next.
MEASURED = re.compile(r"timing|sweep|decode|prefill|roofline|ceiling|_ms|_gbps|gflops|per_s|speedup|noisy|cpu_bound"
                      r"|cpu_compute|bandwidth|crossover|explained_share|memory_share|q8_0_product")  # fmt: skip
# A note that reports the machine's load while a timing ran (machine_shared): one run of the two may have had
# company (CI runs this beside other tests) and the other not.
LOAD_NOTE = re.compile(r"machine_shared")


def without_load_notes(metrics: dict) -> dict:
    """The metrics with the notes that describe the machine's load at measurement time left out."""
    notes = metrics.get("notes")
    if not isinstance(notes, list):
        return metrics
    return {**metrics, "notes": [n for n in notes if not (isinstance(n, str) and LOAD_NOTE.search(n))]}


@pytest.mark.slow
def test_the_workflow_on_a_model_split_in_3_gives_the_unsplit_models_numbers(finished_tiny, tmp_path):
    """The whole DAG on the tiny model split in 3 (a local path to its first part): the same tensors
    extracted, and every lesson's metrics the same as the unsplit run's, but for the file's own layout."""
    from conftest import tiny_project
    from workflow_helpers import snakemake

    parts = write_split(finished_tiny / "tiny.gguf", tmp_path / "split" / "tiny.gguf", 3)
    joined = b"".join(p.read_bytes() for p in parts)
    project = tiny_project(tmp_path / "p", parts[0], entry={"sha256": hashlib.sha256(joined).hexdigest()})
    snakemake(project)
    a = json.loads((finished_tiny / "results/tiny/gguf/extract.json").read_text())["tensors"]
    b = json.loads((project / "results/tiny/gguf/extract.json").read_text())["tensors"]
    assert {k: v["sha256"] for k, v in a.items()} == {k: v["sha256"] for k, v in b.items()}
    lessons = sorted(p.parent.name for p in (finished_tiny / "results/tiny/lessons").glob("*/metrics.json"))
    assert lessons and lessons == sorted(
        p.parent.name for p in (project / "results/tiny/lessons").glob("*/metrics.json")
    )
    wrong = {}
    for lesson in lessons:
        mine = json.loads((project / f"results/tiny/lessons/{lesson}/metrics.json").read_text())
        theirs = json.loads((finished_tiny / f"results/tiny/lessons/{lesson}/metrics.json").read_text())
        if lesson == FILE_LESSON:
            with GGUFFile(parts[0], parts=False) as first:
                assert (mine["file_size"], mine["tensor_count"]) == (first.file_size, len(first.tensors))
            continue
        mine, theirs = without_load_notes(mine), without_load_notes(theirs)
        wrong[lesson] = [k for k in differing(mine, theirs) if k not in LAYOUT_KEYS and not MEASURED.search(k)]
    assert not any(wrong.values()), json.dumps({k: v for k, v in wrong.items() if v})

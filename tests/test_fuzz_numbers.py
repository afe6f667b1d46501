"""A fuzz corpus of hostile numbers and files: each case ends in one line naming the key, tensor or part
(or reads as far as the file goes), never a traceback, an assert or a NaN that travels on.

Classes: NaN and infinite weights in every type a lesson reads (extract, the forward pass in both weight
modes, lesson 1's block by hand); hyperparameters no model has (NaN, infinite, zero and negative eps and
rope base, zero sizes); truncated, partial and split files (inspect, extract, the reader). Each class runs
in a child process under a generous wall-clock cap, so a case that hangs fails the test instead of the
suite; the memory of each case is a tiny model's.
"""

from __future__ import annotations

import math
import multiprocessing
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup.errors import BytesupError
from bytesup.gguf.extract import extract
from bytesup.gguf.file import GGUFFile
from bytesup.lessons import gguf_on_disk
from bytesup.model.arch import check_hyperparameters, spec_from_metadata
from bytesup.model.forward import Model
from bytesup.model.synthetic import write_split, write_tiny_llama

CAP_SECONDS = 300  # for a whole class of cases, in a child process; a case takes well under a second

# tensor -> ggml type, as the tiny model stores it (bytesup.model.synthetic.DEFAULT_TYPES)
WEIGHTS = {
    "token_embd.weight": "Q8_0",
    "output.weight": "F16",
    "output_norm.weight": "F32",
    "blk.0.attn_q.weight": "Q4_1",
    "blk.0.attn_k.weight": "Q4_0",
    "blk.1.attn_norm.weight": "BF16",
    "blk.1.attn_k.weight": "Q5_0",
    "blk.1.attn_v.weight": "Q5_1",
}
BAD = {"NaN": math.nan, "inf": math.inf, "-inf": -math.inf}


def run_capped(fn, *args):
    """fn(*args) in a forked child, its result back; a child still running after CAP_SECONDS fails."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply_async(fn, args).get(timeout=CAP_SECONDS)


def outcome(fn, *args, **kwargs) -> str:
    """'ok' when fn(*args, **kwargs) returns, the one line of an expected failure, or 'BUG ...' for anything else."""
    try:
        fn(*args, **kwargs)
    except BytesupError as err:
        text = str(err)
        return text if "\n" not in text and len(text) < 800 else f"BUG long or multi-line: {text[:300]!r}"
    except Exception as err:
        return f"BUG {type(err).__name__}: {str(err)[:300]}"
    return "ok"


def poison(path: Path, tensor: str, type_name: str, value: float) -> None:
    """Write `value` into the first block of `tensor`: its float16 scale for a quantized type (bytes 0-1),
    or its first element for F32 / F16 / BF16."""
    with GGUFFile(path) as f:
        at = f.tensor(tensor).offset
    if type_name == "F32":
        raw = struct.pack("<f", value)
    elif type_name == "BF16":
        raw = struct.pack("<f", value)[2:]  # bfloat16: the high half of a float32
    else:
        raw = np.float16(value).tobytes()  # F16, and the d of every quant type here
    block, _ = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    assert block >= 1
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(raw)


def weights_corpus(base: str, work: str) -> list[tuple[str, str, str, str]]:
    """(case, how it was read, tensor, outcome) for NaN/inf in each tensor, read four ways."""
    rows = []
    for tensor, type_name in WEIGHTS.items():
        for label, value in BAD.items():
            path = Path(work) / f"{tensor}-{label}.gguf"
            shutil.copyfile(base, path)
            poison(path, tensor, type_name, value)
            out = Path(work) / f"out-{tensor}-{label}"
            rows.append((f"{tensor} {label}", "extract", tensor, outcome(extract, path, out, [tensor])))
            for mode in ("resident", "streaming"):

                def forward(mode=mode, path=path):
                    with Model.from_gguf(path, mode=mode) as model:
                        model.forward([0, 5, 9])  # token 0: its row of token_embd holds the poison

                rows.append((f"{tensor} {label}", mode, tensor, outcome(forward)))
            rows.append((f"{tensor} {label}", "load", tensor, outcome(lambda p, t: GGUFFile(p).load(t), path, tensor)))
            # lesson 1 decodes one block of each type by hand: the poisoned one where it picks that block
            rows.append(
                (f"{tensor} {label}", "lesson 1", tensor, outcome(lambda p: gguf_on_disk.compute(GGUFFile(p)), path))
            )
    return rows


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("fuzz-numbers") / "base.gguf", seed=5)


def test_nan_and_infinite_weights_in_every_type(base, tmp_path):
    rows = run_capped(weights_corpus, str(base), str(tmp_path))
    assert len(rows) == len(WEIGHTS) * len(BAD) * 5
    lesson_1 = {(case, tensor): line for case, how, tensor, line in rows if how == "lesson 1"}
    for (case, tensor), line in lesson_1.items():
        assert line == "ok" or f"tensor '{tensor}': holds " in line, (case, line)  # never an assert
    assert "tensor 'output.weight': holds 1 NaN weights" in lesson_1[("output.weight NaN", "output.weight")]
    for case, how, tensor, line in rows:
        if how == "lesson 1":
            continue
        # the forward pass refuses the first poisoned tensor it dequantizes: always this one (the only one)
        assert line.startswith(f"{tmp_path}/") and f"tensor '{tensor}': holds " in line, (case, how, line)
        assert "weights" in line and "download or convert it again" in line, (case, how, line)


HYPERPARAMETERS = [
    ("llama.attention.layer_norm_rms_epsilon", "FLOAT32", math.nan),
    ("llama.attention.layer_norm_rms_epsilon", "FLOAT32", math.inf),
    ("llama.attention.layer_norm_rms_epsilon", "FLOAT32", -1e-5),
    ("llama.attention.layer_norm_rms_epsilon", "FLOAT32", 0.0),
    ("llama.rope.freq_base", "FLOAT32", math.nan),
    ("llama.rope.freq_base", "FLOAT32", -10000.0),
    ("llama.rope.freq_base", "FLOAT64", math.inf),
    ("llama.attention.head_count", "UINT32", 0),
    ("llama.attention.head_count_kv", "UINT32", 0),
    ("llama.attention.key_length", "UINT32", 0),
    ("llama.embedding_length", "UINT32", 0),
    ("llama.feed_forward_length", "INT32", -64),
    ("llama.block_count", "UINT32", 0),
    ("llama.context_length", "UINT32", 0),
    ("llama.attention.head_count", "FLOAT32", 4.5),
    ("llama.attention.head_count", "STRING", "4"),
    ("llama.attention.head_count", "BOOL", True),
]


def hyperparameter_corpus(work: str) -> list[tuple[str, str, str]]:
    """(key, how it was read, outcome): the extract stage's check, the arch table, and the forward pass."""
    rows = []
    for i, (key, type_name, value) in enumerate(HYPERPARAMETERS):
        path = write_tiny_llama(Path(work) / f"h{i}.gguf", extra_metadata={key: (value, type_name)})
        metadata = GGUFFile(path).metadata
        rows.append((key, "check", outcome(check_hyperparameters, metadata, path=path)))
        rows.append((key, "spec", outcome(spec_from_metadata, metadata, path=path)))

        def forward(path=path):
            with Model.from_gguf(path) as model:
                model.forward([1, 2])

        rows.append((key, "forward", outcome(forward)))
    return rows


def test_hostile_hyperparameters_are_one_line_naming_the_key(tmp_path):
    rows = run_capped(hyperparameter_corpus, str(tmp_path))
    assert len(rows) == 3 * len(HYPERPARAMETERS)
    for key, how, line in rows:
        assert line.startswith(f"{tmp_path}/h") and f"metadata key '{key}' is " in line, (key, how, line)
        assert line.count(str(tmp_path)) == 1, line  # the path once, not twice


def files_corpus(base: str, work: str) -> list[tuple[str, str]]:
    """(case, outcome) for files cut short, split, and with parts missing or foreign."""
    from bytesup.cli import inspect_document

    work = Path(work)
    data = Path(base).read_bytes()
    with GGUFFile(base) as f:
        structure = f.data_offset
    rows = []
    for cut in sorted({1, 23, 24, 100, structure // 2, structure - 1, structure, structure + 100, len(data) - 1}):
        path = work / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        rows.append((f"cut at {cut}: open", outcome(GGUFFile, path)))
        rows.append((f"cut at {cut}: extract", outcome(extract, path, work / f"x{cut}", None)))

        def partial(path=path):
            with GGUFFile(path, partial=True) as f:
                doc = inspect_document(f)
                assert doc["byte_accounting"]["file_size"] == f.file_size
                for t in f.tensors:
                    if t.name not in f.incomplete:
                        f.load(t.name)

        rows.append((f"cut at {cut}: partial", outcome(partial)))
    parts = write_split(base, work / "s.gguf", 3)
    rows.append(("split: open", outcome(GGUFFile, parts[0])))
    rows.append(("split: extract", outcome(extract, parts[0], work / "xs", None)))
    cut_part = work / "s-00003-of-00003.gguf"
    whole_part = cut_part.read_bytes()
    cut_part.write_bytes(whole_part[: len(whole_part) - 10])
    rows.append(("split, last part cut: open", outcome(GGUFFile, parts[0])))
    rows.append(("split, last part cut: partial", outcome(GGUFFile, parts[0], partial=True)))
    cut_part.unlink()
    rows.append(("split, last part missing: open", outcome(GGUFFile, parts[0])))
    shutil.copyfile(base, cut_part)
    rows.append(("split, last part foreign: open", outcome(GGUFFile, parts[0])))
    return rows


def test_truncated_partial_and_split_files(base, tmp_path):
    rows = dict(run_capped(files_corpus, str(base), str(tmp_path)))
    bugs = {case: line for case, line in rows.items() if line.startswith("BUG")}
    assert not bugs, bugs
    cuts = [case for case in rows if case.startswith("cut at")]
    for case in cuts:
        if case.endswith(": open") or case.endswith(": extract"):
            assert rows[case] != "ok", case  # every cut file is refused unless read as partial
    assert rows["split: open"] == rows["split: extract"] == "ok"
    assert "runs past the end of the file" in rows["split, last part cut: open"]
    assert rows["split, last part cut: partial"] == "ok"
    assert "part 3 of 3 of s-00001-of-00003.gguf is missing" in rows["split, last part missing: open"]
    assert "is not a part of a split model" in rows["split, last part foreign: open"]
    # a cut inside the tensor data reads as partial; one inside the header or metadata does not
    assert rows[f"cut at {len(base.read_bytes()) - 1}: partial"] == "ok"
    assert rows["cut at 100: partial"] != "ok" and rows["cut at 23: partial"] != "ok"

"""The tokenizer against llama.cpp itself: the same vocab-only GGUF through llama-cpp-python
(``Llama(path, vocab_only=True)``) and through bytesup, ids compared exactly, special tokens parsed
and not, on the few hundred strings of tokenizer_cases (digit runs, contractions, CJK, emoji and
ZWJ sequences, white-space runs, accents, special and user-defined tokens).

Vocabularies:
  SmolLM2's real one (the default model), with tokens added for every special-token rule;
  a "substring" vocabulary in which every word a pre-tokenizer can cut is one token, so the ids
      show each split exactly (a real vocabulary hides most: SmolLM2 never merges digits);
  Gemma 3's real SentencePiece vocabulary, and small hand-made SentencePiece ones.
and, last, llama.cpp's own tokenizer test (tests/test-tokenizer-0: models/ggml-vocab-*.gguf with
their .inp/.out), fetched from the llama-cpp-python sdist on PyPI that built the engine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from tokenizer_cases import ORDER_PIECES, SPM_PIECES, STRINGS
from tokenizer_vocabs import (
    ADDED_TOKENS,
    VocabFiles,
    metadata_of,
    spm_metadata,
    substring_vocabulary,
    with_tokens,
)

from bytesup.gguf.file import GGUFFile
from bytesup.model.pretokenizers import PRE_TOKENIZERS
from bytesup.model.tokenizer import Tokenizer
from bytesup.model.vocabulary import UnsupportedTokenizerError

llama_cpp = pytest.importorskip("llama_cpp")

ROOT = Path(__file__).resolve().parents[1]
# one name per distinct behaviour (patterns and flags); the quick run takes a few llama.cpp runs fast
QUICK = ("smollm", "llama-bpe", "qwen2", "gpt-2", "deepseek-coder", "kimi-k2")
DISTINCT = {}
for _name in [*QUICK, *PRE_TOKENIZERS]:
    _p = PRE_TOKENIZERS[_name]
    DISTINCT.setdefault((_p.kind, _p.ignore_merges, _p.add_bos, _p.byte_encode), _name)
PROBE = STRINGS[::8]  # enough to tell every pre-tokenizer from the others


def mismatches(path: Path, tok: Tokenizer, strings: list[str]) -> list[tuple]:
    """(parse_special, text, llama.cpp's ids, ours) wherever the two differ, and with BOS/EOS added."""
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    bad = []
    for parse in (False, True):
        for text in strings:
            theirs = llm.tokenize(text.encode("utf-8"), add_bos=False, special=parse)
            ours = tok.encode(text, add_special=False, parse_special=parse)
            if theirs != ours:
                bad.append((parse, text, theirs, ours))
    for text in (strings[0], ""):
        theirs = llm.tokenize(text.encode(), add_bos=True, special=False)
        if theirs != tok.encode(text, add_special=True, parse_special=False):
            bad.append(("add_special", text, theirs, tok.encode(text, add_special=True, parse_special=False)))
    del llm
    return bad


def compare(files: VocabFiles, pre: str | None, strings: list[str]) -> list[tuple]:
    meta, types = files.metadata_for(pre)
    return mismatches(files.path(pre), Tokenizer.from_metadata(meta, source=pre or "none", types=types), strings)


@pytest.fixture(scope="session")
def default_metadata(default_gguf):
    return metadata_of(default_gguf)


@pytest.fixture(scope="session")
def smollm_files(tmp_path_factory, default_metadata) -> VocabFiles:
    return VocabFiles(tmp_path_factory.mktemp("vocab"), "smollm2", *with_tokens(*default_metadata, ADDED_TOKENS))


@pytest.fixture(scope="session")
def substring_files(tmp_path_factory, default_metadata) -> VocabFiles:
    vocab = substring_vocabulary(STRINGS, *default_metadata)
    return VocabFiles(tmp_path_factory.mktemp("vocab"), "substrings", *with_tokens(*vocab, ADDED_TOKENS))


def test_the_default_models_vocabulary_matches_llama_cpp(smollm_files):
    assert compare(smollm_files, "smollm", STRINGS) == []


@pytest.mark.parametrize(
    "pre", [n if n in QUICK else pytest.param(n, marks=pytest.mark.slow) for n in DISTINCT.values()]
)
def test_splits_match_llama_cpp(substring_files, pre):
    assert compare(substring_files, pre, STRINGS) == []


def test_the_substring_vocabulary_shows_the_splits(substring_files):
    """It is what makes the test above strict: the same text gives other ids under other patterns."""
    ids = {}
    for pre in ("gpt-2", "llama-bpe", "qwen2"):
        meta, types = substring_files.metadata_for(pre)
        tok = Tokenizer.from_metadata(meta, types=types)
        ids[pre] = [tok.tokens[i] for i in tok.encode("x 12345", add_special=False)]
    assert ids == {"gpt-2": ["x", "Ġ12345"], "llama-bpe": ["x", "Ġ", "123", "45"], "qwen2": ["x", "Ġ", *"12345"]}


@pytest.mark.slow
@pytest.mark.parametrize("pre", [None, *PRE_TOKENIZERS])
def test_every_name_means_what_it_means_to_llama_cpp(substring_files, pre):
    """Each tokenizer.ggml.pre llama.cpp knows, and a file without the key, split as llama.cpp splits."""
    assert compare(substring_files, pre, PROBE) == []


def test_refused_names_are_refused_by_llama_cpp_too(substring_files):
    """'gpt2' is llama.cpp's spelling of nothing: it will not load such a file either."""
    with pytest.raises(ValueError):
        llama_cpp.Llama(str(substring_files.path("gpt2")), vocab_only=True, verbose=False)


# --- SentencePiece-style ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spm_files(tmp_path_factory, default_metadata):
    meta, types = default_metadata
    arch = {k: v for k, v in meta.items() if not k.startswith("tokenizer.") and not k.endswith(".vocab_size")}
    arch_types = {k: types[k] for k in arch}
    folder = tmp_path_factory.mktemp("spm")
    out = {}
    for name, pieces, extra in (
        ("spm", SPM_PIECES, {}),
        ("order", ORDER_PIECES, {"tokenizer.ggml.add_space_prefix": False}),
        ("phi3", [*SPM_PIECES, ("<|user|>", 0.0, 4), ("<|endoftext|>", 0.0, 3)], {"general.name": "Phi-3 mini"}),
    ):
        spm = {**arch, **spm_metadata(pieces, **extra)}
        spm_types = {**arch_types, **{k: _type_of(v) for k, v in spm.items() if k not in arch}}
        out[name] = VocabFiles(folder, name, spm, spm_types)
    return out


def _type_of(value) -> str:
    """The GGUF type llama.cpp wants for a tokenizer value (token types INT32, ids UINT32)."""
    if isinstance(value, list):
        return "ARRAY[INT32]" if isinstance(value[0], int) else f"ARRAY[{_type_of(value[0])}]"
    return {bool: "BOOL", int: "UINT32", float: "FLOAT32", str: "STRING"}[type(value)]


@pytest.mark.parametrize("name", ["spm", "order", "phi3"])
def test_small_sentencepiece_vocabularies_match_llama_cpp(spm_files, name):
    words = ["abc", "cabc", "bcab", "aaa", "aaaa", "abab", "a bc", "cab cab"]  # 'order' has no byte pieces:
    if name != "order":  # llama.cpp stops (std::out_of_range) on a character it cannot spell
        words += ["cat", "cats", " cat cat", "<|user|>  \ncat", "<start>cat", "é", *STRINGS[::4]]
    assert compare(spm_files[name], None, words) == []


@pytest.mark.slow
@pytest.mark.parametrize("space_prefix", [False, True])
def test_gemmas_vocabulary_matches_llama_cpp(tmp_path_factory, gemma_gguf, space_prefix):
    meta, types = with_tokens(*metadata_of(gemma_gguf), ADDED_TOKENS)
    meta["tokenizer.ggml.add_space_prefix"] = space_prefix  # Gemma's own is False; Llama 2's True
    files = VocabFiles(tmp_path_factory.mktemp("gemma"), "gemma3", meta, types)
    assert compare(files, None, STRINGS) == []


# --- llama.cpp's own tokenizer test -------------------------------------------------------------


def _sdist_models() -> Path:
    """llama.cpp's models/ folder (vocab-only GGUFs and their tests) from the llama-cpp-python sdist
    of the installed version, downloaded once into resources/ (the vocabularies are over 4 MiB)."""
    version = llama_cpp.__version__
    folder = ROOT / "resources" / f"llama-cpp-python-{version}" / "models"
    if folder.is_dir() and any(folder.glob("*.inp")):
        return folder
    if os.environ.get("BYTESUP_OFFLINE") == "1":
        pytest.skip(f"llama.cpp's tokenizer tests are not in {folder} and BYTESUP_OFFLINE=1")
    download = folder.parent / "sdist"
    download.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += ["--disable-pip-version-check", f"llama-cpp-python=={version}", "-d", str(download)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    sdists = list(download.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        pytest.skip(f"could not download the llama-cpp-python {version} sdist: {done.stderr[-300:]}")
    pattern = re.compile(r"^[^/]+/vendor/llama\.cpp/models/(ggml-vocab-[A-Za-z0-9._-]+)$")
    partial = folder.with_name("models.partial")
    partial.mkdir(exist_ok=True)
    with tarfile.open(sdists[0]) as tar:
        for member in tar:
            match = pattern.match(member.name)
            if match and member.isfile() and member.size < 64 << 20:
                (partial / match.group(1)).write_bytes(tar.extractfile(member).read())
    partial.rename(folder)
    shutil.rmtree(download)  # the 76 MB archive: its vocabularies are out
    return folder


def _cases(path: Path) -> list[tuple[str, list[int]]]:
    """test-tokenizer-0's reading of <vocab>.gguf.inp / .out."""
    inputs = Path(f"{path}.inp").read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")
    outputs = Path(f"{path}.out").read_bytes().decode("utf-8").split("\n")
    return [(text, [int(t) for t in out.split()]) for text, out in zip(inputs, outputs, strict=False)]


@pytest.mark.slow
def test_llama_cpps_own_tokenizer_tests():
    """Every ggml-vocab-*.gguf with tests gives exactly llama.cpp's ids, or is refused in one line."""
    results = {}
    for path in sorted(_sdist_models().glob("ggml-vocab-*.gguf")):
        if not Path(f"{path}.inp").exists():
            continue
        name = path.name[len("ggml-vocab-") : -len(".gguf")]
        f = GGUFFile(path)
        try:
            tok = Tokenizer.from_metadata(f.metadata, source=path.name, types=f.metadata_types)
        except UnsupportedTokenizerError as err:
            assert "\n" not in str(err) and f.metadata["tokenizer.ggml.model"] in ("bert", "t5"), err
            results[name] = "refused"
            continue
        cases = _cases(path)
        passed = sum(tok.encode(text, add_special=False, parse_special=False) == ids for text, ids in cases)
        results[name] = f"{passed}/{len(cases)}"
    assert {"llama-bpe", "qwen2", "deepseek-coder", "gemma-4", "llama-spm"} <= set(results)
    assert {n: r for n, r in results.items() if r != "refused" and r.split("/")[0] != r.split("/")[1]} == {}

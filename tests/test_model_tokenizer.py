"""The tokenizer rebuilt from GGUF metadata: parity with transformers on the default model,
hand-computed SentencePiece cases, the tiny synthetic vocabulary, and the refusals."""

from __future__ import annotations

import os
import random

import pytest
import regex

from bytesup.gguf.file import GGUFFile
from bytesup.model.synthetic import write_tiny_llama
from bytesup.model.tokenizer import (
    PRE_TOKENIZERS,
    Tokenizer,
    TokenizerError,
    UnsupportedTokenizerError,
    pre_tokenize,
)

# --- deterministic test strings ------------------------------------------------------------

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "while",
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dogs",
    "tokenizer",
    "embedding",
    "attention",
    "transformer",
    "don't",
    "it's",
    "we're",
    "they've",
    "I'm",
    "you'll",
    "he'd",
    "Hello",
    "WORLD",
    "café",
    "naïve",
    "résumé",
    "façade",
    "Ångström",
    "Straße",
    "mañana",
]
CODE = [
    "def f(x):\n    return x + 1\n",
    "for i in range(10):\n\tprint(i)\n\t\tpass\n",
    "if (a && b) { return -1; }\n",
    'x = {"key": [1, 2, 3]}  # comment',
    "    indented\n        twice\n",
    "class A:\n    def __init__(self):\n        self.x = 0\n",
    "a\tb\t\tc   d",
    'int main(void){printf("%d\\n", 42);}',
]
NUMBERS = [
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345",
    "1000000",
    "3.14159",
    "-273.15",
    "1,234,567",
    "2024-06-01",
    "x=1000000",
    "a  1",
    "a   22",
    "\t 3",
    "  2024",
    "v1.2.3",
    "0x1F",
    "1e-5",
    "½ ²",
]
SPACES = [
    "",
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    "\r\n",
    " \n ",
    "a  b",
    "a\n\nb",
    "a \n b",
    "  lead",
    "trail  ",
    "\t",
    "\t\t",
    "x \t y",
    "\u00a0nbsp",
    "line\u2028sep",
    "end\n",
]
UNICODE = [
    "中文分词测试",
    "日本語のテキスト",
    "한국어 텍스트",
    "Привет мир",
    "مرحبا بالعالم",
    "שלום",
    "emoji 😀 here",
    "👍🏽",
    "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈",
    "e\u0301 combining",
    "Ω≈ç√∫",
    "ａｂｃ full width",
    "ﬁ ligature",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "🤖🤖🤖",
    "\u200bzero width",
]
SPECIALS = [
    "<|im_start|>user\nhi<|im_end|>",
    "text<|endoftext|>more",
    "<|im_start|><|im_end|>",
    "a <|im_start|> b",
    "<|im_start|",
    "<repo_name>x<file_sep>y",
    "<<|im_end|>>",
]


def generated_strings(n_random: int = 300, seed: int = 0) -> list[str]:
    """The fixed lists plus random mixtures of their parts: the same strings on every run."""
    rng = random.Random(seed)
    parts = WORDS + CODE + NUMBERS + SPACES + UNICODE + SPECIALS + [" ", " ", "\n", ".", ",", "!?", "'s"]
    out = list(dict.fromkeys(WORDS + CODE + NUMBERS + SPACES + UNICODE + SPECIALS))
    out += [" ".join(WORDS[i : i + 7]) + "." for i in range(0, len(WORDS), 7)]
    for _ in range(n_random):
        k = rng.randint(1, 6)
        sep = rng.choice(["", " ", "  ", "\n", "\t"])
        out.append(sep.join(rng.choice(parts) for _ in range(k)))
    return out


STRINGS = generated_strings()


@pytest.fixture(scope="module")
def ours(default_gguf):
    return Tokenizer.from_gguf(default_gguf)


@pytest.fixture(scope="module")
def hf_pair(default_gguf):
    """transformers' tokenizer for the same GGUF, twice: as it builds it (ByteLevel only, since it
    has no split for 'smollm'), and with SmolLM2's own pre-tokenizer (its tokenizer.json:
    Digits(individual_digits) then ByteLevel), which is what llama.cpp's 'smollm' regexes do."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    from tokenizers import pre_tokenizers

    def load():
        return transformers.AutoTokenizer.from_pretrained(str(default_gguf.parent), gguf_file=default_gguf.name)

    as_built = load()
    own = load()
    own.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return as_built, own


def test_default_model_metadata(ours):
    assert (ours.model, ours.pre, len(ours), len(ours.merge_ranks)) == ("gpt2", "smollm", 49152, 48900)
    assert (ours.bos_id, ours.eos_id, ours.unk_id, ours.pad_id) == (1, 2, 0, 2)
    assert ours.add_bos is False and ours.add_eos is False
    assert ours.tokens[ours.encode("<|im_start|>")[0]] == "<|im_start|>"


def test_default_model_known_ids(ours):
    assert ours.encode("hello world") == [28120, 905]
    assert ours.encode("<|im_start|>user\nhi<|im_end|>") == [1, 4093, 198, 6004, 2]
    assert ours.encode("12345 apples") == [33, 34, 35, 36, 37, 13855]  # one digit per token
    assert ours.encode("a  1") == [81, 256, 33]  # 'a', 'ĠĠ', '1': digits cut off before the spaces
    assert ours.encode("") == []
    assert ours.token_text(905) == " world"


@pytest.mark.slow
def test_ids_match_transformers(ours, hf_pair):
    as_built, own = hf_pair
    assert len(STRINGS) >= 300
    differs_from_own = [s for s in STRINGS if ours.encode(s) != own.encode(s, add_special_tokens=False)]
    assert differs_from_own == []
    # transformers' GGUF build lacks the digit split: it parts from the model's own tokenizer
    # (and from llama.cpp) only where whitespace precedes a numeric character: two spaces before
    # a digit ('ĠĠ' vs 'Ġ' 'Ġ'), or a space before '½' / '²' (merge 'Ġ Â' vs 'Ġ' 'Â²').
    differs_from_built = [s for s in STRINGS if ours.encode(s) != as_built.encode(s, add_special_tokens=False)]
    assert all(regex.search(r"\s\p{N}", s) for s in differs_from_built)
    assert {"a  1", "½ ²"} <= set(differs_from_built)
    assert as_built.encode("a  1", add_special_tokens=False) == [81, 216, 216, 33]  # 'a' 'Ġ' 'Ġ' '1'
    assert ours.encode("½ ²") == own.encode("½ ²", add_special_tokens=False)
    # add_special: neither adds BOS for this file
    assert ours.encode("hi", add_special=True) == as_built.encode("hi") == [6004]


def test_round_trip(ours):
    bytes_missing = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D}  # control bytes absent from this vocabulary
    for s in STRINGS:
        if any(ord(c) in bytes_missing for c in s):
            continue
        assert ours.decode(ours.encode(s)) == s, s


def test_decode_skip_special_and_partial_bytes(ours):
    ids = ours.encode("<|im_start|>user\nhi<|im_end|>")
    assert ours.decode(ids, skip_special=True) == "user\nhi"
    emoji = ours.encode("😀")
    assert len(emoji) > 1  # split into byte tokens
    assert ours.decode(emoji[:1]) == "\ufffd"  # a lone partial byte decodes as the replacement char
    assert ours.token_text(emoji[0]).startswith("<0x")
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        ours.decode([len(ours)])


def test_pre_tokenizers_split_as_llama_cpp():
    assert pre_tokenize("Hello world's 12345!!", PRE_TOKENIZERS["gpt2"]) == ["Hello", " world", "'s", " 12345", "!!"]
    assert pre_tokenize("a  1", PRE_TOKENIZERS["smollm"]) == ["a", "  ", "1"]
    assert pre_tokenize("x 12345", PRE_TOKENIZERS["llama-bpe"]) == ["x", " ", "123", "45"]
    assert pre_tokenize("I'M here\n\n", PRE_TOKENIZERS["llama-bpe"]) == ["I", "'M", " here", "\n\n"]
    assert pre_tokenize("a\nbc 12", PRE_TOKENIZERS["deepseek-coder"]) == ["a", "\n", "bc", " ", "1", "2"]
    assert pre_tokenize("\tb", PRE_TOKENIZERS["gpt2"]) == ["\t", "b"]  # gaps are kept, never dropped


# --- the tiny synthetic model ------------------------------------------------------------------


def test_tiny_synthetic_model_merges(tmp_path):
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    tok = Tokenizer.from_gguf(path)
    vocab = tok.tokens
    ids = tok.encode(" cat")
    assert [vocab[i] for i in ids] == ["Ġcat"]
    assert [vocab[i] for i in tok.encode(" cats")] == ["Ġcats"]
    assert tok.decode(tok.encode(" cat")) == " cat"
    assert tok.add_bos is False  # byte-level, no add_bos_token key: llama.cpp's default


# --- SentencePiece-style, synthetic vocabularies -------------------------------------------------


def spm_metadata(pieces: list[tuple[str, float, int]], **extra) -> dict:
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [p for p, _, _ in pieces],
        "tokenizer.ggml.scores": [s for _, s, _ in pieces],
        "tokenizer.ggml.token_type": [t for _, _, t in pieces],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }
    meta.update(extra)
    return meta


SPM_PIECES = [
    ("<unk>", 0.0, 2),
    ("<s>", 0.0, 3),
    ("</s>", 0.0, 3),
    *[(f"<0x{b:02X}>", 0.0, 6) for b in range(256)],  # ids 3..258
    ("▁", -1.0, 1),
    ("c", -2.0, 1),
    ("a", -2.0, 1),
    ("t", -2.0, 1),
    ("s", -2.0, 1),  # 259..263
    ("▁c", -5.0, 1),
    ("at", -3.0, 1),
    ("▁cat", -1.5, 1),
    ("ca", -4.0, 1),
    ("cat", -6.0, 1),  # 264..268
    ("<start>", 0.0, 3),  # 269
]


def test_spm_score_ordered_merges():
    tok = Tokenizer.from_metadata(spm_metadata(SPM_PIECES), source="spm.gguf")
    assert tok.add_bos is True and tok.add_space_prefix is True  # llama.cpp's defaults for 'llama'
    # "▁cat": pairs ▁c(-5) ca(-4) at(-3) -> 'at' first; then ▁ c at: ▁c(-5), cat(-6) -> '▁c';
    # then ▁c at -> '▁cat'(-1.5).
    assert tok.encode("cat") == [1, 266]
    # "▁cats": at(-3), then ▁c(-5) beats cat(-6), then ▁cat(-1.5); "▁cats" is no piece
    assert tok.encode("cats", add_special=False) == [266, 263]
    # without the prefix space: c a t s -> at(-3) -> c at s -> cat(-6) -> [cat, s]
    no_prefix = Tokenizer.from_metadata(
        spm_metadata(SPM_PIECES, **{"tokenizer.ggml.add_space_prefix": False}), source="spm.gguf"
    )
    assert no_prefix.encode("cats", add_special=False) == [268, 263]
    assert no_prefix.encode("cat cat", add_special=False) == [268, 266]
    assert tok.decode([266]) == "cat"  # the prefix space is taken back off
    assert tok.decode([1, 266]) == "<s>cat"  # specials are shown unless skipped
    assert tok.decode(tok.encode("cat cat"), skip_special=True) == "cat cat"


def test_spm_byte_fallback_and_specials():
    tok = Tokenizer.from_metadata(spm_metadata(SPM_PIECES), source="spm.gguf")
    # 'é' (C3 A9) is no piece: two byte pieces <0xC3>=3+0xC3, <0xA9>=3+0xA9
    assert tok.encode("é", add_special=False) == [259, 3 + 0xC3, 3 + 0xA9]
    assert tok.decode(tok.encode("é"), skip_special=True) == "é"
    assert tok.token_text(3 + 0xC3) == "<0xC3>"
    # a control token in the text is matched whole; the space prefix follows it again
    assert tok.encode("<start>cat", add_special=False) == [269, 266]
    assert tok.encode("cat", add_special=False) == [266]
    assert tok.encode("cat</s><unk>", add_special=False) == [266, 2, 0]  # control and unknown, whole
    assert tok.encode("cat</s>", add_special=False, parse_special=False)[0] == 266  # as plain text
    assert 2 not in tok.encode("cat</s>", add_special=False, parse_special=False)
    eos = Tokenizer.from_metadata(spm_metadata(SPM_PIECES, **{"tokenizer.ggml.add_eos_token": True}))
    assert eos.encode("cat") == [1, 266, 2]


# --- refusals -------------------------------------------------------------------------------------


def test_unsupported_model_and_pre(default_gguf):
    meta = dict(GGUFFile(default_gguf).metadata)
    with pytest.raises(UnsupportedTokenizerError) as err:
        Tokenizer.from_metadata({**meta, "tokenizer.ggml.model": "bert"}, source="m.gguf")
    msg = str(err.value)
    assert "\n" not in msg and "tokenizer.ggml.model" in msg and "'bert'" in msg and "m.gguf" in msg and "gpt2" in msg
    with pytest.raises(UnsupportedTokenizerError) as err:
        Tokenizer.from_metadata({**meta, "tokenizer.ggml.pre": "qwen2"}, source="m.gguf")
    msg = str(err.value)
    assert "\n" not in msg and "tokenizer.ggml.pre" in msg and "'qwen2'" in msg and "smollm" in msg
    assert isinstance(err.value, ValueError)


def test_missing_vocabulary_is_one_line():
    with pytest.raises(TokenizerError, match=r"^x\.gguf: tokenizer\.ggml\.tokens is missing"):
        Tokenizer.from_metadata({"tokenizer.ggml.model": "gpt2"}, source="x.gguf")


def test_pre_tokenizer_regexes_match_hf_tokenizers():
    """Our regex sequences cut text exactly where Hugging Face tokenizers' pre-tokenizers do."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt

    from bytesup.model.tokens import gpt2_byte_to_char

    table = gpt2_byte_to_char()
    byte_level = pt.ByteLevel(add_prefix_space=False, use_regex=True)
    hf = {
        "gpt2": byte_level,
        "smollm": pt.Sequence([pt.Digits(individual_digits=True), byte_level]),
        "llama-bpe": pt.Sequence(
            [
                pt.Split(
                    Regex(
                        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
                    ),
                    behavior="isolated",
                ),
                pt.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        ),
    }
    assert tokenizers.__version__
    for name, pre in hf.items():
        for s in STRINGS:
            theirs = [piece for piece, _ in pre.pre_tokenize_str(s)]
            ours = ["".join(table[b] for b in w.encode("utf-8")) for w in pre_tokenize(s, PRE_TOKENIZERS[name])]
            assert ours == theirs, (name, s)


# --- Gemma 3: the SentencePiece-style ('llama') tokenizer of a real file ----------------------------

GEMMA_STRINGS = [
    "The capital of France is",
    "The cat sat on the",
    "  leading spaces",
    "tabs\tand\nnewlines\n\n\nend",
    "naïve café 日本語 🙂",
    "<start_of_turn>user\nHi<end_of_turn>",
    "1234567 numbers 3.14",
    "don't stop",
    "a  b   c    d",
    "trailing ",
    "\u00ff\u0001x",
    "<bos>twice",
    "    def f(x):\n        return x",
]


def test_gemma3_tokenizer_metadata(gemma_gguf):
    tok = Tokenizer.from_gguf(gemma_gguf)
    assert (tok.model, len(tok), tok.bos_id, tok.eos_id, tok.add_bos, tok.add_space_prefix) == (
        "llama",
        262144,
        2,
        1,
        True,
        False,
    )
    assert tok.encode(" cat", add_special=False) == [tok.ids["▁cat"]]  # one piece, no space prefix added
    assert tok.encode("cat", add_special=False) != tok.encode(" cat", add_special=False)


@pytest.mark.slow
def test_gemma3_ids_and_text_match_transformers(gemma_gguf, gemma_hf):
    """Our tokenizer from the file's metadata against transformers' tokenizer from the same GGUF."""
    _, hf_tok, _ = gemma_hf
    tok = Tokenizer.from_gguf(gemma_gguf)
    for text in GEMMA_STRINGS:
        ids = tok.encode(text)
        assert ids == hf_tok(text)["input_ids"], text
        assert tok.decode(ids, skip_special=True) == hf_tok.decode(ids, skip_special_tokens=True), text

"""The tokenizer rebuilt from GGUF metadata: parity with transformers on the default model,
hand-computed SentencePiece cases, the tiny synthetic vocabulary, and the refusals."""

from __future__ import annotations

import os

import pytest
import regex
from tokenizer_cases import ORDER_PIECES, SPM_PIECES, STRINGS
from tokenizer_vocabs import spm_metadata

from bytesup.gguf.file import GGUFFile
from bytesup.model.synthetic import write_tiny_llama
from bytesup.model.tokenizer import (
    PRE_TOKENIZERS,
    Tokenizer,
    TokenizerError,
    UnsupportedTokenizerError,
    pre_tokenize,
)


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


def test_text_that_is_no_utf8_reads_as_llama_cpp_reads_a_bad_byte(ours):
    assert ours.encode("a\ud800b") == ours.encode("a\ufffdb")  # a lone surrogate: the replacement character


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
    assert pre_tokenize("Hello world's 12345!!", "gpt-2") == ["Hello", " world", "'s", " 12345", "!!"]
    assert pre_tokenize("a  1", "smollm") == ["a", "  ", "1"]
    assert pre_tokenize("x 12345", "llama-bpe") == ["x", " ", "123", "45"]
    assert pre_tokenize("x 12345", "qwen2") == ["x", " ", "1", "2", "3", "4", "5"]  # Qwen: one digit each
    assert pre_tokenize("I'M here\n\n", "llama-bpe") == ["I", "'M", " here", "\n\n"]
    assert pre_tokenize("a\nbc 12", "deepseek-coder") == ["a", "\n", "bc", " ", "1", "2"]
    assert pre_tokenize("\tb", "gpt-2") == ["\t", "b"]  # gaps are kept, never dropped
    assert pre_tokenize("中文English混合 it's", "kimi-k2") == ["中文", "English", "混合", " it's"]
    assert pre_tokenize("x1234567", "superbpe") == ["x", "1", "234", "567"]  # threes from the right
    assert pre_tokenize("1234567 12ab", "tiny_aya") == ["1", "234", "567", " ", "12", "ab"]


def test_pre_tokenizers_keep_llama_cpps_quirks():
    """Where llama.cpp parts from Hugging Face's tokenizers, it is followed (each checked with llama.cpp)."""
    # std::regex knows no \p{Lu}: Tekken's "upper case then lower case" sees a non-ASCII letter as both
    assert pre_tokenize("ÀB éCOLE", "tekken") == ["À", "B", " é", "COLE"]  # HF: "ÀB", " éCOLE"... by case
    # Unicode 15.1: a letter added in 16.0 is no letter to llama.cpp (HF: one word "a\u0c5cb")
    assert pre_tokenize("a\u0c5cb", "gpt-2") == ["a", "\u0c5c", "b"]
    # std::wregex sees non-ASCII white space as a vertical tab, so U+3000 joins the letters after it
    assert pre_tokenize("a。\u3000b", "deepseek-llm") == ["a", "。", "\u3000b"]
    # AFMoE's digit code cuts what precedes a number off with its first group (the next pattern parts them)
    from bytesup.model.pretokenizers import AFMOE_DIGITS

    assert pre_tokenize("ab1234cd", [AFMOE_DIGITS]) == ["ab1", "234", "cd"]
    assert pre_tokenize("ab1234cd", "afmoe") == ["ab", "1", "234", "cd"]
    # ECMAScript's '$' is the end only: deepseek-llm's trailing white space
    assert pre_tokenize("end  ", "deepseek-llm") == ["end", "  "]


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


ORDER_CASES = {"abc": [6, 5], "aaa": [8, 3], "cabc": [9, 5], "bcab": [4, 9], "aaaa": [8, 8], "abab": [6, 6]}


def test_spm_merges_follow_the_scores_highest_first_then_leftmost():
    """Issue 23 item 7: with the scores reversed (lowest merged first) abc, cabc and bcab change, and
    merging equal scores rightmost first changes aaa."""
    tok = Tokenizer.from_metadata(spm_metadata(ORDER_PIECES, **{"tokenizer.ggml.add_space_prefix": False}))
    assert {text: tok.encode(text, add_special=False) for text in ORDER_CASES} == ORDER_CASES
    flipped = spm_metadata(
        [(p, -s if t == 1 else s, t) for p, s, t in ORDER_PIECES], **{"tokenizer.ggml.add_space_prefix": False}
    )
    reverse = Tokenizer.from_metadata(flipped)
    assert [reverse.encode(t, add_special=False) for t in ("abc", "cabc", "bcab")] == [[3, 7], [5, 3, 7], [7, 6]]


# --- special tokens as llama.cpp treats them ---------------------------------------------------------


def test_user_defined_tokens_are_cut_out_even_unparsed():
    """deepseek-coder's 'Führer' case: a user-defined token is never split; a control token only
    when special tokens are parsed."""
    pieces = SPM_PIECES + [("Führer", 0.0, 4), ("<tool>", 0.0, 4), ("<|im_end|>", 0.0, 4), ("<|channel|>", 0.0, 3)]
    tok = Tokenizer.from_metadata(spm_metadata(pieces, **{"tokenizer.ggml.add_space_prefix": False}))
    fuehrer, tool, im_end, channel = (tok.ids[t] for t in ("Führer", "<tool>", "<|im_end|>", "<|channel|>"))
    for parse in (False, True):
        assert tok.encode("cat Führer<tool>cat", add_special=False, parse_special=parse)[2:4] == [fuehrer, tool]
    assert 269 not in tok.encode("<start>", add_special=False, parse_special=False)  # control: as text
    assert tok.encode("<start>", add_special=False, parse_special=True) == [269]
    # by its text, llama.cpp makes a user-defined '<|im_end|>' a control token, and gpt-oss's
    # control '<|channel|>' a user-defined one
    assert im_end not in tok.encode("<|im_end|>", add_special=False, parse_special=False)
    assert tok.encode("<|channel|>", add_special=False, parse_special=False) == [channel]


def test_special_tokens_are_cut_longest_first_one_token_at_a_time():
    """llama.cpp cuts every occurrence of the longest special text, then the next: 'xabc' with the
    specials 'abc' and 'xa' is 'x' + abc, where a regex alternation would take 'xa' first."""
    from bytesup.model.special_tokens import USER_DEFINED, partition, special_order

    tokens, attrs = ["xa", "abc", "b"], [USER_DEFINED] * 3
    order = special_order(tokens, attrs)
    assert order == [1, 0, 2]
    assert partition("xabcxa b", order, tokens, attrs, parse_special=False) == ["x", 1, 0, " ", 2]


def test_phi3_special_tokens_swallow_the_spaces_after_them():
    """llama.cpp strips white space after Phi-3's special tokens (it keys this on general.name)."""
    pieces = SPM_PIECES + [("<|user|>", 0.0, 4), ("<|endoftext|>", 0.0, 3)]
    extra = {"tokenizer.ggml.add_space_prefix": False}
    phi3 = Tokenizer.from_metadata(spm_metadata(pieces, **extra, **{"general.name": "Phi-3 mini"}))
    other = Tokenizer.from_metadata(spm_metadata(pieces, **extra))
    user, eot = phi3.ids["<|user|>"], phi3.ids["<|endoftext|>"]
    assert phi3.encode("<|user|>  \ncat", add_special=False) == [user, 268]
    assert other.encode("<|user|>  \ncat", add_special=False)[-1] == 268 and len(other.encode("<|user|>  \ncat")) > 3
    assert phi3.encode("<|endoftext|> cat", add_special=False) == [eot, 266]  # not stripped after this one


# --- refusals -------------------------------------------------------------------------------------


def test_unsupported_model_and_pre(default_gguf):
    meta = dict(GGUFFile(default_gguf).metadata)
    for model, kind in (("bert", "WordPiece"), ("t5", "unigram"), ("rwkv", "RWKV")):
        with pytest.raises(UnsupportedTokenizerError) as err:
            Tokenizer.from_metadata({**meta, "tokenizer.ggml.model": model}, source="m.gguf")
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(f"m.gguf: tokenizer.ggml.model = {model!r} ({kind}") and "gpt2" in msg
    with pytest.raises(UnsupportedTokenizerError) as err:  # llama.cpp's spelling is 'gpt-2'
        Tokenizer.from_metadata({**meta, "tokenizer.ggml.pre": "gpt2"}, source="m.gguf")
    msg = str(err.value)
    assert "\n" not in msg and "tokenizer.ggml.pre = 'gpt2' is no pre-tokenizer llama.cpp knows" in msg
    assert "did you mean 'gpt-2'" in msg and isinstance(err.value, ValueError)
    with pytest.raises(UnsupportedTokenizerError, match="'whitespace' is not followed: .*embedding models"):
        Tokenizer.from_metadata({**meta, "tokenizer.ggml.pre": "whitespace"}, source="m.gguf")
    with pytest.raises(
        UnsupportedTokenizerError, match=r"'x{80}'\.\.\. \(10,000 characters\) is no pre-tokenizer"
    ):  # cut, its length given
        Tokenizer.from_metadata({**meta, "tokenizer.ggml.pre": "x" * 10_000}, source="m.gguf")
    assert Tokenizer.from_metadata({**meta, "tokenizer.ggml.pre": "deepseek-r1-qwen"}).pre == "deepseek-r1-qwen"


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
        "gpt-2": byte_level,
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

"""Vocabularies are checked before anything tokenizes with them: a corrupt or hostile one is refused
in one line (issue 21 item 4), in bounded time and memory."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bytesup.lessons.generating_text import GeneratingTextError, prepare
from bytesup.model.synthetic import default_tokens, prefix_merges
from bytesup.model.tokenizer import Tokenizer
from bytesup.model.tokens import lookup
from bytesup.model.vocabulary import MAX_TOKENS, TokenizerError, check_tokens, read_vocabulary

TOKENS = default_tokens()


def gpt2_metadata(tokens=None, **extra) -> dict:
    tokens = TOKENS if tokens is None else tokens
    meta = {
        "general.architecture": "llama",
        "llama.context_length": 64,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [1] * len(tokens),
        "tokenizer.ggml.merges": prefix_merges(list(TOKENS)),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    meta.update(extra)
    return meta


def refusal(meta: dict, types: dict | None = None) -> str:
    with pytest.raises(TokenizerError) as err:
        Tokenizer.from_metadata(meta, source="bad.gguf", types=types)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("bad.gguf: ") and len(msg) < 300, msg
    return msg


def test_a_vocabulary_of_one_word_repeated_is_refused_everywhere():
    """Every token 'Ġcat': before, "the cat sat on the mat" became [0] and lesson 5 wrote 'cat cat cat'."""
    cats = ["Ġcat"] * len(TOKENS)
    msg = refusal(gpt2_metadata(cats))
    assert "'Ġcat' is token 0 and token 1" in msg and f"{len(cats) - 1:,} of the {len(cats):,} tokens repeat" in msg
    with pytest.raises(TokenizerError, match="'Ġcat' is token 0 and token 1"):
        lookup(gpt2_metadata(cats), " cat")  # lessons 1-3 look words up; they refuse it too
    with pytest.raises(GeneratingTextError, match="'Ġcat' is token 0 and token 1"):
        prepare(gpt2_metadata(cats), "the cat sat on the mat", {}, 0)
    # one repeat is enough
    assert "is token 5 and token" in refusal(gpt2_metadata(TOKENS + [TOKENS[5]]))


def test_tokens_that_are_not_strings_are_named_by_type():
    """Tokens stored as INT32 used to end in "' cat' is not a single entry"."""
    ints = list(range(len(TOKENS)))
    msg = refusal(gpt2_metadata(ints))
    assert "tokenizer.ggml.tokens[0] is the int 0, not a string" in msg
    with pytest.raises(TokenizerError, match=r"tokens\[0\] is the int 0, not a string"):
        lookup(gpt2_metadata(ints), " cat")
    msg = refusal(gpt2_metadata(), types={"tokenizer.ggml.tokens": "ARRAY[INT32]"})
    assert "stored as 'ARRAY[INT32]'" in msg and "ARRAY[STRING]" in msg
    assert "is a str, not an array" in refusal(gpt2_metadata("Ġcat"))
    assert "tokens[3] is the bool True" in refusal(gpt2_metadata(TOKENS[:3] + [True] + TOKENS[4:]))


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({"tokenizer.ggml.token_type": ["1"] * len(TOKENS)}, "token_type[0] = '1' is not a token type (0 to 6)"),
        ({"tokenizer.ggml.token_type": [1] * (len(TOKENS) - 1) + [9]}, f"token_type[{len(TOKENS) - 1}] = 9 is not"),
        ({"tokenizer.ggml.token_type": [1, 1]}, f"token_type has 2 entries for {len(TOKENS)} tokens"),
        ({"tokenizer.ggml.scores": [0.0] * (len(TOKENS) - 1) + [float("nan")]}, "= nan is not a finite number"),
        ({"tokenizer.ggml.scores": ["0.5"] * len(TOKENS)}, "scores[0] = '0.5' is not a finite number"),
        ({"tokenizer.ggml.merges": ["Ġ c", "nospace"]}, "merges[1] = 'nospace' is not 'left right'"),
        ({"tokenizer.ggml.merges": [7]}, "merges[0] = 7 is not 'left right'"),
        ({"tokenizer.ggml.bos_token_id": len(TOKENS)}, f"bos_token_id = {len(TOKENS)} is not an id below"),
        ({"tokenizer.ggml.eos_token_id": -1}, "eos_token_id = -1 is not an id below"),
        ({"tokenizer.ggml.padding_token_id": True}, "padding_token_id = True is not an id"),
        ({"tokenizer.ggml.add_bos_token": "yes"}, "add_bos_token = 'yes' is not true or false"),
        ({"tokenizer.ggml.pre": 7}, "tokenizer.ggml.pre is 7, not a pre-tokenizer name"),
        ({"tokenizer.ggml.merges": None}, "tokenizer.ggml.merges is missing"),
        ({"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": None}, "bos_token_id is missing"),
    ],
)
def test_malformed_keys_are_one_line(extra, expected):
    meta = {k: v for k, v in gpt2_metadata(**extra).items() if v is not None}
    assert expected in refusal(meta)


def test_stored_types_are_checked_when_known():
    meta = gpt2_metadata()
    assert "token_type is stored as 'ARRAY[UINT8]'" in refusal(meta, {"tokenizer.ggml.token_type": "ARRAY[UINT8]"})
    assert "ARRAY[FLOAT32] or ARRAY[INT32]" in refusal(
        gpt2_metadata(**{"tokenizer.ggml.scores": [0] * len(TOKENS)}), {"tokenizer.ggml.scores": "ARRAY[STRING]"}
    )
    # INT32 scores are what llama.cpp accepts besides FLOAT32
    ok = Tokenizer.from_metadata(
        gpt2_metadata(**{"tokenizer.ggml.scores": [0] * len(TOKENS)}), types={"tokenizer.ggml.scores": "ARRAY[INT32]"}
    )
    assert ok.scores[:2] == [0.0, 0.0]


class Claimed(Sequence):
    """A vocabulary that claims ``n`` tokens and counts how many are read."""

    def __init__(self, n: int):
        self.n, self.reads = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        self.reads += 1
        if isinstance(i, slice):
            raise AssertionError("sliced")
        return "a"


def test_a_hostile_vocabulary_is_refused_before_it_is_read():
    claimed = Claimed(10**12)
    with pytest.raises(TokenizerError) as err:
        check_tokens({"tokenizer.ggml.tokens": claimed}, "huge.gguf")
    assert f"claims 1,000,000,000,000 tokens, over this package's bound of {MAX_TOKENS:,}" in str(err.value)
    assert claimed.reads == 0  # not one token read, nothing allocated for them
    long = "x" * (1 << 17)
    assert "is 131,072 characters long" in refusal(gpt2_metadata(TOKENS + [long]))


ODD_VALUES = [None, True, 0, -1, 2**31, 10**400, 0.5, float("nan"), float("inf"), "", "x" * 300, b"bytes",
              [], [1, "a"], [[1]], {"k": 1}, "Ġ c", "<|im_start|>"]  # fmt: skip
KEYS = ["tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.pre",
        "tokenizer.ggml.add_bos_token", "tokenizer.ggml.model", "general.name"]  # fmt: skip


def fuzzed(rng) -> dict:
    """A valid vocabulary with one to three keys, or array entries, replaced by odd values."""
    meta = gpt2_metadata(**{"tokenizer.ggml.scores": [0.0] * len(TOKENS)})
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(KEYS)
        value = meta.get(key)
        if isinstance(value, list) and value and rng.random() < 0.6:
            value = list(value)
            value[rng.randrange(len(value))] = rng.choice(ODD_VALUES)
            meta[key] = value
        else:
            meta[key] = rng.choice(ODD_VALUES)
    return {k: v for k, v in meta.items() if v is not None}


def test_fuzzed_vocabularies_build_or_are_refused_in_one_line():
    """300 seeded corruptions: each gives a tokenizer that encodes, or one BytesupError line."""
    import random

    from bytesup.errors import BytesupError

    rng, outcomes = random.Random(21), {"built": 0, "refused": 0}
    for _ in range(300):
        meta = fuzzed(rng)
        try:
            tok = Tokenizer.from_metadata(meta, source="fuzz.gguf")
            tok.decode(tok.encode("the cat <|im_start|> sat 12"))
            outcomes["built"] += 1
        except BytesupError as err:
            msg = str(err)
            assert "\n" not in msg and len(msg) < 400 and msg.startswith("fuzz.gguf: "), msg
            outcomes["refused"] += 1
    assert outcomes["built"] >= 15 and outcomes["refused"] >= 250, outcomes  # (20, 280) with this seed


def test_empty_tokens_get_llama_cpps_name_and_may_not_collide():
    tokens = [*TOKENS, "", ""]
    vocab = read_vocabulary(gpt2_metadata(tokens))
    n = len(TOKENS)
    assert vocab.tokens[n:] == [f"[EMPTY_{n}]", f"[EMPTY_{n + 1}]"] and vocab.ids[f"[EMPTY_{n}]"] == n
    assert "is token" in refusal(gpt2_metadata([*TOKENS, f"[EMPTY_{n + 1}]", ""]))

import pytest

from bytesup.model.tokens import (
    TokenError,
    display,
    gpt2_byte_to_char,
    lookup,
    token_id,
    tokenizer_of,
    vocab_form,
)

GPT2_VOCAB = ["<|endoftext|>", "cat", "Ġcat", "Ġthe", "Ċ", "ĠcafÃ©"]
SPM_VOCAB = ["<unk>", "<s>", "</s>", "cat", "▁cat", "▁the"]


def test_gpt2_byte_table():
    table = gpt2_byte_to_char()
    assert len(table) == 256 and len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ"
    assert table[ord("a")] == "a" and table[0] == chr(256)


def test_vocab_forms():
    assert vocab_form(" cat", "gpt2") == "Ġcat"
    assert vocab_form(" café", "gpt2") == "ĠcafÃ©"  # UTF-8 bytes, each mapped to a character
    assert vocab_form(" cat", "llama") == "▁cat"
    assert vocab_form("cat", "gpt2") == "cat"
    assert vocab_form(" cat", "gemma4") == "▁cat" and display("▁cat", "gemma4") == '" cat"'  # Gemma 4's BPE


def test_token_id_with_gpt2_space_marker():
    assert token_id(GPT2_VOCAB, " cat", "gpt2") == 2
    assert token_id(GPT2_VOCAB, "cat", "gpt2") == 1
    assert token_id(GPT2_VOCAB, "\n", "gpt2") == 4
    assert token_id(GPT2_VOCAB, " café", "gpt2") == 5


def test_token_id_with_sentencepiece_space_marker():
    assert token_id(SPM_VOCAB, " cat", "llama") == 4
    assert token_id(SPM_VOCAB, " the", "llama") == 5


def test_missing_token_names_it():
    with pytest.raises(TokenError) as err:
        token_id(GPT2_VOCAB, " dog", "gpt2")
    msg = str(err.value)
    assert "' dog'" in msg and "'Ġdog'" in msg and "6 tokens" in msg
    with pytest.raises(KeyError):  # a TokenError is a KeyError for callers that catch those
        token_id(SPM_VOCAB, " cat", "gpt2")


def test_unknown_tokenizer_is_refused():
    with pytest.raises(TokenError, match="tokenizer.ggml.model = 'bert'"):
        token_id(GPT2_VOCAB, " cat", "bert")


def test_display():
    assert display("Ġcat", "gpt2") == '" cat"'
    assert display("ĠcafÃ©", "gpt2") == '" café"'
    assert display("▁cat", "llama") == '" cat"'
    assert display("<|endoftext|>", "gpt2") == '"<|endoftext|>"'


def test_lookup_from_metadata():
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": GPT2_VOCAB}
    assert lookup(meta, " cat") == (2, "Ġcat")
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": SPM_VOCAB}
    assert lookup(meta, " cat") == (4, "▁cat")
    with pytest.raises(TokenError, match="tokenizer.ggml.tokens"):
        tokenizer_of({"tokenizer.ggml.model": "gpt2"})
    with pytest.raises(TokenError, match="tokenizer.ggml.model"):
        tokenizer_of({"tokenizer.ggml.tokens": GPT2_VOCAB})

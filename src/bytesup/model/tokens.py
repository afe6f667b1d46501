"""Finding a word's token id, and showing tokens readably.

A vocabulary does not store " cat" with a plain space. Each tokenizer family marks a leading
space its own way, and the GGUF metadata key ``tokenizer.ggml.model`` says which family:

    "gpt2"   byte-level BPE (GPT-2, SmolLM2, Llama 3, deepseek-coder): every byte is mapped to a
             printable character first; the space byte becomes 'Ġ' (U+0120), newline 'Ċ'.
             " cat" is stored as "Ġcat".
    "llama"  SentencePiece (Llama 1/2, Mistral, Gemma 1-3): a space becomes '▁' (U+2581).
             " cat" is stored as "▁cat". "gemma4" (Gemma 4's BPE) marks spaces the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

from bytesup.errors import BytesupError, quote
from bytesup.model.vocabulary import check_tokens, shown

SENTENCEPIECE_SPACE = "\u2581"  # '▁'
SPACE_AS_BLOCK = ("llama", "gemma4")  # tokenizer.ggml.model values that write a space as '▁'


class TokenError(BytesupError, KeyError):
    """A token that is not in the vocabulary, or a tokenizer we do not know."""


@lru_cache(maxsize=1)
def gpt2_byte_to_char() -> dict[int, str]:
    """GPT-2's table from the 256 byte values to 256 printable characters.

    Printable ASCII and most of Latin-1 keep their own character; the other 68 bytes (control
    characters, space, ...) are moved to code points 256 and up, in byte order. So space
    (byte 32, the 33rd such byte) lands on chr(256 + 32) = 'Ġ'.
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, moved = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + moved)
            moved += 1
    return table


def vocab_form(text: str, tokenizer_model: str) -> str:
    """How ``text`` is spelled inside the vocabulary of a ``tokenizer_model`` tokenizer."""
    if tokenizer_model == "gpt2":
        table = gpt2_byte_to_char()
        return "".join(table[b] for b in text.encode("utf-8"))
    if tokenizer_model in SPACE_AS_BLOCK:
        return text.replace(" ", SENTENCEPIECE_SPACE)
    raise TokenError(
        f"tokenizer.ggml.model = {shown(tokenizer_model)}: only the space markers of 'gpt2' (byte-level "
        "BPE), 'llama' (SentencePiece) and 'gemma4' are known"
    )


def display(token: str, tokenizer_model: str) -> str:
    """The text a vocabulary entry stands for, quoted so a leading space shows: 'Ġcat' -> '" cat"'."""
    if tokenizer_model == "gpt2":
        back = {c: b for b, c in gpt2_byte_to_char().items()}
        if all(c in back for c in token):
            text = bytes(back[c] for c in token).decode("utf-8", errors="replace")
        else:  # special tokens such as <|endoftext|> are stored as they are
            text = token
    elif tokenizer_model in SPACE_AS_BLOCK:
        text = token.replace(SENTENCEPIECE_SPACE, " ")
    else:
        text = token
    return '"' + text + '"'


def token_id(vocab: Sequence[str], text: str, tokenizer_model: str) -> int:
    """The id of the vocabulary entry that spells ``text`` exactly (one token, not a split).

    The id is the entry's position in ``vocab`` (tokenizer.ggml.tokens), and also the row of
    the token embedding matrix that holds the token's vector.
    """
    form = vocab_form(text, tokenizer_model)
    for i, entry in enumerate(vocab):
        if entry == form:
            return i
    raise TokenError(
        f"token {quote(text)} (stored as {quote(form)} by a {quote(tokenizer_model)} tokenizer) is not a single entry "
        f"in this vocabulary of {len(vocab)} tokens; choose a word the model keeps whole"
    )


_CHECKED: dict[int, tuple[Sequence, list[str]]] = {}  # id(tokens) -> (tokens, checked copy)


def tokenizer_of(metadata: Mapping) -> tuple[Sequence[str], str]:
    """(tokenizer.ggml.tokens, tokenizer.ggml.model) from GGUF metadata, with a clear error.

    The vocabulary is checked first (bytesup.model.vocabulary: strings, none twice, bounded), so
    a corrupt one is refused in one line instead of finding the wrong token."""
    tokens, model = metadata.get("tokenizer.ggml.tokens"), metadata.get("tokenizer.ggml.model")
    if not isinstance(tokens, Sequence) or isinstance(tokens, str) or not tokens:
        raise TokenError("metadata has no tokenizer.ggml.tokens list; re-run the extract stage")
    if not isinstance(model, str):
        raise TokenError("metadata has no tokenizer.ggml.model; cannot tell how a leading space is written")
    if id(tokens) not in _CHECKED or _CHECKED[id(tokens)][0] is not tokens:
        if len(_CHECKED) >= 4:
            _CHECKED.clear()
        _CHECKED[id(tokens)] = (tokens, check_tokens(metadata))  # held, so the id is not reused
    return _CHECKED[id(tokens)][1], model


def lookup(metadata: Mapping, text: str) -> tuple[int, str]:
    """(token id, vocabulary spelling) of ``text``, using the tokenizer described in ``metadata``."""
    vocab, model = tokenizer_of(metadata)
    return token_id(vocab, text, model), vocab_form(text, model)

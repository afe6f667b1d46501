"""Text to token ids and back, from a GGUF file's own ``tokenizer.ggml.*`` metadata, as llama.cpp does.

A GGUF carries its tokenizer as data: the vocabulary (``tokens``, position = id), a type per
token (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), and either the BPE
``merges`` (byte-level BPE, ``model = gpt2``) or a ``score`` per piece (SentencePiece-style,
``model = llama``). Encoding goes in four steps, as in llama.cpp's ``llama_vocab::tokenize``:

    1. cut special tokens out whole        "<|im_start|>user"  -> [<|im_start|>] "user"
    2. pre-tokenize the text between them  "Hello world"       -> "Hello" " world"      (BPE only)
    3. spell each piece in vocabulary form " world"            -> "Ġworld" / "▁world"
    4. merge symbols until no rule applies "Ġ w o r l d"       -> "Ġworld" -> id 905

Byte-level BPE merges the adjacent pair with the lowest rank (its line in ``merges``);
SentencePiece merges the adjacent pair whose concatenation is a piece with the highest score.
Step 1 is bytesup.model.special_tokens, step 2 bytesup.model.pretokenizers.

Followed: tokenizer.ggml.model 'gpt2' with every tokenizer.ggml.pre llama.cpp knows but
'whitespace', 'llama' (SentencePiece) and 'gemma4' (SentencePiece-style BPE). Refused in one
line: 'bert' (WordPiece), 't5' (unigram), 'rwkv', 'plamo2' and the rest of REFUSED_MODELS.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from bytesup.gguf.file import GGUFFile
from bytesup.model import special_tokens
from bytesup.model.pretokenizers import PRE_TOKENIZERS, PreTokenizer, pre_tokenizer, split
from bytesup.model.tokens import SENTENCEPIECE_SPACE, gpt2_byte_to_char
from bytesup.model.vocabulary import TokenizerError, UnsupportedTokenizerError, read_vocabulary, shown

__all__ = ["Tokenizer", "TokenizerError", "UnsupportedTokenizerError", "pre_tokenize", "PRE_TOKENIZERS"]

# Token types (llama.cpp's llama_token_type / gguf-py's TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

TOKENIZER_MODELS = ("gpt2", "llama", "gemma4")
REFUSED_MODELS = {
    "bert": "WordPiece, for BERT-style embedding models",
    "t5": "unigram, for T5-style encoder-decoders",
    "rwkv": "RWKV's trie tokenizer",
    "plamo2": "PLaMo 2's Aho-Corasick tokenizer",
    "whitespace": "a whitespace tokenizer for embedding models",
    "hybriddna": "a DNA k-mer tokenizer",
    "no_vocab": "no vocabulary at all",
    "none": "no vocabulary at all",
}
WORD_CACHE = 200_000  # words remembered per tokenizer (a prompt repeats its words)


def pre_tokenize(text: str, pre: PreTokenizer | str | Iterable[str]) -> list[str]:
    """``text`` cut into words by a pre-tokenizer (its tokenizer.ggml.pre name, or patterns)."""
    return split(text, PRE_TOKENIZERS[pre] if isinstance(pre, str) else pre)


@dataclass
class Tokenizer:
    """A tokenizer rebuilt from GGUF metadata. Build it with :meth:`from_metadata`."""

    model: str  # "gpt2" (byte-level BPE), "llama" (SentencePiece-style) or "gemma4"
    pre: str  # tokenizer.ggml.pre (BPE only; 'default' when absent)
    tokens: list[str]
    token_types: list[int]
    scores: list[float]
    merge_ranks: dict[tuple[str, str], int]
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    source: str = "<metadata>"
    ids: dict[str, int] = field(default_factory=dict, repr=False)
    attrs: list[int] = field(default_factory=list, repr=False)  # llama.cpp's token attributes
    pretokenizer: PreTokenizer | None = None
    _special_order: list[int] = field(default_factory=list, repr=False)
    _word_cache: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    # --- building -----------------------------------------------------------------------------
    @classmethod
    def from_metadata(cls, metadata: Mapping, source: str = "<metadata>", types: Mapping | None = None) -> Tokenizer:
        """Read ``tokenizer.ggml.*`` from a GGUF metadata mapping (``GGUFFile(path).metadata``);
        ``types`` (``GGUFFile.metadata_types``) also checks each key's stored type."""
        model = metadata.get("tokenizer.ggml.model")
        if not isinstance(model, str):
            raise TokenizerError(f"{source}: tokenizer.ggml.model is {shown(model)}, not a tokenizer name")
        if model in REFUSED_MODELS:
            raise UnsupportedTokenizerError(
                f"{source}: tokenizer.ggml.model = {shown(model)} ({REFUSED_MODELS[model]}) is not followed by the "
                f"lessons; they follow {', '.join(TOKENIZER_MODELS)}: use a GGUF of a text-generation model"
            )
        if model not in TOKENIZER_MODELS:
            raise UnsupportedTokenizerError(
                f"{source}: tokenizer.ggml.model = {shown(model)} is not supported; "
                f"supported: {', '.join(TOKENIZER_MODELS)}"
            )
        vocab = read_vocabulary(metadata, source, types)
        spm = model == "llama"
        pre = None if spm else pre_tokenizer("gemma4" if model == "gemma4" else vocab.pre, source)
        if pre is not None and not vocab.merges and pre.name != "kimi-k2":
            raise TokenizerError(f"{source}: tokenizer.ggml.merges is missing; a byte-level BPE file needs it")
        ranks: dict[tuple[str, str], int] = {}
        for rank, pair in enumerate(vocab.merges):
            ranks.setdefault(pair, rank)  # a repeated merge keeps its first rank, as in llama.cpp

        def special(key: str, spm_default: int | None = None) -> int | None:
            if key in vocab.special:
                return vocab.special[key]
            if spm and spm_default is not None and spm_default < len(vocab.tokens):
                return spm_default  # llama.cpp's defaults for a SentencePiece file
            return None

        gemma4 = pre is not None and pre.kind == "gemma4"  # llama.cpp adds BOS there whatever the file says
        add_bos = vocab.flags.get("add_bos_token", spm or pre.add_bos) or gemma4
        arch = metadata.get("general.architecture")
        attrs = special_tokens.attributes(vocab, vocab.pre, arch if isinstance(arch, str) else "")
        tok = cls(
            model=model,
            pre="default" if spm else pre.name,
            tokens=vocab.tokens,
            token_types=vocab.token_types,
            scores=vocab.scores,
            merge_ranks=ranks,
            bos_id=special("bos_token_id", 1),
            eos_id=special("eos_token_id", 2),
            unk_id=special("unknown_token_id", 0),
            pad_id=special("padding_token_id"),
            add_bos=add_bos,
            add_eos=vocab.flags.get("add_eos_token", False),
            add_space_prefix=vocab.flags.get("add_space_prefix", spm),
            source=source,
            ids=vocab.ids,
            attrs=attrs,
            pretokenizer=pre,
            _special_order=special_tokens.special_order(vocab.tokens, attrs),
        )
        for flag, key in (("add_bos", "bos_id"), ("add_eos", "eos_id")):
            if getattr(tok, flag) and getattr(tok, key) is None:
                raise TokenizerError(
                    f"{source}: {flag}_token is true but tokenizer.ggml.{key[:3]}_token_id is missing; "
                    "the file is incomplete"
                )
        return tok

    @classmethod
    def from_gguf(cls, path) -> Tokenizer:
        """The tokenizer stored in the GGUF file at ``path``."""
        f = GGUFFile(path)
        return cls.from_metadata(f.metadata, source=Path(path).name, types=f.metadata_types)

    def __len__(self) -> int:
        return len(self.tokens)

    # --- encoding -----------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool | None = None, *, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``. add_special: add BOS/EOS as the file asks (None or True), or never
        (False). parse_special: control tokens written in the text are those tokens (user-defined
        tokens always are, as in llama.cpp)."""
        if add_special is None:
            add_special = True
        text = _valid(text)
        ids: list[int] = []
        if add_special and self.add_bos:
            ids.append(self.bos_id)
        prev_special = True  # SentencePiece puts its space prefix first and after each special token
        fragments = special_tokens.partition(text, self._special_order, self.tokens, self.attrs, parse_special)
        for piece in fragments:
            if isinstance(piece, int):
                ids.append(piece)
                prev_special = True
            elif self.pretokenizer is not None:
                ids.extend(self._encode_bpe(piece))
            else:
                ids.extend(self._encode_spm(piece, prefix=self.add_space_prefix and prev_special))
                prev_special = False
        if add_special and self.add_eos:
            ids.append(self.eos_id)
        return ids

    # byte-level BPE --------------------------------------------------------------------------
    def _encode_bpe(self, text: str) -> list[int]:
        pre = self.pretokenizer
        if not pre.byte_encode:
            text = text.replace(" ", SENTENCEPIECE_SPACE)  # gemma4: spaces are '▁', bytes stay raw UTF-8
        table = gpt2_byte_to_char()
        out: list[int] = []
        for word in split(text, pre):
            cached = self._word_cache.get(word)
            if cached is None:
                spelled = "".join(table[b] for b in word.encode("utf-8")) if pre.byte_encode else word  # step 3
                cached = tuple(self._bpe_word(spelled))
                if len(self._word_cache) < WORD_CACHE:
                    self._word_cache[word] = cached
            out.extend(cached)
        return out

    def _bpe_word(self, word: str) -> list[int]:
        """Merge the adjacent pair with the lowest rank (leftmost first) until none is a merge
        (llama.cpp's llm_tokenizer_bpe_session, with its queue: n log n in the word's length)."""
        pre = self.pretokenizer
        if word in self.ids and (pre.ignore_merges or (pre.kind == "gemma4" and not word.strip("\n"))):
            return [self.ids[word]]  # a whole word that is a token (Llama 3's ignore_merges; gemma4's newlines)
        ranks = self.merge_ranks
        symbols = merge_pairs(list(word), lambda left, right: ranks.get((left, right)))
        out = []
        for s in symbols:
            if s in self.ids:
                out.append(self.ids[s])
                continue
            for b in s.encode("utf-8"):  # not a token: its bytes one by one, as single-byte tokens
                if pre.byte_encode:
                    tid = self.ids.get(chr(b)) if b < 0x80 else None
                else:
                    tid = self.ids.get(f"<0x{b:02X}>")
                if tid is not None:  # a byte the vocabulary lacks is dropped, as in llama.cpp
                    out.append(tid)
        return out

    # SentencePiece-style ---------------------------------------------------------------------
    def _encode_spm(self, text: str, *, prefix: bool) -> list[int]:
        """llama.cpp's llm_tokenizer_spm: characters, then best-scoring merges, then byte fallback."""
        text = (" " + text if prefix else text).replace(" ", SENTENCEPIECE_SPACE)
        ids, scores = self.ids, self.scores

        def priority(left: str, right: str) -> float | None:  # a pair that makes a piece: highest score first
            tid = ids.get(left + right)
            return None if tid is None else -scores[tid]

        symbols = merge_pairs(list(text), priority)
        out: list[int] = []
        for piece in symbols:
            if piece in ids:  # every merge made a piece; only single characters can be missing
                out.append(ids[piece])
                continue
            for b in piece.encode("utf-8"):  # byte fallback: <0xXX>, else the byte itself, else <unk>
                tid = ids.get(f"<0x{b:02X}>")
                if tid is None and b < 0x80:
                    tid = ids.get(chr(b))
                if tid is None:
                    tid = self.unk_id  # where llama.cpp would stop with an exception
                if tid is not None:
                    out.append(tid)
        return out

    # --- decoding -----------------------------------------------------------------------------
    def _check_id(self, i: int) -> None:
        if not 0 <= int(i) < len(self.tokens):
            raise TokenizerError(f"{self.source}: token id {i} is outside the vocabulary of {len(self.tokens)} tokens")

    def token_bytes(self, i: int) -> bytes:
        """The bytes one token stands for."""
        self._check_id(i)
        text, kind = self.tokens[i], self.token_types[i]
        if kind in (CONTROL, USER_DEFINED, UNKNOWN, UNUSED):
            return text.encode("utf-8")
        if self.pretokenizer is not None and self.pretokenizer.byte_encode:
            back = _char_to_byte()
            if all(c in back for c in text):
                return bytes(back[c] for c in text)
            return text.encode("utf-8")
        if kind == BYTE or (text.startswith("<0x") and text.endswith(">") and len(text) == 6):
            try:
                return bytes([int(text[3:5], 16)])
            except ValueError:
                pass
        return text.replace(SENTENCEPIECE_SPACE, " ").encode("utf-8")

    def is_special(self, i: int) -> bool:
        return self.token_types[i] in (CONTROL, UNKNOWN, UNUSED) or i in (self.bos_id, self.eos_id)

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of ``ids``: their bytes joined, then UTF-8 decoded (errors replaced)."""
        ids = [int(i) for i in ids]
        chunks = []
        first_text = True
        for i in ids:
            self._check_id(i)
            if skip_special and self.is_special(i):
                continue
            piece = self.token_bytes(i)
            if self.model == "llama" and self.add_space_prefix and first_text and self.token_types[i] != CONTROL:
                if piece.startswith(b" "):  # the space SentencePiece put in front of the text
                    piece = piece[1:]
                first_text = False
            chunks.append(piece)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def token_text(self, i: int) -> str:
        """One token shown readably: its text, or '<0xE2>'-style for a lone partial byte."""
        piece = self.token_bytes(i)
        try:
            return piece.decode("utf-8")
        except UnicodeDecodeError:
            return "".join(f"<0x{b:02X}>" for b in piece)


def merge_pairs(symbols: list[str], priority) -> list[str]:
    """Merge adjacent symbols, the pair with the smallest ``priority(left, right)`` first (leftmost
    among equals), until no pair has one (None): llama.cpp's work queue, n log n in the symbols."""
    nxt = list(range(1, len(symbols))) + [-1]
    prv = list(range(-1, len(symbols) - 1))
    heap: list[tuple] = []

    def push(left: int, right: int) -> None:
        if left >= 0 and right >= 0:
            key = priority(symbols[left], symbols[right])
            if key is not None:
                heapq.heappush(heap, (key, left, right, symbols[left] + symbols[right]))

    for i in range(len(symbols) - 1):
        push(i, i + 1)
    while heap:
        _, left, right, joined = heapq.heappop(heap)
        if not symbols[left] or not symbols[right] or symbols[left] + symbols[right] != joined:
            continue  # stale: one side was merged since
        symbols[left], symbols[right] = joined, ""  # the right one joins the left
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        push(prv[left], left)
        push(left, nxt[left])
    return [s for s in symbols if s]  # merged-away symbols are empty; the rest are in order


def _valid(text: str) -> str:
    """Lone surrogates (not UTF-8) become U+FFFD, as llama.cpp reads an invalid byte."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text)
    return text


@lru_cache(maxsize=1)
def _char_to_byte() -> dict[str, int]:
    return {c: b for b, c in gpt2_byte_to_char().items()}

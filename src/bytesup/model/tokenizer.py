"""Text to token ids and back, from a GGUF file's own ``tokenizer.ggml.*`` metadata.

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
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import regex

from bytesup.errors import BytesupError, quote
from bytesup.gguf.file import GGUFFile
from bytesup.model.tokens import SENTENCEPIECE_SPACE, gpt2_byte_to_char

# Token types (llama.cpp's llama_token_type / gguf-py's TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# --- pre-tokenizer regexes -------------------------------------------------------------------
# Copied from llama.cpp src/llama-vocab.cpp, llm_tokenizer_bpe's constructor (the copy vendored
# by llama-cpp-python, llama.cpp commit 0c1e570): each entry is a list of regexes applied in
# sequence, every regex cutting each piece of the previous one into matches AND the gaps between
# them (the "isolated" split of Hugging Face tokenizers).

# GPT-2's own regex (LLAMA_VOCAB_PRE_TYPE_GPT2, line ~376): contractions, words with one optional
# leading space, numbers, punctuation runs, whitespace not followed by a non-space.
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"

# Llama 3 (LLAMA_VOCAB_PRE_TYPE_LLAMA3, line ~288): case-insensitive contractions, a letter run
# with one non-letter prefix, digits in groups of at most three, newline handling.
LLAMA3_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    # llama.cpp's fallback for BPE files without a known pre-tokenizer (line ~561).
    "default": (r"[\p{P}\$\+<=>\^~\|]+", GPT2_SPLIT, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "gpt2": (GPT2_SPLIT,),
    # SmolLM (line ~362, shared with starcoder): every digit alone first, then GPT-2's regex.
    # This is the model's own tokenizer.json: Sequence[Digits(individual_digits), ByteLevel].
    "smollm": (r"\p{N}", GPT2_SPLIT),
    "llama-bpe": (LLAMA3_SPLIT,),
    "llama3": (LLAMA3_SPLIT,),
    "llama-v3": (LLAMA3_SPLIT,),
    # deepseek-coder (line ~343): newlines alone, letters, punctuation, CJK runs, single digits.
    "deepseek-coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"),
}
# Llama 3 files keep a whole pre-token that is itself a vocabulary entry (llama.cpp ignore_merges).
IGNORE_MERGES = {"llama-bpe", "llama3", "llama-v3"}
# When a file lacks the add_bos_token key, llama.cpp adds BOS for SentencePiece and Llama 3.
ADD_BOS_BY_DEFAULT = {"llama-bpe", "llama3", "llama-v3"}

TOKENIZER_MODELS = ("gpt2", "llama")


class UnsupportedTokenizerError(BytesupError, ValueError):
    """A tokenizer.ggml.model or tokenizer.ggml.pre this package does not implement."""


class TokenizerError(BytesupError, ValueError):
    """Tokenizer metadata that is missing or malformed, or an id outside the vocabulary."""


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> regex.Pattern:
    return regex.compile(pattern)


def split_isolated(pattern: str, text: str) -> list[str]:
    """Cut ``text`` into the matches of ``pattern`` and the stretches between them, in order."""
    pieces, start = [], 0
    for match in _compiled(pattern).finditer(text):
        if match.start() > start:
            pieces.append(text[start : match.start()])
        if match.end() > match.start():
            pieces.append(match.group())
        start = match.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def pre_tokenize(text: str, patterns: Sequence[str]) -> list[str]:
    """Apply each regex in turn to every piece the previous ones left."""
    pieces = [text] if text else []
    for pattern in patterns:
        pieces = [part for piece in pieces for part in split_isolated(pattern, piece)]
    return pieces


@dataclass
class Tokenizer:
    """A tokenizer rebuilt from GGUF metadata. Build it with :meth:`from_metadata`."""

    model: str  # "gpt2" (byte-level BPE) or "llama" (SentencePiece-style)
    pre: str  # pre-tokenizer name (BPE only)
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
    _word_cache: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    # --- building -----------------------------------------------------------------------------
    @classmethod
    def from_metadata(cls, metadata: Mapping, source: str = "<metadata>") -> Tokenizer:
        """Read ``tokenizer.ggml.*`` from a GGUF metadata mapping (``GGUFFile(path).metadata``)."""
        model = metadata.get("tokenizer.ggml.model")
        if model not in TOKENIZER_MODELS:
            raise UnsupportedTokenizerError(
                f"{source}: tokenizer.ggml.model = {quote(model)} is not supported; supported: {', '.join(TOKENIZER_MODELS)}"
            )
        tokens = metadata.get("tokenizer.ggml.tokens")
        if not isinstance(tokens, Sequence) or isinstance(tokens, str) or not tokens:
            raise TokenizerError(f"{source}: tokenizer.ggml.tokens is missing or empty; use a GGUF with its vocabulary")
        tokens = [str(t) for t in tokens]
        n = len(tokens)
        pre = metadata.get("tokenizer.ggml.pre", "default") if model == "gpt2" else "default"
        if model == "gpt2" and pre not in PRE_TOKENIZERS:
            raise UnsupportedTokenizerError(
                f"{source}: tokenizer.ggml.pre = {quote(pre)} is not supported; "
                f"supported: {', '.join(sorted(PRE_TOKENIZERS))}"
            )
        types = list(metadata.get("tokenizer.ggml.token_type") or [NORMAL] * n)
        scores = [float(s) for s in metadata.get("tokenizer.ggml.scores") or [0.0] * n]
        if len(types) != n or len(scores) != n:
            raise TokenizerError(
                f"{source}: tokenizer.ggml.token_type/scores have {len(types)}/{len(scores)} entries "
                f"for {n} tokens; the file is inconsistent"
            )
        ranks: dict[tuple[str, str], int] = {}
        if model == "gpt2":
            merges = metadata.get("tokenizer.ggml.merges")
            if not merges:
                raise TokenizerError(f"{source}: tokenizer.ggml.merges is missing; a byte-level BPE file needs it")
            for rank, merge in enumerate(merges):
                left, sep, right = str(merge).partition(" ")
                if not sep:
                    raise TokenizerError(
                        f"{source}: tokenizer.ggml.merges[{rank}] = {quote(merge)} is not 'left right'"
                    )
                ranks.setdefault((left, right), rank)

        def special(key: str) -> int | None:
            value = metadata.get(f"tokenizer.ggml.{key}")
            if value is None:
                return None
            if not isinstance(value, int) or not 0 <= value < n:
                raise TokenizerError(f"{source}: tokenizer.ggml.{key} = {quote(value)} is not an id below {n}")
            return value

        default_bos = model == "llama" or pre in ADD_BOS_BY_DEFAULT
        tok = cls(
            model=model,
            pre=pre,
            tokens=tokens,
            token_types=[int(t) for t in types],
            scores=scores,
            merge_ranks=ranks,
            bos_id=special("bos_token_id"),
            eos_id=special("eos_token_id"),
            unk_id=special("unknown_token_id"),
            pad_id=special("padding_token_id"),
            add_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", default_bos)),
            add_eos=bool(metadata.get("tokenizer.ggml.add_eos_token", False)),
            add_space_prefix=bool(metadata.get("tokenizer.ggml.add_space_prefix", model == "llama")),
            source=source,
        )
        for i, t in enumerate(tokens):  # the first of duplicate spellings wins, as in llama.cpp
            tok.ids.setdefault(t, i)
        if tok.add_bos and tok.bos_id is None:
            raise TokenizerError(f"{source}: add_bos_token is true but tokenizer.ggml.bos_token_id is missing")
        return tok

    @classmethod
    def from_gguf(cls, path) -> Tokenizer:
        """The tokenizer stored in the GGUF file at ``path``."""
        return cls.from_metadata(GGUFFile(path).metadata, source=Path(path).name)

    def __len__(self) -> int:
        return len(self.tokens)

    # --- step 1: special tokens, matched whole ----------------------------------------------
    @property
    def special_pattern(self) -> regex.Pattern | None:
        """Control, user-defined and unknown tokens (llama.cpp's cache_special_tokens), longest
        first so the longest match wins."""
        if not hasattr(self, "_special_re"):
            kinds = (CONTROL, USER_DEFINED, UNKNOWN)
            texts = {t for t, k in zip(self.tokens, self.token_types) if k in kinds and t}
            ordered = sorted(texts, key=lambda t: (-len(t), t))
            self._special_re = regex.compile("|".join(regex.escape(t) for t in ordered)) if ordered else None
        return self._special_re

    def _fragments(self, text: str, parse_special: bool) -> list[str | int]:
        """Text cut into plain strings and the ids of special tokens found whole in it."""
        pattern = self.special_pattern if parse_special else None
        if pattern is None:
            return [text] if text else []
        out: list[str | int] = []
        start = 0
        for match in pattern.finditer(text):
            if match.start() > start:
                out.append(text[start : match.start()])
            out.append(self.ids[match.group()])
            start = match.end()
        if start < len(text):
            out.append(text[start:])
        return out

    # --- encoding -----------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool | None = None, *, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``. add_special: add BOS/EOS as the file asks (None = as the file asks,
        True = the same, False = never). parse_special: treat special-token text as those tokens."""
        if add_special is None:
            add_special = True
        ids: list[int] = []
        if add_special and self.add_bos:
            ids.append(self.bos_id)
        prev_special = True  # SentencePiece puts its space prefix after BOS and after specials
        for piece in self._fragments(text, parse_special):
            if isinstance(piece, int):
                ids.append(piece)
                prev_special = True
            elif self.model == "gpt2":
                ids.extend(self._encode_bpe(piece))
            else:
                ids.extend(self._encode_spm(piece, prefix=self.add_space_prefix and prev_special))
                prev_special = False
        if add_special and self.add_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    # byte-level BPE --------------------------------------------------------------------------
    def _encode_bpe(self, text: str) -> list[int]:
        out: list[int] = []
        table = gpt2_byte_to_char()
        for word in pre_tokenize(text, PRE_TOKENIZERS[self.pre]):
            cached = self._word_cache.get(word)
            if cached is None:
                spelled = "".join(table[b] for b in word.encode("utf-8"))  # step 3
                cached = tuple(self._bpe_word(spelled))
                if len(self._word_cache) < 200_000:
                    self._word_cache[word] = cached
            out.extend(cached)
        return out

    def _bpe_word(self, word: str) -> list[int]:
        """Merge the adjacent pair with the lowest rank (leftmost first) until none is a merge."""
        if self.pre in IGNORE_MERGES and word in self.ids:
            return [self.ids[word]]
        symbols = list(word)
        ranks = self.merge_ranks
        while len(symbols) > 1:
            best, best_rank = -1, None
            for i in range(len(symbols) - 1):
                rank = ranks.get((symbols[i], symbols[i + 1]))
                if rank is not None and (best_rank is None or rank < best_rank):
                    best, best_rank = i, rank
            if best < 0:
                break
            symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
        out = []
        for s in symbols:
            if s in self.ids:
                out.append(self.ids[s])
            else:  # a merge result or byte absent from the vocabulary: its bytes one by one;
                out.extend(self.ids[c] for c in s if c in self.ids)  # absent bytes are dropped, as HF does
        return out

    # SentencePiece-style ---------------------------------------------------------------------
    def _encode_spm(self, text: str, *, prefix: bool) -> list[int]:
        """llama.cpp's llm_tokenizer_spm: characters, then best-scoring merges, then byte fallback."""
        text = (" " + text if prefix else text).replace(" ", SENTENCEPIECE_SPACE)
        symbols = list(text)  # one symbol per character; merged ones grow, emptied ones are ""
        nxt = list(range(1, len(symbols))) + [-1]
        prv = list(range(-1, len(symbols) - 1))
        heap: list[tuple[float, int, int, str]] = []
        made_from: dict[str, tuple[str, str]] = {}

        def try_pair(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            joined = symbols[left] + symbols[right]
            tid = self.ids.get(joined)
            if tid is None:
                return
            heapq.heappush(heap, (-self.scores[tid], left, right, joined))  # highest score, then leftmost
            made_from[joined] = (symbols[left], symbols[right])

        for i in range(len(symbols) - 1):
            try_pair(i, i + 1)
        while heap:
            _, left, right, joined = heapq.heappop(heap)
            if not symbols[left] or not symbols[right] or symbols[left] + symbols[right] != joined:
                continue  # stale: one side was merged since
            symbols[left], symbols[right] = joined, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            try_pair(prv[left], left)
            try_pair(left, nxt[left])

        out: list[int] = []

        def resegment(piece: str) -> None:
            if piece in self.ids:
                out.append(self.ids[piece])
            elif piece in made_from:
                resegment(made_from[piece][0])
                resegment(made_from[piece][1])
            else:
                for b in piece.encode("utf-8"):  # byte fallback: <0xXX>
                    tid = self.ids.get(f"<0x{b:02X}>")
                    if tid is None:
                        tid = self.unk_id
                    if tid is not None:
                        out.append(tid)

        i = 0 if symbols else -1
        while i != -1:
            resegment(symbols[i])
            i = nxt[i]
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
        if self.model == "gpt2":
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


@lru_cache(maxsize=1)
def _char_to_byte() -> dict[str, int]:
    return {c: b for b, c in gpt2_byte_to_char().items()}

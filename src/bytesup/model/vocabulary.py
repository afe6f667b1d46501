"""A GGUF's vocabulary (``tokenizer.ggml.*``) read and checked before anything tokenizes with it.

A vocabulary comes from a stranger's file, so everything is checked, bounded and refused in one
line when wrong (STYLE §19), where llama.cpp would abort, warn or silently pick something:

    tokens        an array of strings, one id each: no string twice (llama.cpp asserts that), no
                  more than MAX_TOKENS, none longer than MAX_TOKEN_CHARS; an empty string becomes
                  '[EMPTY_<id>]', as llama.cpp names it
    token_type    one known type per token (0 undefined, 1 normal, 2 unknown, 3 control,
                  4 user-defined, 5 unused, 6 byte)
    scores        one finite number per token
    merges        'left right' strings (byte-level BPE), no more than MAX_MERGES
    special ids   bos/eos/unk/pad/... ids inside the vocabulary (llama.cpp warns and falls back)
    flags         add_bos_token, add_eos_token, add_space_prefix: booleans

``types`` (GGUFFile.metadata_types, or metadata.json's "types") makes the check exact: tokens
stored as INT32, or scores as strings, are named by their GGUF type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bytesup.errors import BytesupError, quote

MAX_TOKENS = 1 << 20  # four times the largest vocabularies in use (Gemma's 262,144)
MAX_TOKEN_CHARS = 1 << 16
MAX_MERGES = 1 << 22
FLOAT32_MAX = 3.4028234663852886e38  # a score is a FLOAT32 (or INT32)
TOKEN_TYPES = range(0, 7)  # llama.cpp's llama_token_type, 0 (undefined) to 6 (byte)
SPECIAL_KEYS = (
    "bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id", "seperator_token_id",
    "eot_token_id", "eom_token_id", "fim_pre_token_id", "fim_suf_token_id", "fim_mid_token_id",
    "fim_pad_token_id", "fim_rep_token_id", "fim_sep_token_id",
    "prefix_token_id", "suffix_token_id", "middle_token_id",  # the older names of fim_pre/suf/mid
)  # fmt: skip
FLAG_KEYS = ("add_bos_token", "add_eos_token", "add_space_prefix")


class TokenizerError(BytesupError, ValueError):
    """Tokenizer metadata that is missing or malformed, or an id outside the vocabulary."""


class UnsupportedTokenizerError(BytesupError, ValueError):
    """A tokenizer.ggml.model or tokenizer.ggml.pre this package does not implement."""


def shown(value, limit: int = 80) -> str:
    """A value as an error line quotes it: bytesup.errors.quote (repr, escaped, cut with its full length
    given, a long list cut before its repr is built), at ``limit`` characters."""
    return quote(value, limit)


@dataclass
class Vocabulary:
    """The checked ``tokenizer.ggml.*`` keys of one file."""

    model: str
    pre: str | None
    tokens: list[str]
    token_types: list[int]
    scores: list[float]
    merges: list[tuple[str, str]]
    special: dict[str, int]  # key (without 'tokenizer.ggml.') -> id, only the keys present
    flags: dict[str, bool]  # add_bos_token, ... only the keys present
    name: str = ""  # general.name (llama.cpp keys one quirk on it)
    source: str = "<metadata>"
    ids: dict[str, int] = field(default_factory=dict, repr=False)


def _kind(value) -> str:
    return "bool" if isinstance(value, bool) else type(value).__name__


def _array(metadata: Mapping, key: str, types: Mapping | None, source: str, allowed: tuple[str, ...]):
    """The array at ``key`` (None when absent), refused unless it is a list of one of ``allowed``."""
    value = metadata.get(key)
    if value is None:
        return None
    stored = (types or {}).get(key)
    if stored is not None and stored not in {f"ARRAY[{a}]" for a in allowed}:
        raise TokenizerError(
            f"{source}: {key} is stored as {shown(stored)}; llama.cpp reads it only as "
            f"{' or '.join(f'ARRAY[{a}]' for a in allowed)}: the file is malformed, convert the model again"
        )
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TokenizerError(f"{source}: {key} is a {_kind(value)}, not an array: the file is malformed")
    return value


def _same_length(key: str, values: Sequence, n: int, source: str) -> None:
    if len(values) != n:
        raise TokenizerError(f"{source}: {key} has {len(values)} entries for {n} tokens; the file is inconsistent")


def check_tokens(metadata: Mapping, source: str = "<metadata>", types: Mapping | None = None) -> list[str]:
    """``tokenizer.ggml.tokens`` checked: bounded, all strings, none twice (empty ones renamed)."""
    key = "tokenizer.ggml.tokens"
    tokens = _array(metadata, key, types, source, ("STRING",))
    if not tokens:
        raise TokenizerError(f"{source}: {key} is missing or empty; use a GGUF with its vocabulary")
    if len(tokens) > MAX_TOKENS:
        raise TokenizerError(
            f"{source}: {key} claims {len(tokens):,} tokens, over this package's bound of {MAX_TOKENS:,}; refusing it"
        )
    out = list(tokens)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TokenizerError(
                f"{source}: {key}[{i}] is the {_kind(t)} {shown(t)}, not a string: the vocabulary must be "
                "an array of strings (ARRAY[STRING]); the file is malformed"
            )
        if len(t) > MAX_TOKEN_CHARS:
            raise TokenizerError(
                f"{source}: {key}[{i}] is {len(t):,} characters long, over the bound of {MAX_TOKEN_CHARS:,}"
            )
        if not t:
            out[i] = f"[EMPTY_{i}]"  # llama.cpp's name for an empty token
    if len(set(out)) != len(out):
        first: dict[str, int] = {}
        for i, t in enumerate(out):
            if t in first:
                repeats = len(out) - len(set(out))
                raise TokenizerError(
                    f"{source}: {key}: {shown(t)} is token {first[t]} and token {i} ({repeats:,} of the "
                    f"{len(out):,} tokens repeat one before them); each text must have one id, the file is corrupt"
                )
            first[t] = i
    return out


def read_vocabulary(metadata: Mapping, source: str = "<metadata>", types: Mapping | None = None) -> Vocabulary:
    """Every ``tokenizer.ggml.*`` key the tokenizer reads, checked; one line for the first fault."""
    model = metadata.get("tokenizer.ggml.model")
    if not isinstance(model, str):
        raise TokenizerError(f"{source}: tokenizer.ggml.model is {shown(model)}, not a tokenizer name")
    pre = metadata.get("tokenizer.ggml.pre")
    if pre is not None and not isinstance(pre, str):
        raise TokenizerError(f"{source}: tokenizer.ggml.pre is {shown(pre)}, not a pre-tokenizer name")
    tokens = check_tokens(metadata, source, types)
    n = len(tokens)

    key = "tokenizer.ggml.token_type"
    token_types = _array(metadata, key, types, source, ("INT32",))
    if token_types is None:
        token_types = [1] * n
    _same_length(key, token_types, n, source)
    for i, t in enumerate(token_types):
        if isinstance(t, bool) or not isinstance(t, int) or t not in TOKEN_TYPES:
            raise TokenizerError(
                f"{source}: {key}[{i}] = {shown(t)} is not a token type (0 to 6); the file is malformed"
            )

    key = "tokenizer.ggml.scores"
    scores = _array(metadata, key, types, source, ("FLOAT32", "INT32"))
    if scores is None:
        scores = [0.0] * n
    _same_length(key, scores, n, source)
    for i, s in enumerate(scores):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not abs(s) <= FLOAT32_MAX:  # NaN fails too
            raise TokenizerError(f"{source}: {key}[{i}] = {shown(s)} is not a finite number; the file is malformed")

    key = "tokenizer.ggml.merges"
    raw_merges = _array(metadata, key, types, source, ("STRING",)) or []
    if len(raw_merges) > MAX_MERGES:
        raise TokenizerError(f"{source}: {key} has {len(raw_merges):,} entries, over the bound of {MAX_MERGES:,}")
    merges = []
    for i, m in enumerate(raw_merges):
        cut = m.find(" ", 1) if isinstance(m, str) else -1  # llama.cpp splits at the first space after the start
        if cut < 0:
            raise TokenizerError(f"{source}: {key}[{i}] = {shown(m)} is not 'left right'; the file is malformed")
        merges.append((m[:cut], m[cut + 1 :]))

    special = {}
    for name in SPECIAL_KEYS:
        value = metadata.get(f"tokenizer.ggml.{name}")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
            raise TokenizerError(
                f"{source}: tokenizer.ggml.{name} = {shown(value)} is not an id below {n:,}; the file is malformed"
            )
        special[name] = value
    flags = {}
    for name in FLAG_KEYS:
        value = metadata.get(f"tokenizer.ggml.{name}")
        if value is not None:
            if not isinstance(value, bool):
                raise TokenizerError(f"{source}: tokenizer.ggml.{name} = {shown(value)} is not true or false")
            flags[name] = value
    general_name = metadata.get("general.name")
    vocab = Vocabulary(
        model=model,
        pre=pre,
        tokens=tokens,
        token_types=list(token_types),
        scores=[float(s) for s in scores],
        merges=merges,
        special=special,
        flags=flags,
        name=general_name if isinstance(general_name, str) else "",
        source=source,
    )
    vocab.ids = {t: i for i, t in enumerate(tokens)}
    return vocab

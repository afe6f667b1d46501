"""Byte-level BPE's first step: cutting text into words, as llama.cpp does for each ``tokenizer.ggml.pre``.

A byte-level BPE never merges across a word boundary, so where a pre-tokenizer cuts decides the
ids. Each name llama.cpp knows (its src/llama-vocab.cpp as vendored by llama-cpp-python 0.3.36,
``llama_vocab::impl::load``) maps to a list of regexes (``llm_tokenizer_bpe``'s constructor),
applied in turn: every regex cuts each piece the previous ones left into its matches AND the
stretches between them.

    "Hello world's 12345!!"  --gpt-2-->  "Hello" " world" "'s" " 12345" "!!"
                             --smollm--> "Hello" " world" "'s" " " "1" "2" "3" "4" "5" "!!"
                             --llama3--> "Hello" " world" "'s" " " "123" "45" "!!"

The patterns here are llama.cpp's own, and so is the way they run (``unicode_regex_split``):
C++ std::regex on the "collapsed" text (bytesup.model.codepoints), with ASCII \\s and \\d, and
``$`` only at the end; a pattern without \\p{..} runs on the text itself with non-ASCII white
space seen as a vertical tab. Where llama.cpp has hand-written code instead of a regex (Kimi-K2,
AFMoE's digit groups) it is ported below, line for line.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from bytesup.errors import quote
from bytesup.model.codepoints import (
    LETTER,
    NUMBER,
    WHITESPACE,
    collapse_pattern,
    collapse_text,
    flags,
    is_han,
    uses_unicode_classes,
    whitespace_as_vt,
)
from bytesup.model.vocabulary import UnsupportedTokenizerError

if TYPE_CHECKING:
    import regex

# --- llama.cpp's split patterns ---------------------------------------------------------------------
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"  # (?i:'s|'t|...) spelled out
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = (
    CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
JAIS2 = CONTRACTIONS + (
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)"
    r"|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}"
)
MINICPM5 = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SEED_CODER = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
BAILINGMOE = (
    r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]|\s+(?!\S)|\s+"
)
EXAONE_MOE = CONTRACTIONS + (
    r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+"
)
# Tekken / GPT-4o: "an upper-case run then lower case" without \p{Lu}: std::regex has none, so
# llama.cpp writes it with look-aheads (a non-ASCII letter then counts as both cases).
UPPER_LOWER = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
UPPER_LOWER_2 = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
TEKKEN = UPPER_LOWER + "|" + UPPER_LOWER_2 + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT4O = (
    f"{UPPER_LOWER}{CONTRACTIONS}?|{UPPER_LOWER_2}{CONTRACTIONS}?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GRANITE_EMB_MULTI = GPT4O.replace(r"(?=[\p{L}])", r"(?=[\p{L}\p{M}])")
CASED_WORDS = (  # youtu, tiny_aya: the original \p{Lu}-style pattern (collapsed, every letter is one)
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + CONTRACTIONS + "?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + CONTRACTIONS + "?"
)
YOUTU_WORDS = CASED_WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
TINY_AYA_WORDS = CASED_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
ASCII_PUNCT_WORD = r"[!" + '"' + r"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"
DEEPSEEK3 = ASCII_PUNCT_WORD + r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SPARK2_5 = ASCII_PUNCT_WORD + r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"
CJK_KANA = r"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
DEEPSEEK_CJK = r"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DEEPSEEK_LLM_LETTERS = (
    r"\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376"
    r"\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    r"\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    r"\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d"
    r"\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb"
    r"\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    r"\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4"
    r"\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    r"\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    r"\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+"
)
DEEPSEEK_LLM_PUNCT = r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
YOUTU_CJK = (
    r"[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f"
    r"\ufe30-\ufe4f]+|[\u3105-\u312f]+|" + CJK_KANA
)
AFMOE_CJK = (
    r"[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-\u2fdf\u0e40-\u0e7f"
    r"\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff\uac00-\ud7af\u1100-\u11ff]+"
)
BLOOM = r" ?[^(\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
NEWLINES = r"[^\n]+|[\n]+"
# llama.cpp recognises these by their text and runs hand-written code instead (unicode.cpp)
KIMI_K2 = r"\p{Han}+"
AFMOE_DIGITS = r"\p{AFMoE_digits}"
TINY_AYA_DIGITS = r"\d{1,3}(?=(?:\d{3})*\b)"

PATTERNS: dict[str, tuple[str, ...]] = {  # llama.cpp's LLAMA_VOCAB_PRE_TYPE_*, lower case
    "default": (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"),
    "gpt2": (GPT2,),
    "starcoder": (r"\p{N}", GPT2),  # digits one by one, then GPT-2's words
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"),
    "llama3": (LLAMA3,),
    "qwen2": (QWEN2,),
    "qwen35": (QWEN35,),
    "jais2": (JAIS2,),
    "deepseek-llm": ("[\r\n]", DEEPSEEK_LLM_LETTERS, DEEPSEEK_LLM_PUNCT, r"\s+$", DEEPSEEK_CJK, r"\p{N}+"),
    "deepseek-coder": ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"),
    "deepseek3": (r"\p{N}{1,3}", CJK_KANA, DEEPSEEK3),
    "spark2_5": (r"\p{N}{1,3}", CJK_KANA, SPARK2_5, r"\p{N}"),
    "youtu": (YOUTU_CJK, YOUTU_WORDS),
    "bloom": (BLOOM,),
    "viking": (BLOOM, r"\p{N}"),
    "tekken": (TEKKEN,),
    "chameleon": (
        "<sentinel:[0-9]+>",
        "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        r"([\t\n]|    |  )",
        r"\p{N}",
        r"[\p{P}!-/:-@\[-`{-~]",
        GPT2,
    ),
    "gpt4o": (GPT4O,),
    "granite-emb-multi": (GRANITE_EMB_MULTI,),
    "tiny_aya": (TINY_AYA_DIGITS, TINY_AYA_WORDS),
    "kimi-k2": (KIMI_K2,),
    "superbpe": (r"\p{N}+", r"(?=(\d{3})+(?!\d))"),
    "bailingmoe": (BAILINGMOE,),
    "seed-coder": (SEED_CODER,),
    "ufakzeka": (UFAKZEKA,),
    "afmoe": (AFMOE_DIGITS, AFMOE_CJK, DEEPSEEK3),
    "laguna": (NEWLINES, QWEN2),
    "exaone-moe": (EXAONE_MOE,),
    "minicpm5": (r"\p{N}{1,3}", MINICPM5),
    "gemma4": (NEWLINES,),  # SentencePiece-style BPE, whole lines (llama.cpp: BOS always, newline runs whole)
    "sarvam-moe": (NEWLINES,),  # the same, without gemma4's two exceptions
}


@dataclass(frozen=True)
class PreTokenizer:
    """One ``tokenizer.ggml.pre``: its patterns and the flags llama.cpp sets with it."""

    name: str
    kind: str  # the key of PATTERNS
    ignore_merges: bool = False  # a word that is itself a token is taken whole
    add_bos: bool = False  # llama.cpp's add_bos default (the file's add_bos_token overrides it)
    byte_encode: bool = True  # GPT-2's byte-to-character map; False: raw UTF-8, spaces as '▁'

    @property
    def patterns(self) -> tuple[str, ...]:
        return PATTERNS[self.kind]


def _names(kind: str, names: str, **options) -> dict[str, PreTokenizer]:
    return {n: PreTokenizer(n, kind, **options) for n in names.split()}


# tokenizer.ggml.pre -> pre-tokenizer, as llama_vocab::impl::load maps them (llama.cpp's spelling).
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    **_names("default", "default"),
    **_names(
        "llama3",
        "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
        ignore_merges=True,
        add_bos=True,
    ),  # fmt: skip
    **_names("llama3", "dbrx smaug-bpe chatglm-bpe"),
    **_names("llama3", "glm4 glm5", ignore_merges=True),
    **_names("minicpm5", "minicpm5", ignore_merges=True),
    **_names("deepseek-llm", "deepseek-llm"),
    **_names("deepseek-coder", "deepseek-coder"),
    **_names("deepseek3", "deepseek-v3 hunyuan-dense hy_v4 joyai-llm"),
    **_names("spark2_5", "spark2_5"),
    **_names("youtu", "youtu", ignore_merges=True),
    **_names("falcon", "falcon"),
    **_names("gpt2", "gpt-2 phi-2 mpt olmo jais trillion granite-docling exaone4 gigachat a.x-4.0 mellum"),
    **_names("gpt2", "modern-bert jina-es jina-de jina-v2-es jina-v2-de jina-v1-en jina-v2-code roberta-bpe"),
    **_names("starcoder", "starcoder refact command-r smollm codeshell exaone minerva-7b mellum2"),
    **_names("jais2", "jais-2"),
    **_names("gemma4", "gemma4 granite-embed-multi-311m", byte_encode=False),
    **_names("sarvam-moe", "sarvam-moe", byte_encode=False),
    **_names("qwen2", "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2"),
    **_names("qwen35", "qwen35"),
    **_names("bloom", "poro-chat bloom gpt3-finnish"),
    **_names("viking", "viking"),
    **_names("tekken", "tekken", ignore_merges=True, add_bos=True),
    **_names("exaone-moe", "exaone-moe"),
    **_names("chameleon", "chameleon", add_bos=True),
    **_names("gpt4o", "gpt-4o llama4 kanana2 talkie minimax-m2"),
    **_names("granite-emb-multi", "granite-embed-multi-97m", ignore_merges=True),
    **_names("tiny_aya", "tiny_aya cohere2moe"),
    **_names("superbpe", "superbpe"),
    **_names("bailingmoe", "bailingmoe bailingmoe2 llada-moe"),
    **_names("seed-coder", "seed-coder"),
    **_names("kimi-k2", "kimi-k2"),
    **_names("ufakzeka", "ufakzeka"),
    **_names("afmoe", "afmoe"),
    **_names("laguna", "laguna"),
}
# Known to llama.cpp, not followed here: the reason is the line a learner reads.
REFUSED_PRE = {
    "whitespace": "llama.cpp's whitespace tokenizer (jina-embeddings-v2-base-zh) drops white space and lower-cases; "
    "it serves embedding models, which the lessons do not run",
}


def pre_tokenizer(name: str | None, source: str = "<metadata>") -> PreTokenizer:
    """The pre-tokenizer of a ``tokenizer.ggml.pre`` value (absent: llama.cpp's 'default'), or one line."""
    if name is None or name == "":
        return PRE_TOKENIZERS["default"]
    if name in PRE_TOKENIZERS:
        return PRE_TOKENIZERS[name]
    if name in REFUSED_PRE:
        raise UnsupportedTokenizerError(
            f"{source}: tokenizer.ggml.pre = {quote(name)} is not followed: {REFUSED_PRE[name]}"
        )
    near = difflib.get_close_matches(name, PRE_TOKENIZERS, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(map(repr, near))}? " if near else ""
    raise UnsupportedTokenizerError(
        f"{source}: tokenizer.ggml.pre = {quote(name, 80)} is no pre-tokenizer llama.cpp knows, so its split is "
        f"unknown; {hint}the {len(PRE_TOKENIZERS)} known ones are listed in bytesup.model.pretokenizers"
    )


# --- running them: llama.cpp's unicode_regex_split -------------------------------------------------
Span = tuple[int, int]


@lru_cache(maxsize=128)
def _compiled(pattern: str) -> tuple[regex.Pattern, bool]:
    """(the compiled pattern, whether it runs on the collapsed text), with ECMAScript's ``$``.
    `regex` is imported here, at the first tokenization: the workflow imports this module at every
    start (the lessons' registry) and never tokenizes there."""
    import regex

    collapsed = uses_unicode_classes(pattern)
    text = collapse_pattern(pattern) if collapsed else pattern
    if text.endswith("$") and not text.endswith("\\$"):
        text = text[:-1] + r"\Z"  # std::regex: '$' is the end only (Python's also matches before a final \n)
    return regex.compile(text, regex.ASCII), collapsed  # ASCII: std::regex's \s \d \b know only ASCII


def _split_regex(subject: str, rx: regex.Pattern, spans: list[Span]) -> list[Span]:
    out = []
    for a, b in spans:
        pos = 0
        for m in rx.finditer(subject[a:b]):
            s, e = m.span()
            if s > pos:
                out.append((a + pos, a + s))
            if e > s:
                out.append((a + s, a + e))
            pos = e
        if pos < b - a:
            out.append((a + pos, b))
    return out


def _afmoe_digits(text: str, spans: list[Span]) -> list[Span]:
    """unicode_regex_split_custom_afmoe: numbers in groups of three from the right ('1234' -> '1' '234');
    what precedes a number is cut off with its first group, as llama.cpp's code does."""
    out = []
    for a, b in spans:
        prev, pos = a, a
        while pos < b:
            if flags(text[pos]) & NUMBER:
                start = pos
                while pos < b and flags(text[pos]) & NUMBER:
                    pos += 1
                cut = start + (pos - start) % 3
                for end in ([cut] if cut > start else []) + list(range(cut + 3, pos + 1, 3)):
                    out.append((prev, end))
                    prev = end
                continue
            pos += 1
        if prev < b:
            out.append((prev, b))
    return out


def _kimi_k2(text: str, spans: list[Span]) -> list[Span]:
    """unicode_regex_split_custom_kimi_k2, ported: Han runs, letter runs (with a contraction), digits in
    threes, punctuation runs, white space as in Llama 3's pattern."""
    out: list[Span] = []
    for a, b in spans:
        _kimi_k2_span(text, a, b, out)
    return out


def _kimi_k2_span(text: str, a: int, b: int, out: list[Span]) -> None:
    def cpt(p: int) -> str:
        return text[p] if a <= p < b else ""

    def fl(p: int) -> int:
        return flags(text[p]) if a <= p < b else 0

    def han(p: int) -> bool:
        return a <= p < b and is_han(text[p])

    def letter(p: int) -> bool:
        return bool(fl(p) & LETTER) and not han(p)

    def lower(p: int) -> str:  # unicode_tolower, as far as the contractions can tell
        return cpt(p).lower() if cpt(p).isascii() else ""

    prev = a

    def add(end: int) -> int:
        nonlocal prev
        n = end - prev
        if n > 0:
            out.append((prev, end))
        prev = end
        return n

    pos = a
    while pos < b:
        c, f = text[pos], flags(text[pos])
        if is_han(c):
            while han(pos):
                pos += 1
            add(pos)
            continue
        plain = not (c in "\r\n" or f & (LETTER | NUMBER))  # may lead a word
        if letter(pos) or (plain and letter(pos + 1)):
            leading = plain
            pos += leading
            has_letters = False
            while letter(pos):
                has_letters, pos = True, pos + 1
            if has_letters or (not leading and letter(pos)):
                if not has_letters:
                    pos += 1
                while letter(pos):
                    pos += 1
                if cpt(pos) == "'" and pos + 1 < b:
                    if lower(pos + 1) in ("s", "t", "m", "d"):
                        pos += 2
                    elif pos + 2 < b and lower(pos + 1) + lower(pos + 2) in ("re", "ve", "ll"):
                        pos += 3
                add(pos)
                continue
            if leading:
                pos -= 1
        if f & NUMBER:
            ini = pos
            while fl(pos) & NUMBER:
                pos += 1
                if pos - ini >= 3:
                    add(pos)
                    ini = pos
            add(pos)
            continue
        f2 = fl(pos + 1) if c == " " else f
        if not f2 & (WHITESPACE | LETTER | NUMBER) and f2:
            pos += c == " "
            while not f2 & (WHITESPACE | LETTER | NUMBER) and f2:
                pos += 1
                f2 = fl(pos)
            while cpt(pos) in ("\r", "\n"):
                pos += 1
            add(pos)
            continue
        pos = _whitespace_run(text, b, pos, add)


def _whitespace_run(text: str, b: int, pos: int, add) -> int:
    """The end of Llama 3's white-space alternatives (\\s*[\\r\\n]+ | \\s+(?!\\S) | \\s+) at ``pos``."""
    n, last_newline = 0, 0
    while pos + n < b and flags(text[pos + n]) & WHITESPACE:
        if text[pos + n] in "\r\n":
            last_newline = pos + n + 1
        n += 1
    if last_newline:
        end = last_newline
    elif n > 1 and pos + n < b:
        end = pos + n - 1
    else:
        end = pos + max(n, 1)  # a run, or no match: one character alone
    add(end)
    return end


CUSTOM = {KIMI_K2: _kimi_k2, AFMOE_DIGITS: _afmoe_digits, TINY_AYA_DIGITS: _afmoe_digits}


def split(text: str, pre: PreTokenizer | Sequence[str]) -> list[str]:
    """``text`` cut into words by a pre-tokenizer (or a list of patterns), llama.cpp's way."""
    patterns = pre.patterns if isinstance(pre, PreTokenizer) else tuple(pre)
    spans: list[Span] = [(0, len(text))] if text else []
    collapsed = plain = None
    for pattern in patterns:
        if pattern in CUSTOM:
            spans = CUSTOM[pattern](text, spans)
            continue
        rx, on_collapsed = _compiled(pattern)
        if on_collapsed:
            collapsed = collapse_text(text) if collapsed is None else collapsed
            spans = _split_regex(collapsed, rx, spans)
        else:
            plain = whitespace_as_vt(text) if plain is None else plain
            spans = _split_regex(plain, rx, spans)
    return [text[a:b] for a, b in spans]

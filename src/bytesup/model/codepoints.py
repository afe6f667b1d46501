r"""Each character's class as llama.cpp sees it, for its pre-tokenizers (llama.cpp src/unicode.cpp).

llama.cpp gives every code point one general category (its unicode-data.cpp is generated from
Unicode 15.1's UnicodeData.txt) and a White_Space flag:

    NUMBER \p{N}    LETTER \p{L}    SEPARATOR \p{Z}    ACCENT_MARK \p{M}    PUNCTUATION \p{P}
    SYMBOL \p{S}    CONTROL \p{C}   UNDEFINED (not assigned in Unicode 15.1)

The ``regex`` package knows the same categories for a newer Unicode. The code points assigned
since 15.1 (NEWER_THAN_15_1: unicodedata2 15.1.0 compared with ``regex``) are UNDEFINED here, as
they are in llama.cpp; for every other code point the two tables agree.

llama.cpp runs most split patterns with C++ std::regex, which knows no Unicode classes, so it
first "collapses" the text: a character below 128 stays itself, any other becomes one byte that
names its class (0xD1 a number, 0xD2 a letter, ... 0x0B any non-ASCII white space), and each
``\p{..}`` in a pattern becomes a set of that byte and the class's ASCII members
(``\p{L}`` -> ``[\xD2A-Za-z]``). :func:`collapse_text` and :func:`collapse_pattern` do the same.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache

UNDEFINED, NUMBER, LETTER, SEPARATOR, ACCENT_MARK, PUNCTUATION, SYMBOL, CONTROL = 1, 2, 4, 8, 16, 32, 64, 128
WHITESPACE = 0x100

# Code points the regex package has as assigned that Unicode 15.1 leaves unassigned (16.0, 17.0).
NEWER_THAN_15_1 = (
    (0x00558, 0x00558), (0x0058B, 0x0058C), (0x005C8, 0x005C9), (0x0088F, 0x0088F), (0x00897, 0x00897),
    (0x00B53, 0x00B54), (0x00C5C, 0x00C5C), (0x00CDC, 0x00CDC), (0x01ACF, 0x01AF0), (0x01B4E, 0x01B4F),
    (0x01B7F, 0x01B7F), (0x01C89, 0x01C8A), (0x0208F, 0x0208F), (0x0209D, 0x0209F), (0x020C1, 0x020C4),
    (0x02427, 0x02429), (0x02B96, 0x02B96), (0x02E60, 0x02E63), (0x031E4, 0x031E5), (0x0A7CB, 0x0A7CF),
    (0x0A7D2, 0x0A7D2), (0x0A7D4, 0x0A7D4), (0x0A7DA, 0x0A7DD), (0x0A7E2, 0x0A7E2), (0x0A7F1, 0x0A7F1),
    (0x0AB6C, 0x0AB6D), (0x0FBC3, 0x0FBD2), (0x0FD90, 0x0FD91), (0x0FDC8, 0x0FDCE), (0x105C0, 0x105F3),
    (0x107BB, 0x107BF), (0x10940, 0x10959), (0x10D40, 0x10D65), (0x10D69, 0x10D85), (0x10D8E, 0x10D8F),
    (0x10EC2, 0x10EC7), (0x10EC9, 0x10EEE), (0x10EF0, 0x10EFC), (0x11380, 0x11389), (0x1138B, 0x1138B),
    (0x1138E, 0x1138E), (0x11390, 0x113B5), (0x113B7, 0x113C0), (0x113C2, 0x113C2), (0x113C5, 0x113C5),
    (0x113C7, 0x113CA), (0x113CC, 0x113D5), (0x113D7, 0x113D8), (0x113E1, 0x113E2), (0x116D0, 0x116E3),
    (0x11B0A, 0x11B0A), (0x11B60, 0x11B67), (0x11BC0, 0x11BE1), (0x11BF0, 0x11BF9), (0x11DB0, 0x11DDB),
    (0x11DE0, 0x11DE9), (0x11DF0, 0x11DF1), (0x11F5A, 0x11F5A), (0x1246F, 0x1246F), (0x12475, 0x1247F),
    (0x12550, 0x12686), (0x13460, 0x143FA), (0x16100, 0x16139), (0x16D40, 0x16D79), (0x16EA0, 0x16EB8),
    (0x16EBB, 0x16ED3), (0x16FF2, 0x16FF6), (0x187F8, 0x187FF), (0x18CD6, 0x18CDA), (0x18CFF, 0x18CFF),
    (0x18D09, 0x18D20), (0x18D80, 0x18DF2), (0x18E00, 0x19191), (0x191A0, 0x191D2), (0x1B123, 0x1B128),
    (0x1B168, 0x1B168), (0x1CC00, 0x1CCFC), (0x1CD00, 0x1CEB3), (0x1CEBA, 0x1CED0), (0x1CED2, 0x1CED4),
    (0x1CEDD, 0x1CEFD), (0x1D127, 0x1D128), (0x1D1EB, 0x1D1FF), (0x1D250, 0x1D281), (0x1D6A6, 0x1D6A6),
    (0x1DB00, 0x1DB1C), (0x1DF1F, 0x1DF24), (0x1DF2B, 0x1DF81), (0x1DF90, 0x1DF96), (0x1DFCD, 0x1DFFF),
    (0x1E5D0, 0x1E5FA), (0x1E5FF, 0x1E5FF), (0x1E6C0, 0x1E6DE), (0x1E6E0, 0x1E6F5), (0x1E6FE, 0x1E6FF),
    (0x1F1AE, 0x1F1AE), (0x1F6D8, 0x1F6D9), (0x1F777, 0x1F77A), (0x1F7DA, 0x1F7DB), (0x1F7F1, 0x1F7FF),
    (0x1F8B2, 0x1F8BB), (0x1F8C0, 0x1F8C1), (0x1F8D0, 0x1F8D8), (0x1FA54, 0x1FA57), (0x1FA89, 0x1FA8F),
    (0x1FABE, 0x1FABE), (0x1FAC6, 0x1FAC6), (0x1FAC8, 0x1FAC8), (0x1FACC, 0x1FACD), (0x1FADC, 0x1FADD),
    (0x1FADF, 0x1FADF), (0x1FAE9, 0x1FAEB), (0x1FAEF, 0x1FAEF), (0x1FAF9, 0x1FAFA), (0x1FBCB, 0x1FBEF),
    (0x1FBFA, 0x1FBFA), (0x2B73A, 0x2B73F), (0x2B81E, 0x2B81E), (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479),
    (0x3D000, 0x3FC3F),
)  # fmt: skip
_NEWER_STARTS = [a for a, _ in NEWER_THAN_15_1]

_CATEGORIES = (
    r"(?P<N>\p{N})|(?P<L>\p{L})|(?P<Z>\p{Z})|(?P<M>\p{M})|(?P<P>\p{P})|(?P<S>\p{S})|(?P<Cn>\p{Cn})|(?P<C>\p{C})"
)
_BITS = {"N": NUMBER, "L": LETTER, "Z": SEPARATOR, "M": ACCENT_MARK, "P": PUNCTUATION, "S": SYMBOL}
_BITS.update(Cn=UNDEFINED, C=CONTROL)


@lru_cache(maxsize=1)
def _patterns():
    r"""(the category pattern, \s: on str patterns Unicode White_Space, llama.cpp's set), compiled at
    the first use: importing `regex` and compiling takes about 0.1 s in a workflow's start, which
    imports this module (through the lessons' registry) and never tokenizes."""
    import regex

    return regex.compile(_CATEGORIES), regex.compile(r"\s")


def _newer(cp: int) -> bool:
    i = bisect_right(_NEWER_STARTS, cp) - 1
    return i >= 0 and cp <= NEWER_THAN_15_1[i][1]


@lru_cache(maxsize=1 << 16)
def flags(ch: str) -> int:
    """llama.cpp's unicode_cpt_flags of one character: its category bit, | WHITESPACE."""
    categories, white_space = _patterns()
    match = categories.match(ch)
    category = UNDEFINED if match is None or _newer(ord(ch)) else _BITS[match.lastgroup]
    return category | (WHITESPACE if white_space.match(ch) else 0)


def is_han(ch: str) -> bool:
    """llama.cpp's unicode_cpt_is_han: the CJK ideograph blocks (Kimi-K2's split keeps them apart)."""
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2EBEF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


# --- the collapsed text and patterns of unicode_regex_split ----------------------------------------
_CLASS_BYTE = {NUMBER: "\xd1", LETTER: "\xd2", PUNCTUATION: "\xd3", ACCENT_MARK: "\xd4", SYMBOL: "\xd5"}
# Each \p{..} llama.cpp knows, its category, and the ASCII members it adds inside the set.
_ASCII_MEMBERS = {
    NUMBER: "0-9",
    LETTER: "A-Za-z",
    PUNCTUATION: r"!-#%-*,-/:-;?-@\[-\]_\{\}",
    ACCENT_MARK: "",
    SYMBOL: r"\$\+<->^`\|\~",
}
UNICODE_CLASSES = {r"\p{N}": NUMBER, r"\p{L}": LETTER, r"\p{P}": PUNCTUATION, r"\p{M}": ACCENT_MARK}
UNICODE_CLASSES.update({r"\p{S}": SYMBOL, **{rf"\p{{{c}}}": LETTER for c in ("Lu", "Ll", "Lt", "Lm", "Lo")}})


@lru_cache(maxsize=1 << 16)
def _collapsed(ch: str) -> str:
    if ord(ch) < 128:
        return ch
    f = flags(ch)
    if f & WHITESPACE:
        return "\x0b"  # std::regex's \s knows only ASCII white space: a vertical tab stands in
    return _CLASS_BYTE.get(f & 0xFF, "\xd0")


def collapse_text(text: str) -> str:
    """The text with every non-ASCII character replaced by the byte of its class."""
    return "".join(map(_collapsed, text))


def whitespace_as_vt(text: str) -> str:
    """The text std::wregex sees: non-ASCII white space replaced by a vertical tab."""
    return "".join("\x0b" if ord(c) > 0x7F and flags(c) & WHITESPACE else c for c in text)


def uses_unicode_classes(pattern: str) -> bool:
    return any(name in pattern for name in UNICODE_CLASSES)


def collapse_pattern(pattern: str) -> str:
    """llama.cpp's rewrite of a pattern for the collapsed text (the loop in unicode_regex_split)."""
    out, inside, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[" and (i == 0 or pattern[i - 1] != "\\"):
            out.append("[")
            inside = True
        elif inside and c == "]" and pattern[i - 1] != "\\":
            out.append("]")
            inside = False
        elif pattern.startswith("\\p{", i) and i + 3 < len(pattern):
            close = pattern.find("}", i + 3)
            category = UNICODE_CLASSES.get(pattern[i : close + 1]) if 0 <= close <= i + 10 else None
            if category is None:
                out.append(c)
            else:
                members = _CLASS_BYTE[category] + _ASCII_MEMBERS[category]
                out.append(members if inside else f"[{members}]")
                i = close
        else:
            out.append(c)
        i += 1
    return "".join(out)

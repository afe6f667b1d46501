"""Test strings for the tokenizer, shared by its tests: each group exercises part of the split patterns.

STRINGS is the fixed groups plus random mixtures of their parts: the same list on every run.
"""

from __future__ import annotations

import random

WORDS = [
    "the", "cat", "sat", "on", "a", "mat", "while", "quick", "brown", "fox", "jumps", "over", "lazy",
    "dogs", "tokenizer", "embedding", "attention", "transformer", "Hello", "WORLD", "HelloWorld",
    "iPhone", "ABCdef", "camelCaseWord", "XMLHttpRequest", "café", "naïve", "résumé", "façade",
    "Ångström", "Straße", "mañana", "ÉCOLE", "ΣΙΓΜΑ σίγμα", "İstanbul", "Führer",
]  # fmt: skip
CONTRACTIONS = [
    "don't", "it's", "we're", "they've", "I'm", "you'll", "he'd", "DON'T", "I'M", "We'Re", "YOU'LL",
    "'s", "'S", "'ll've", "rock'n'roll", "l'été", "O'Neil's", "’s curly", "it ' s",
]  # fmt: skip
CODE = [
    "def f(x):\n    return x + 1\n",
    "for i in range(10):\n\tprint(i)\n\t\tpass\n",
    "if (a && b) { return -1; }\n",
    'x = {"key": [1, 2, 3]}  # comment',
    "    indented\n        twice\n",
    "class A:\n    def __init__(self):\n        self.x = 0\n",
    "a\tb\t\tc   d",
    'int main(void){printf("%d\\n", 42);}',
    '<div class="x">&nbsp;</div>',
    "path/to/file.py:12:3",
    "a==b!=c<=d>=e->f=>g",
    "$HOME ~/x ^y |z `w` +1",
    "<sentinel:12> IMGIMGABZ",
]
NUMBERS = [
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678901234567890", "1000000",
    "3.14159", "-273.15", "1,234,567", "2024-06-01", "x=1000000", "a  1", "a   22", "\t 3", "  2024",
    "v1.2.3", "0x1F", "1e-5", "½ ²", "abc123def4567", "٣٤٥ arabic", "१२३ devanagari", "Ⅻ roman",
    "１２３ fullwidth", "9am 10pm", "$12.50", "50%",
]  # fmt: skip
SPACES = [
    "", " ", "  ", "   ", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n ", "a  b", "a\n\nb", "a \n b",
    "  lead", "trail  ", "trail \n", "\t", "\t\t", "x \t y", "\u00a0nbsp", "line\u2028sep", "end\n",
    "ideographic\u3000space", "em\u2003space", "nel\x85x", "vt\x0bff\x0c", "\x1c\x1d sep", "a\r\rb",
    "     five", "tab\t\n\tnewline",
]  # fmt: skip
UNICODE = [
    "中文分词测试", "日本語のテキスト", "ひらがなカタカナ", "한국어 텍스트", "中文English混合", "Привет мир",
    "مرحبا بالعالم", "שלום", "ภาษาไทย", "हिन्दी भाषा", "emoji 😀 here", "👍🏽", "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈", "🇺🇸🇫🇷", "1️⃣ keycap", "e\u0301 combining", "Ω≈ç√∫", "ａｂｃ full width", "ﬁ ligature",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "🤖🤖🤖", "\u200bzero width", "«guillemets» “quotes”", "—dash–", "…ellipsis",
    "！？。，", "Ꭰ cherokee", "\ufeffbom", "\u1b4e new", "a\u0600b",
]  # fmt: skip
SPECIALS = [
    "<|im_start|>user\nhi<|im_end|>",
    "text<|endoftext|>more",
    "<|im_start|><|im_end|>",
    "a <|im_start|> b",
    "<|im_start|",
    "<repo_name>x<file_sep>y",
    "<<|im_end|>>",
    "Führer and Führer",
    "a world apart",
    "<tool> <tool>x</tool>",
    "<end_of_turn>user<|channel|>",
    "<s>cat</s>  <unk>",
    "<start_of_turn>user\nHi<end_of_turn>",
]
PARTS = WORDS + CONTRACTIONS + CODE + NUMBERS + SPACES + UNICODE + SPECIALS


def generated_strings(n_random: int = 300, seed: int = 0) -> list[str]:
    """The fixed lists plus random mixtures of their parts."""
    rng = random.Random(seed)
    parts = PARTS + [" ", " ", "\n", ".", ",", "!?", "'s"]
    out = list(dict.fromkeys(PARTS))
    out += [" ".join(WORDS[i : i + 7]) + "." for i in range(0, len(WORDS), 7)]
    for _ in range(n_random):
        k = rng.randint(1, 6)
        sep = rng.choice(["", " ", "  ", "\n", "\t"])
        out.append(sep.join(rng.choice(parts) for _ in range(k)))
    return out


STRINGS = generated_strings()


# SentencePiece-style vocabularies (piece, score, token type) small enough to follow by hand.
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


# Pieces whose merge order decides the result: 'ab' (-1) before 'bc' (-2) gives [ab, c]; the
# reverse order would give [a, bc]. Equal scores merge leftmost first: 'aaa' -> [aa, a].
ORDER_PIECES = [
    ("<unk>", 0.0, 2),
    ("<s>", 0.0, 3),
    ("</s>", 0.0, 3),
    ("a", -5.0, 1),  # 3
    ("b", -5.0, 1),
    ("c", -5.0, 1),
    ("ab", -1.0, 1),  # 6
    ("bc", -2.0, 1),
    ("aa", -1.0, 1),  # 8
    ("cab", -0.5, 1),  # 9: reachable only through 'ab' first
    ("▁", -3.0, 1),  # 10
]

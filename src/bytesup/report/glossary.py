"""The glossary: the words a learner may not know, defined once (glossary.yaml beside this module).

Each page of the report links a term to its definition the first time its running text uses it
(`Glossary.split`), and index.html prints every definition in its glossary section. A term's
other forms (`also`: plurals, the names of its members) link to the same entry. Matching is
case-sensitive and whole-word, so "decode" links and "decoded" does not.

A quantized type's entry (`quant: Q8_0`) ends with its block's size, read from gguf-py's
GGML_QUANT_SIZES, the one home of those numbers: the definition never types them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

import yaml
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType


@dataclass(frozen=True)
class Term:
    term: str
    definition: str
    forms: tuple[str, ...]  # the term and its other forms, as they may appear in text

    @property
    def anchor(self) -> str:
        return "g-" + re.sub(r"[^a-z0-9]+", "-", self.term.lower()).strip("-")


def block_size(type_name: str) -> str:
    """'Q8_0' -> 'Q8_0 keeps 32 weights in 34 bytes: 8.5 bits per weight.'"""
    weights, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    return f"{type_name} keeps {weights} weights in {size} bytes: {8 * size / weights:g} bits per weight."


class Glossary:
    def __init__(self, terms: list[Term]):
        self.terms = sorted(terms, key=lambda t: t.term.lower())
        self._anchor = {form: t.anchor for t in terms for form in t.forms}
        forms = sorted(self._anchor, key=len, reverse=True)  # the longest form first: "KV cache" before "cache"
        self._pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, forms)) + r")(?![\w-])")

    def split(self, text: str, linked: set[str]) -> list:
        """`text` as pieces: plain strings, and (words, anchor) where a term is first used.
        `linked` holds the anchors already linked on the page; it is updated."""
        out, at = [], 0
        for m in self._pattern.finditer(text):
            anchor = self._anchor[m.group(1)]
            if anchor in linked:
                continue
            linked.add(anchor)
            out += [text[at : m.start()], (m.group(1), anchor)]
            at = m.end()
        out.append(text[at:])
        return [p for p in out if p != ""]

    def entries(self) -> list[tuple[str, str, str]]:
        """(anchor, term, definition) of every term, in alphabetical order."""
        return [(t.anchor, t.term, t.definition) for t in self.terms]


@functools.lru_cache(maxsize=1)
def load() -> Glossary:
    """The glossary of bytesup/report/glossary.yaml."""
    data = yaml.safe_load((resources.files("bytesup.report") / "glossary.yaml").read_text(encoding="utf-8"))
    terms = []
    for entry in data["terms"]:
        definition = " ".join(entry["definition"].split())
        if entry.get("quant"):
            definition += " " + block_size(entry["quant"])
        terms.append(Term(entry["term"], definition, (entry["term"], *entry.get("also", ()))))
    return Glossary(terms)

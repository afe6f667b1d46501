"""Vocabulary-only GGUFs for checking the tokenizer against llama.cpp itself (llama-cpp-python).

A vocab-only file is a GGUF's metadata without tensors; ``Llama(path, vocab_only=True)`` loads it
and tokenizes. ``VocabFiles`` writes one from a real model's metadata (gguf-py's GGUFWriter) and
then relabels it with any ``tokenizer.ggml.pre`` by rewriting its last key, so that fifty
pre-tokenizers cost one write.
"""

from __future__ import annotations

import struct
from pathlib import Path

from gguf import GGUFValueType, GGUFWriter

from bytesup.gguf.file import GGUFFile
from bytesup.model.tokens import gpt2_byte_to_char

PRE = "tokenizer.ggml.pre"
SKIPPED = ("tokenizer.chat_template", PRE)

# Tokens added to a real vocabulary so that every special-token rule of llama.cpp is exercised.
ADDED_TOKENS = [
    ("Führer", 4),  # user-defined: cut out whole even when special tokens are not parsed
    (" world", 4),  # user-defined, with a space: cut out before the pre-tokenizer runs
    ("<tool>", 4),
    ("</tool>", 3),
    ("<end_of_turn>", 4),  # user-defined, but an end-of-turn text: llama.cpp makes it control
    ("<|channel|>", 3),  # control, but gpt-oss's: llama.cpp makes it user-defined
    ("<|im_start|>user", 3),  # longer than <|im_start|>: the longer is cut first
    ("<unk>", 2),
]


def metadata_of(path: Path) -> tuple[dict, dict]:
    """(metadata, types) of a GGUF, without its chat template."""
    f = GGUFFile(path)
    keep = [k for k in f.metadata if k not in SKIPPED]
    return {k: f.metadata[k] for k in keep}, {k: f.metadata_types[k] for k in keep}


def with_tokens(metadata: dict, types: dict, added: list[tuple[str, int]]) -> tuple[dict, dict]:
    """A copy of the metadata with tokens appended (text, token type), scores 0."""
    meta = dict(metadata)
    new = [(t, k) for t, k in added if t not in set(meta["tokenizer.ggml.tokens"])]
    meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"] + [t for t, _ in new]
    meta["tokenizer.ggml.token_type"] = meta["tokenizer.ggml.token_type"] + [k for _, k in new]
    if "tokenizer.ggml.scores" in meta:
        meta["tokenizer.ggml.scores"] = meta["tokenizer.ggml.scores"] + [0.0] * len(new)
    arch = meta.get("general.architecture")
    if f"{arch}.vocab_size" in meta:
        meta[f"{arch}.vocab_size"] = len(meta["tokenizer.ggml.tokens"])
    return meta, dict(types)


def substring_vocabulary(strings: list[str], base: dict, base_types: dict, longest: int = 8) -> tuple[dict, dict]:
    """A byte-level BPE vocabulary in which every word a pre-tokenizer can cut from ``strings`` (up
    to ``longest`` bytes) is one token: the 256 byte characters, every substring of the strings'
    byte spellings up to that length, and every way to merge each from two others (shorter first).
    Its ids show exactly where a pre-tokenizer cut, which a real vocabulary often hides (SmolLM2
    has no merge across digits, so '12345' is five tokens whatever the split). ``base``: the
    architecture keys (llama.cpp reads them even for a vocabulary)."""
    table = gpt2_byte_to_char()
    pieces = set()
    for s in strings:
        spelled = "".join(table[b] for b in s.encode("utf-8"))
        for i in range(len(spelled)):
            for j in range(i + 2, min(i + longest, len(spelled)) + 1):
                pieces.add(spelled[i:j])
    tokens = ["<|endoftext|>", *(table[b] for b in range(256)), *sorted(pieces, key=lambda p: (len(p), p))]
    merges = [f"{t[:k]} {t[k:]}" for t in tokens[257:] for k in range(1, len(t))]
    meta = {k: v for k, v in base.items() if not k.startswith("tokenizer.")}
    types = {k: base_types[k] for k in meta}
    arch = meta.get("general.architecture")
    if f"{arch}.vocab_size" in meta:
        meta[f"{arch}.vocab_size"] = len(tokens)
    meta.update(
        {
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [3] + [1] * (len(tokens) - 1),
            "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": 0,
            "tokenizer.ggml.eos_token_id": 0,
        }
    )
    types.update(
        {
            "tokenizer.ggml.model": "STRING",
            "tokenizer.ggml.tokens": "ARRAY[STRING]",
            "tokenizer.ggml.token_type": "ARRAY[INT32]",
            "tokenizer.ggml.merges": "ARRAY[STRING]",
            "tokenizer.ggml.bos_token_id": "UINT32",
            "tokenizer.ggml.eos_token_id": "UINT32",
        }
    )
    return meta, types


def spm_metadata(pieces: list[tuple[str, float, int]], **extra) -> dict:
    """SentencePiece-style ('llama') tokenizer keys of (piece, score, token type) triples."""
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [p for p, _, _ in pieces],
        "tokenizer.ggml.scores": [s for _, s, _ in pieces],
        "tokenizer.ggml.token_type": [t for _, _, t in pieces],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }
    meta.update(extra)
    return meta


def _value_type(name: str) -> tuple[GGUFValueType, GGUFValueType | None]:
    if name.startswith("ARRAY["):
        return GGUFValueType.ARRAY, GGUFValueType[name[6:-1]]
    return GGUFValueType[name], None


def _string_kv(key: str, value: str) -> bytes:
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", GGUFValueType.STRING, len(v)) + v


class VocabFiles:
    """Vocab-only GGUFs of one metadata, one per tokenizer.ggml.pre, written into ``folder``."""

    def __init__(self, folder: Path, name: str, metadata: dict, types: dict):
        self.folder, self.name = folder, name
        self.metadata, self.types = metadata, types
        base = folder / f"{name}.base.gguf"
        writer = GGUFWriter(base, str(metadata.get("general.architecture", "llama")))
        writer.kv_data[0].clear()  # the writer's own general.architecture comes back from metadata
        for key, value in metadata.items():
            vtype, sub = _value_type(types[key])
            writer.add_key_value(key, value, vtype, sub)
        writer.add_key_value(PRE, "x", GGUFValueType.STRING)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.close()
        raw = base.read_bytes()
        last = _string_kv(PRE, "x")
        assert raw.endswith(last)
        self._head = raw[: len(raw) - len(last)]

    def path(self, pre: str | None) -> Path:
        """The file labelled ``tokenizer.ggml.pre = pre`` (None: without the key)."""
        path = self.folder / f"{self.name}.{pre or 'none'}.gguf"
        if not path.exists():
            if pre is None:  # one key fewer: the count in the header (after magic, version, tensors)
                head = bytearray(self._head)
                (n_kv,) = struct.unpack_from("<Q", head, 16)
                struct.pack_into("<Q", head, 16, n_kv - 1)
                path.write_bytes(bytes(head))
            else:
                path.write_bytes(self._head + _string_kv(PRE, pre))
        return path

    def metadata_for(self, pre: str | None) -> tuple[dict, dict]:
        meta, types = dict(self.metadata), dict(self.types)
        if pre is not None:
            meta[PRE], types[PRE] = pre, "STRING"
        return meta, types

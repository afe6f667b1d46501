"""Special tokens: which strings are cut out of the text whole, before any splitting, as llama.cpp does.

llama.cpp turns each token type into attributes (``llama_token_attr``), then corrects them by
text, since converted files often mislabel their specials (``llama_vocab::impl::load``):

    control, unknown   cut out only when special tokens are parsed (parse_special=True)
    user-defined       cut out ALWAYS, parsed or not: a vocabulary's added words ('Führer' in
                       deepseek-coder, '<|channel|>' in gpt-oss) are never split
    by text            end-of-turn and fill-in-the-middle markers ('<|im_end|>', '</s>',
                       '<|fim_prefix|>', ...) become control even when typed user-defined

The text is then cut token by token, longest first (``tokenizer_st_partition``): every occurrence
of the longest special string in every plain stretch, then the next longest, and so on.
"""

from __future__ import annotations

from bytesup.model.vocabulary import Vocabulary

# llama_token_attr bits
UNKNOWN, UNUSED, NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 2, 4, 8, 16, 32
LSTRIP, RSTRIP = 128, 256
ATTRIBUTE_OF_TYPE = {1: NORMAL, 2: UNKNOWN, 3: CONTROL, 4: USER_DEFINED, 5: UNUSED, 6: BYTE}  # 0, others: none

# Texts llama.cpp makes control tokens (end of generation, and one of each fill-in-the-middle kind).
END_OF_GENERATION = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
)  # fmt: skip
FILL_IN_THE_MIDDLE = {  # key (tokenizer.ggml.<key>, and its older name) -> texts llama.cpp looks for
    ("fim_pre_token_id", "prefix_token_id"): (
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
        "<|prefix|>",
    ),
    ("fim_suf_token_id", "suffix_token_id"): (
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
        "<|suffix|>",
    ),
    ("fim_mid_token_id", "middle_token_id"): (
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
        "<|middle|>",
    ),
    ("fim_pad_token_id",): ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    ("fim_rep_token_id",): ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    ("fim_sep_token_id",): ("<|file_sep|>",),
}  # fmt: skip
ALWAYS_USER_DEFINED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")  # gpt-oss: always rendered
ASCII_SPACE = " \t\n\v\f\r"  # C isspace(), which llama.cpp's lstrip/rstrip use


def attributes(vocab: Vocabulary, pre: str | None, architecture: str = "") -> list[int]:
    """llama.cpp's attribute bits of every token, after its corrections by text and model name."""
    attrs = [ATTRIBUTE_OF_TYPE.get(t, 0) for t in vocab.token_types]
    ids = vocab.ids

    def mark(text: str, bit: int) -> None:
        if text in ids:
            attrs[ids[text]] |= bit

    fim = {}
    for keys, texts in FILL_IN_THE_MIDDLE.items():
        given = next((vocab.special[k] for k in keys if k in vocab.special), None)
        found = [ids[t] for t in texts if t in ids]  # llama.cpp takes the first its hash map yields
        fim[keys[0]] = given if given is not None else (min(found) if found else None)
        if given is None and found:
            attrs[min(found)] |= CONTROL
    for text in END_OF_GENERATION:
        mark(text, CONTROL)
    for text in ALWAYS_USER_DEFINED:
        if text in ids:
            attrs[ids[text]] = USER_DEFINED

    # the end-of-generation set, for two corrections that depend on it
    eog = {ids[t] for t in END_OF_GENERATION if t in ids}
    eog |= {fim[k] for k in ("fim_pad_token_id", "fim_rep_token_id", "fim_sep_token_id") if fim[k] is not None}
    eog |= {vocab.special[k] for k in ("eos_token_id", "eot_token_id", "eom_token_id") if k in vocab.special}
    texts = {vocab.tokens[i] for i in eog}
    calls = "<|call|>" in texts or "<|calls|>" in texts
    if "<|end|>" in texts and calls and ("<|return|>" in texts or "<|flush|>" in texts):
        attrs[ids["<|end|>"]] = USER_DEFINED  # o200k_harmony, solar-open: '<|end|>' ends no generation
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
        attrs[ids["</s>"]] = NORMAL  # gemma4, plamo: '</s>' is a plain token there

    # per-token strip flags that llama.cpp sets by model name
    name = vocab.name.lower()
    if any(n in (pre or "") for n in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        a in architecture for a in ("nomic-bert-moe", "jina-bert-v3")
    ):
        mark("<mask>", LSTRIP)
    elif "phi-3" in name or "phi3" in name:
        for i in special_order(vocab.tokens, attrs):
            attrs[i] |= RSTRIP
        mark("</s>", RSTRIP)
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            if text in ids:
                attrs[ids[text]] &= ~RSTRIP
    elif "modern-bert" in name:
        mark("[MASK]", LSTRIP)
    return attrs


def special_order(tokens: list[str], attrs: list[int]) -> list[int]:
    """The ids cut out of text (control, user-defined, unknown), longest text first, then by id."""
    ids = [i for i, a in enumerate(attrs) if a & (CONTROL | USER_DEFINED | UNKNOWN)]
    return sorted(ids, key=lambda i: (-len(tokens[i]), i))


def partition(text: str, order: list[int], tokens: list[str], attrs: list[int], parse_special: bool) -> list:
    """``text`` as plain strings and the ids of the special tokens cut out of it (llama.cpp's order)."""
    fragments: list[str | int] = [text] if text else []
    for tid in order:
        attr, special = attrs[tid], tokens[tid]
        if not parse_special and attr & (CONTROL | UNKNOWN):
            continue  # user-defined tokens are still cut out
        if special not in text:
            continue
        out: list[str | int] = []
        for piece in fragments:
            if isinstance(piece, int) or special not in piece:
                out.append(piece)
                continue
            pos = 0
            while (at := piece.find(special, pos)) >= 0:
                left = piece[pos:at]
                if attr & LSTRIP:
                    left = left.rstrip(ASCII_SPACE)
                if left:
                    out.append(left)
                out.append(tid)
                pos = at + len(special)
                if attr & RSTRIP:
                    while pos < len(piece) and piece[pos] in ASCII_SPACE:
                        pos += 1
            if pos < len(piece):
                out.append(piece[pos:])
        fragments = out
    return fragments

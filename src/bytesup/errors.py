"""The one base of every expected failure (STYLE §18), and how file content is quoted in its line.

A bad config, a wrong checksum, a malformed GGUF, a model the lessons do not follow, a report that
does not verify: each raises a subclass of `BytesupError` whose message is the one line the user
reads (what went wrong, with the file, key or tensor, and what to do next). The command line and
the workflow's scripts catch `BytesupError` in one place (`bytesup.cli.main`,
`bytesup.run.joblog.job_logging`) and print that line; anything else is a bug and keeps its
traceback.

Subclasses keep the builtin base they had (ValueError, KeyError, OSError, ...) beside this one, so
callers that catch those still do. A KeyError's message prints as written, not in quotes.

A key, value or name that comes from a file (a GGUF's metadata key, a tensor name, a token, a config
value) goes into a message through `quote()`: printable, and cut to QUOTE_LIMIT characters with its
full length given, so that a misread 4.7 MB key still makes a line a person can read.
"""

from __future__ import annotations

QUOTE_LIMIT = 200  # characters of one quoted key, value or name in an error line


class BytesupError(Exception):
    """An expected failure; str() is its one line."""

    def __str__(self) -> str:
        if len(self.args) == 1 and isinstance(self.args[0], str):
            return self.args[0]
        return super().__str__()


def printable(text: str) -> str:
    """`text` with every non-printable character escaped (\\n, \\x1b, \\u2028 ...).

    Names and values in GGUF files are arbitrary UTF-8; anything we print goes through
    this so that one value is always one line and cannot drive the terminal.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def cut(text: str, limit: int = QUOTE_LIMIT) -> str:
    """A name from a file shown bare (no quotes), printable, cut to `limit` characters with its full length."""
    if len(text) <= limit:
        return printable(text)
    return f"{printable(text[:limit])}... ({len(text):,} characters)"


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`value` as an error line quotes it: its repr, printable, at most about `limit` characters.

        quote("blk.0.attn_q.weight")   -> "'blk.0.attn_q.weight'"
        quote("x" * 4_700_000)          -> "'xxx...xxx'... (4,700,000 characters)"
        quote(list(range(10**6)))       -> "[0, 1, 2, ..., 41, ...] (1,000,000 items)"

    Long sequences are cut before their repr is built, so quoting a huge value costs its first items.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return printable(repr(value))
        return f"{printable(repr(value[:limit]))}... ({len(value):,} characters)"
    if isinstance(value, (bytes, bytearray)):
        if len(value) <= limit:
            return repr(bytes(value))
        return f"{bytes(value[:limit])!r}... ({len(value):,} bytes)"
    if isinstance(value, (list, tuple, dict)):
        items = value.items() if isinstance(value, dict) else value
        open_, close = {list: "[]", tuple: "()", dict: "{}"}.get(type(value), "[]")
        shown, used = [], 2
        for item in items:
            text = (
                f"{quote(item[0], limit)}: {quote(item[1], limit)}" if isinstance(value, dict) else quote(item, limit)
            )
            if used + len(text) > limit and shown:
                return f"{open_}{', '.join(shown)}, ...{close} ({len(value):,} items)"
            shown.append(text)
            used += len(text) + 2
        return f"{open_}{', '.join(shown)}{close}"
    text = printable(repr(value))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"

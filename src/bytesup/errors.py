"""The one base of every expected failure (STYLE §18).

A bad config, a wrong checksum, a malformed GGUF, a model the lessons do not follow, a report that
does not verify: each raises a subclass of `BytesupError` whose message is the one line the user
reads (what went wrong, with the file, key or tensor, and what to do next). The command line and
the workflow's scripts catch `BytesupError` in one place (`bytesup.cli.main`,
`bytesup.run.joblog.job_logging`) and print that line; anything else is a bug and keeps its
traceback.

Subclasses keep the builtin base they had (ValueError, KeyError, OSError, ...) beside this one, so
callers that catch those still do. A KeyError's message prints as written, not in quotes.
"""

from __future__ import annotations


class BytesupError(Exception):
    """An expected failure; str() is its one line."""

    def __str__(self) -> str:
        if len(self.args) == 1 and isinstance(self.args[0], str):
            return self.args[0]
        return super().__str__()

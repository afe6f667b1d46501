"""Logging for the workflow's scripts: the rule's log file and stderr, one format."""

from __future__ import annotations

import contextlib
import logging
import sys


@contextlib.contextmanager
def job_logging(log_path: str | None, name: str = "bytesup"):
    """Send the package's log lines to stderr and (when the rule has one) its log file."""
    logger = logging.getLogger(name)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        handlers.append(logging.FileHandler(log_path, mode="w"))
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield logger
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()

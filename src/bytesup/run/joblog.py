"""Logging for the workflow's scripts: the rule's log file and stderr, one format.

A disk that fills up in a job ends it with one line naming the stage, the file and the free space,
not a traceback (the stage is the log's folder: logs/<stage>/<model>.log).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import sys
from pathlib import Path


def no_space_message(stage: str, err: OSError) -> str:
    """One line for a write that failed with ENOSPC: the stage, the file, what is free where."""
    where = Path(err.filename).parent if err.filename else Path.cwd()
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    what = f" writing {err.filename}" if err.filename else ""
    return (
        f"{stage}: no space left on the disk{what} ({free / 2**20:.1f} MiB free in {where}); "
        "free some space and run again (its unfinished outputs are redone)"
    )


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
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        logger.error("%s", no_space_message(Path(log_path).parent.name if log_path else "job", err))
        sys.exit(1)
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()

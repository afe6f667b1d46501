"""Logging for the workflow's scripts: the rule's log file and stderr, one format, one handler.

Every expected failure (a `BytesupError`) ends the job with its one line, not a traceback; so does
a disk that fills up, naming the stage, the file and the free space (the stage is the log's folder:
logs/<stage>/<model>.log). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import sys
from pathlib import Path

from bytesup.errors import BytesupError


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


def as_the_user_knows(message: str, shown: dict[str, str]) -> str:
    """`message` with each path the job used (relative to the project, or made absolute by whoever
    opened it) replaced by the name the user knows: a local model's file, not its link under
    resources/. The absolute form goes first, or its project prefix would stay before the name."""
    for internal, name in shown.items():
        message = message.replace(os.path.abspath(internal), name).replace(internal, name)
    return message


@contextlib.contextmanager
def job_logging(log_path: str | None, name: str = "bytesup", shown: dict[str, str] | None = None):
    """Send the package's log lines to stderr and (when the rule has one) its log file.

    A `BytesupError` raised inside is logged as its one line and ends the job (exit status 1).
    `shown` maps paths the job uses to the names the user knows: a local model's messages name
    the user's file, not the link or copy under resources/."""
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
    except BytesupError as err:
        logger.error("%s", as_the_user_knows(str(err), shown or {}))
        sys.exit(1)
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        logger.error("%s", no_space_message(Path(log_path).parent.name if log_path else "job", err))
        sys.exit(1)
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()

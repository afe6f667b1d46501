"""Finding files relative to the project, so a notebook opens the same way from anywhere.

Rules pass paths relative to the project root (the folder holding ``Snakefile``). A student who
opens a notebook in Jupyter starts in workflow/notebooks/, so relative paths are resolved
against the project root, found by walking up from the current directory.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from bytesup.errors import BytesupError

MARKER = "Snakefile"


class ProjectRootNotFound(BytesupError, FileNotFoundError):
    pass


def project_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: the current directory) holding Snakefile."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MARKER).is_file():
            return folder
    raise ProjectRootNotFound(
        f"no {MARKER} in {here} or any folder above it; run from inside the llm-bytes-up checkout "
        "or pass absolute paths"
    )


def resolve(path: str | Path, root: str | Path | None = None) -> Path:
    """An absolute path: absolute paths are kept, relative ones are taken from the project root.

    The root is only looked for when needed, so absolute paths work outside a checkout too.
    """
    path = Path(path).expanduser()
    if path.is_absolute():
        return path
    return (Path(root) if root is not None else project_root()) / path


def not_a_file(path: str | os.PathLike) -> str | None:
    """None when `path` is a regular file (through its links), else what it is, for a message:
    "no such file", "a symlink loop", "a link to <target>, which is gone", "a directory", ..."""
    path = Path(path).expanduser()
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symlink loop (a link that leads back to itself)"
        if err.errno == errno.ENOENT and path.is_symlink():
            return f"a link to {os.readlink(path)}, which is gone"
        if err.errno == errno.ENOENT:
            return "no such file"
        return err.strerror or str(err)
    if stat.S_ISREG(mode):
        return None
    return "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, socket or device)"

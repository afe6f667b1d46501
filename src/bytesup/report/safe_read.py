"""Reading a shared report's files as untrusted input: only regular files inside the root, with a cap.

A report folder or archive comes from someone else. What `bytesup verify` opens goes through here:

- ``inside(root, rel)``: a relative path (no leading '/', no '..', no NUL or backslash) resolved with
  its symlinks followed, kept only when it lands inside the root (a symlink out is refused);
- ``open_regular(path)``: opened with O_NOFOLLOW (the last component is no symlink) and O_NONBLOCK (a
  FIFO does not block the open), then fstat'ed: anything but a regular file (FIFO, device, socket,
  directory) is refused before a byte is read;
- ``read_capped`` and ``sha256_regular`` read through that one door, ``read_capped`` at most ``cap``
  bytes (one more tells it the file is larger).

Each refusal is an UnsafeFileError (an OSError too) whose message is one line.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from bytesup.errors import BytesupError
from bytesup.gguf.file import printable

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symlink"),
)


class UnsafeFileError(BytesupError, OSError):
    """A path a report names that is not a regular file inside its root, or is too large: one line."""


def kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def inside(root: str | os.PathLike, rel: str) -> Path | None:
    """``root/rel`` with its symlinks resolved, or None when ``rel`` is not a plain relative path or
    resolves outside ``root``."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel:
        return None
    parts = PurePosixPath(rel)
    if parts.is_absolute() or ".." in parts.parts:
        return None
    real_root = os.path.realpath(root)
    target = os.path.realpath(os.path.join(real_root, rel))
    if os.path.commonpath([real_root, target]) != real_root:
        return None
    return Path(target)


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading, when it is a regular file (not through a symlink, not a FIFO or device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:  # the last component is a symlink (O_NOFOLLOW), or a loop of them
            raise UnsafeFileError(f"{printable(str(path))}: a symlink (not followed)") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFileError(f"{printable(str(path))}: {kind(mode)}, not a regular file: not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def not_regular(path: str | os.PathLike) -> str | None:
    """None when ``path`` is a regular file or does not exist; else what it is ('a FIFO', ...), unopened."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    return None if stat.S_ISREG(mode) else kind(mode)


def read_capped(path: str | os.PathLike, cap: int, what: str = "a report's file") -> bytes:
    """The whole file, when it is a regular file of at most ``cap`` bytes (`what` it is, for the message)."""
    with open_regular(path) as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise UnsafeFileError(f"{printable(str(path))}: over {cap:,} bytes, more than {what} holds: not read")
    return data


def sha256_regular(path: str | os.PathLike) -> tuple[str, int]:
    """(sha256 hex digest, bytes read) of a regular file, read in chunks."""
    with open_regular(path) as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
        return digest, fh.tell()


MAX_LISTED = 100_000  # entries of a report folder (a real one: about 15)


def listing(folder: str | os.PathLike, limit: int = MAX_LISTED) -> list[tuple[str, str | None]]:
    """Every entry below ``folder``, sorted: (path relative to it, None for a regular file or what it is
    else: 'a FIFO', 'a symlink', ...). Folders are entered, symlinks not followed."""
    out, stack = [], [(os.fspath(folder), "")]
    while stack:
        base, rel = stack.pop()
        with os.scandir(base) as entries:
            for entry in entries:
                name = rel + entry.name
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, name + "/"))
                    continue
                mode = entry.stat(follow_symlinks=False).st_mode
                out.append((name, None if stat.S_ISREG(mode) else kind(mode)))
                if len(out) > limit:
                    raise UnsafeFileError(
                        f"{printable(os.fspath(folder))}: more than {limit:,} files: not a report folder"
                    )
    return sorted(out)

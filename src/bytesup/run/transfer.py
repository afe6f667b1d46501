"""What every source of the fetch shares: the errors, the pins, streaming bytes while hashing them,
progress lines, and publishing a verified file (`<dest>.part` renamed onto `dest` only once it matches).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bytesup.errors import BytesupError

log = logging.getLogger("bytesup.run.fetch")

CHUNK = 1 << 20  # 1 MiB reads: full disk/network speed, flat memory for a 7 GB file
PROGRESS_MIN_BYTES = 64 << 20  # smaller transfers log one line at the end, not a line per step
PROGRESS_STEP_PERCENT = 5

OTHER_SOURCES = (
    "other sources: a PyPI-shipped model (model=smollm2-135m, the default) or a local GGUF file "
    "(source: path; snakemake --config model=local models='{local: {path: /path/to/model.gguf}}', "
    "or edit models: in config/config.yaml)"
)

SHA256 = re.compile(r"[0-9a-f]{64}")


class FetchError(BytesupError, RuntimeError):
    """A model could not be fetched. The message is one line that says what to do."""


class ChecksumError(FetchError):
    """The bytes are not the ones the config pins (size or sha256). Nothing was left at dest."""


@dataclass(frozen=True)
class Pins:
    """What the config promises about the file; None means 'not pinned'."""

    sha256: str | None
    size: int | None


def file_sha256(path: Path, *, progress: bool = True) -> str:
    """sha256 of a file, read in chunks (a 7 GB model never sits in memory)."""
    path = Path(path)
    hasher = hashlib.sha256()
    with open(path, "rb") as f:
        copy_hashing(f, None, hasher, Progress(f"hashing {path.name}", path.stat().st_size, progress))
    return hasher.hexdigest()


def verify_and_publish(name, pins, part, dest, sha256, size, shown):
    """Check size and sha256 of ``part``; rename it onto ``dest`` only if both match."""
    try:
        check_size(name, pins, size, shown)
        check_sha256(name, pins, sha256, shown)
    except ChecksumError:
        discard_partial(part)
        raise
    os.replace(part, dest)
    sidecar(part).unlink(missing_ok=True)


def check_size(name: str, pins: Pins, size: int, shown: str) -> None:
    if pins.size is not None and size != pins.size:
        raise ChecksumError(
            f"size mismatch for {shown} (model {name}): expected {pins.size} bytes, "
            f"got {size}; nothing was written. Check models.{name}.size and the source"
        )


def check_sha256(name: str, pins: Pins, sha256: str, shown: str) -> None:
    if pins.sha256 is not None and sha256 != pins.sha256:
        raise ChecksumError(
            f"sha256 mismatch for {shown} (model {name}): expected {pins.sha256}, "
            f"got {sha256}; nothing was written. Check models.{name}.sha256 and the source"
        )


class Progress:
    """A log line every PROGRESS_STEP_PERCENT of a big transfer.

    Lines, not a terminal bar: Snakemake sends them to the rule's log, where a bar would be noise.
    """

    def __init__(self, label: str, total: int | None, enabled: bool, done: int = 0):
        self.label, self.total, self.done, self.start = label, total, done, done
        self.enabled = enabled and total is not None and total >= PROGRESS_MIN_BYTES
        self.next_percent = self._step_after(done)
        self.t0 = time.monotonic()

    def _step_after(self, done: int) -> int:
        if not self.total:
            return 101
        return (done * 100 // self.total // PROGRESS_STEP_PERCENT + 1) * PROGRESS_STEP_PERCENT

    def update(self, n: int) -> None:
        self.done += n
        if self.enabled and self.done * 100 // self.total >= self.next_percent:
            seconds = max(time.monotonic() - self.t0, 1e-9)
            log.info(
                "%s: %3d%% (%.1f of %.1f MB, %.1f MB/s)",
                self.label,
                self.done * 100 // self.total,
                self.done / 1e6,
                self.total / 1e6,
                (self.done - self.start) / 1e6 / seconds,
            )
            self.next_percent = self._step_after(self.done)


def copy_hashing(src: BinaryIO, dst: BinaryIO | None, hasher, progress: Progress) -> int:
    """Stream src into dst (None: just hash) one CHUNK at a time; return the number of bytes."""
    n = 0
    while chunk := src.read(CHUNK):
        hasher.update(chunk)
        if dst is not None:
            dst.write(chunk)
        n += len(chunk)
        progress.update(len(chunk))
    return n


def partial_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def sidecar(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def discard_partial(part: Path) -> None:
    part.unlink(missing_ok=True)
    sidecar(part).unlink(missing_ok=True)


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check_disk_space(name: str, folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise FetchError(
            f"models.{name}: fetch: {folder} has {free / 1e9:.3f} GB free, the model needs "
            f"{needed / 1e9:.3f} GB more; free some space and run again"
        )


def raise_if_disk_full(err: BaseException, name: str, folder: Path, needed: int) -> None:
    """A disk that filled up while writing becomes the one-line FetchError (the partial file is gone)."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        free = shutil.disk_usage(folder).free
        raise FetchError(
            f"models.{name}: fetch: no space left on the disk of {folder} ({free / 1e9:.3f} GB free "
            f"after removing the partial file; the model needs {needed / 1e9:.3f} GB); "
            "free some space and run again"
        ) from None


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def required(name: str, spec: dict, key: str):
    value = spec.get(key)
    if value in (None, ""):
        raise FetchError(f"models.{name}.{key} is missing (needed for source {spec.get('source')})")
    return value

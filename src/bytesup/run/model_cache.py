"""The cached model, checked before any stage uses it and around every job that reads it.

The fetch verified the bytes once; bytes flipped, truncated, replaced or deleted since would otherwise go
through every stage into a report that cites the fetched file's sha256 while its numbers come from other
bytes. Each file of the model (each part of a split model) is hashed in full only when its size, mtime or
inode differ from those of its last verified hash (`<model>.gguf.verified.json`), so a 7 GB model is read
once per change, not per run or per job.

    cached_model_problem(...)        at the start of a run (workflow/rules/common.smk): a problem drops
                                     the fetch record, so the fetch and every stage after it run again
    with reading_model(gguf, record): around every job that maps the model (extract, timing, lessons):
        ...                          checked before and after it reads; a changed file stops the job in
                                     one line (ModelChangedError), and the next start fetches it again
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from bytesup.run.transfer import FetchError, file_sha256, read_json


class ModelChangedError(FetchError):
    """The model on disk is not the one its fetch recorded; the message is one line naming the file."""


def _verified_path(gguf: Path) -> Path:
    """Where the fingerprints of the last full hashes of a cached model are kept (beside the record)."""
    return gguf.with_name(gguf.name + ".verified.json")


def _fingerprint(path: Path) -> dict:
    st = os.stat(path)  # follows a symlink: the fingerprint of the bytes, wherever they lie
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "dev": st.st_dev}


def model_files(gguf: Path, record: dict) -> list[tuple[Path, int | None, str | None]]:
    """(path, size, sha256) of each file of the fetched model: its parts for a split model, else itself."""
    gguf = Path(gguf)
    parts = record.get("parts")
    if isinstance(parts, list) and parts:
        return [(gguf.with_name(str(p.get("file"))), p.get("size"), p.get("sha256")) for p in parts]
    return [(gguf, record.get("size"), record.get("sha256"))]


def mark_verified(gguf: Path, record: dict) -> None:
    """Remember that the model's files, as they are now on disk (size, mtime, inode), hash as `record` says."""
    gguf = Path(gguf)
    files = {path.name: {"sha256": sha256, **_fingerprint(path)} for path, _, sha256 in model_files(gguf, record)}
    target = _verified_path(gguf)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # two jobs may mark at once: whole files only
    tmp.write_text(json.dumps({"sha256": record.get("sha256"), "files": files}, sort_keys=True) + "\n")
    os.replace(tmp, target)


def cached_model_problem(name: str, spec: dict, gguf: Path, record_path: Path, *, progress: bool = False):
    """Why the cached model ``gguf`` (with its fetch record) must not be used as it is; None when it may.

    A file whose size, mtime and inode are those of its last verified hash is not read again; one that
    changed is hashed, and is a problem only when its bytes did. Nothing there yet (no record, no file)
    is no problem: the fetch runs anyway.
    """
    gguf, record_path = Path(gguf), Path(record_path)
    record = read_json(record_path) if record_path.is_file() else None
    present = gguf.exists() or gguf.is_symlink()
    if not isinstance(record, dict):
        return f"{gguf} has no fetch record ({record_path}): the fetch did not finish" if present else None
    pinned = spec.get("sha256")
    if pinned and pinned.lower() != record.get("sha256"):
        return f"{gguf} was fetched with sha256 {record.get('sha256')}, but models.{name}.sha256 now pins {pinned}"
    files = model_files(gguf, record)
    for path, size, _ in files:
        if path.is_symlink() and not path.exists():
            return f"{path} is a link to {os.readlink(path)}, which is gone"
        if not path.exists():
            return f"{path} is missing"
        have = path.stat().st_size
        if have != size:
            how = "truncated" if have < (size or 0) else "changed"
            return f"{path} is {how}: {have} bytes, its fetch recorded {size}"
    seen = (read_json(_verified_path(gguf)) or {}).get("files") or {}
    changed = False
    for path, _, sha256 in files:
        if seen.get(path.name) == {"sha256": sha256, **_fingerprint(path)}:
            continue
        actual = file_sha256(path, progress=progress)
        if actual != sha256:
            return f"{path} hashes to {actual}, not the {sha256} its fetch verified (damaged or replaced on disk?)"
        changed = True
    if changed:
        mark_verified(gguf, record)
    return None


def check_model(gguf: Path, record_path: Path) -> None:
    """Raise ModelChangedError unless the model at `gguf` is, byte for byte, the one its fetch recorded."""
    problem = cached_model_problem("", {}, gguf, record_path)
    if problem:
        raise ModelChangedError(
            f"{problem}: this is not the model the run fetched and cites, so the job stops; run again, and"
            " its start fetches the model again"
        )


@contextlib.contextmanager
def reading_model(gguf: Path, record_path: Path):
    """Check the model before the job reads it and again after (see the module docstring)."""
    check_model(gguf, record_path)
    yield
    check_model(gguf, record_path)

"""Publishing a built report: put its folder in place and write its archive.

`publish()` moves the folder into place, keeps an earlier report of the same date aside
(report/<date>.1/, .2/, ...; never overwritten), and writes the archive report/<date>.zip: one
folder, llm-bytes-up-<date>/, holding report/<date>/ and every cited file at its path relative
to the project, so the links and `bytesup verify` work wherever it is unpacked.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path, PurePosixPath

READABLE = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH  # 0644: a shared report is readable


def aside_name(final: Path, archive: Path) -> tuple[Path, Path]:
    """The first free report/<date>.<n>/ and report/<date>.<n>.zip, n = 1, 2, ..."""
    n = 1
    while True:
        folder = final.with_name(f"{final.name}.{n}")
        zipped = archive.with_name(f"{final.name}.{n}.zip")
        if not folder.exists() and not zipped.exists():
            return folder, zipped
        n += 1


def keep_aside(final: Path, archive: Path) -> Path | None:
    """Move an earlier report of this date (folder and archive) to report/<date>.<n>; return where.

    An empty folder (Snakemake creates the output folder before the job runs) is removed.
    """
    has_folder = final.is_dir() and any(final.iterdir())
    if final.is_dir() and not has_folder:
        final.rmdir()
    if not has_folder and not archive.exists():
        return None
    folder, zipped = aside_name(final, archive)
    if has_folder:
        os.replace(final, folder)
    if archive.exists():
        os.replace(archive, zipped)
    return folder


def publish(stage: Path, final: Path, archive: Path) -> Path | None:
    """Put a built report (in `stage`, a sibling of `final`) in place with its archive.

    The archive is written first, from `stage`, beside `archive` as .<name>.building; only once it
    is whole is anything moved. So a failure (a full disk) leaves the earlier report, its archive
    and the folder names as they were: no half-written archive, no report/<date>.<n>/ kept aside
    for a report that never arrived. Returns where an earlier report of the same date was kept.
    """
    staged = archive.with_name(f".{archive.name}.building")
    try:
        write_archive(stage, staged, name=final.name)
        kept = keep_aside(final, archive)
        os.replace(stage, final)
        os.replace(staged, archive)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return kept


def _safe_member(path: str) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"{path}: a cited path must be relative to the project and stay inside it")
    return str(p)


def archive_folder(name: str) -> str:
    """The one folder an archive unpacks into, named after the report (its date): llm-bytes-up-<date>."""
    return f"llm-bytes-up-{name}"


def _add(zf: zipfile.ZipFile, source: Path, member: str) -> None:
    """One file, readable by everyone who unpacks it (0644), whatever its mode here."""
    info = zipfile.ZipInfo.from_file(source, member)
    info.external_attr = (stat.S_IFREG | READABLE) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(source, "rb") as src, zf.open(info, "w") as dst:
        while block := src.read(1 << 20):
            dst.write(block)


def write_archive(report_dir: Path, archive: Path, root: Path = Path("."), name: str | None = None) -> None:
    """llm-bytes-up-<name>/: report/<name>/ (every file of `report_dir`) plus every cited file at its
    project path. `name` is the report's folder name (default: report_dir's). Written to a .tmp
    first, removed if anything fails."""
    name = name or report_dir.name
    manifest = json.loads((report_dir / "manifest.json").read_text(encoding="utf-8"))
    top = PurePosixPath(archive_folder(name))
    prefix = top / "report" / name
    tmp = archive.with_name(archive.name + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(p for p in report_dir.rglob("*") if p.is_file()):
                _add(zf, path, str(prefix / path.relative_to(report_dir).as_posix()))
            for entry in manifest["files"]:
                if not entry.get("in_report"):
                    member = _safe_member(entry["path"])
                    _add(zf, root / member, str(top / member))
        os.chmod(tmp, READABLE)
        os.replace(tmp, archive)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

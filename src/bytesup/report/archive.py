"""A report's archive read as untrusted input: members hashed as they stream, never unpacked whole.

`bytesup verify report/<date>.zip` needs the files the manifest names on disk (the page is
re-rendered from them), and nothing else. So, before a byte is decompressed, the archive's
directory is bounded (MAX_DIRECTORY_BYTES, read from the end record before zipfile parses it),
every member name must stay inside one folder, none may appear twice, and exactly one
<top>/report/<date>/manifest.json must be there; the manifest is read (at most manifest.MAX_BYTES)
and checked (bytesup.report.manifest). Then only the members the manifest names are streamed: read
raw from the archive FEED bytes at a time, inflated here at most BLOCK bytes per step, hashed as they
go and written to the caller's folder, and refused in one line (ArchiveError) as soon as

- a member unpacks to more bytes than its manifest entry says (pages without one: MAX_PAGE_BYTES),
- what it has unpacked so far passes MAX_RATIO times the compressed bytes read so far (past
  RATIO_FLOOR: a run of zeros stops within a few MB, whatever its entry claims),
- all members together pass MAX_TOTAL_BYTES, or
- it is compressed with anything but stored or deflate (an LZMA member chooses its own dictionary),
  or encrypted.

So the disk holds at most what the manifest declares, within MAX_TOTAL_BYTES, and a zip bomb stops
within its first few megabytes. Members the manifest does not name are listed as added, never decompressed.
A damaged archive (CRC, truncation, a local header that disagrees with the directory) is one line.
"""

from __future__ import annotations

import hashlib
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from bytesup.errors import BytesupError
from bytesup.gguf.file import printable
from bytesup.report import manifest as manifest_mod
from bytesup.report.safe_read import inside, open_regular

MAX_DIRECTORY_BYTES = 4 << 20  # the central directory: a real report's is ~15 kB for ~130 members
MAX_PAGE_BYTES = 256 << 20  # index.html, report.md (a real one: 1 MB)
MAX_TOTAL_BYTES = 1 << 30  # everything written out for one verify (a real report's files: tens of MB)
MAX_RATIO = 200  # decompressed / compressed, past RATIO_FLOOR (deflate's own ceiling is ~1,030)
RATIO_FLOOR = 1 << 20
METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
BLOCK = 1 << 20  # the most bytes one inflate step may give
FEED = 16 << 10  # compressed bytes read at a time: a bomb is caught within MAX_RATIO * FEED (3.2 MB)
LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # signature ... file name length, extra field length


class ArchiveError(BytesupError, ValueError):
    """An archive refused before or while it streams: damaged, oversized, a bomb, or laid out wrongly."""


class _Broken(ArchiveError):
    """A member whose bytes are not what the directory says: the archive is damaged (one line, by unpack)."""


def damaged(path: Path, why: object) -> ArchiveError:
    return ArchiveError(f"{path}: the archive is damaged ({printable(str(why))[:200]}); fetch or copy it again")


@dataclass
class Unpacked:
    """What came out: the report folder and its root (in the caller's folder), each written member's
    (sha256, bytes) by its manifest entry (in_report, path), and the members the manifest does not name."""

    report_dir: Path
    top: Path
    hashed: dict[tuple[bool, str], tuple[str, int]] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)


def _names_checked(archive: Path, infos: list[zipfile.ZipInfo]) -> None:
    seen = set()
    for info in infos:
        name = info.filename
        p = PurePosixPath(name)
        if p.is_absolute() or ".." in p.parts or "\\" in name or "\x00" in name or not p.parts:
            raise ArchiveError(f"{archive}: member {printable(name)[:200]!r} would land outside the archive's folder")
        if name in seen:
            raise ArchiveError(
                f"{archive}: member {printable(name)[:200]!r} appears twice; an archive bytesup"
                " writes has each file once"
            )
        seen.add(name)


def _compressed(fh: BinaryIO, info: zipfile.ZipInfo, name: str):
    """The member's compressed bytes, block by block, read straight from the archive after its local header."""
    if info.flag_bits & 0x1:
        raise ArchiveError(f"{name}: encrypted; bytesup archives are not")
    fh.seek(info.header_offset)
    header = fh.read(LOCAL_HEADER.size)
    if len(header) != LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise _Broken(f"{name}: no local header where the directory says")
    name_length, extra_length = LOCAL_HEADER.unpack(header)[-2:]
    local = fh.read(name_length).decode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
    if local != info.orig_filename:
        raise _Broken(f"{name}: its local header names {printable(local)[:200]!r}")
    fh.seek(extra_length, 1)
    left = info.compress_size
    while left:
        block = fh.read(min(FEED, left))
        if not block:
            raise _Broken(f"{name}: the archive ends inside it")
        left -= len(block)
        yield block


def _stream(fh: BinaryIO, info: zipfile.ZipInfo, limit: int, what: str, total: list[int], sink) -> str:
    """Decompress one member into `sink` (a callable taking each block) under the bounds above; its sha256.

    Inflated here, not through zipfile.open(), so that the ratio is checked against the compressed
    bytes read SO FAR: a run of zeros stops after RATIO_FLOOR, not after MAX_RATIO times the member."""
    name = printable(info.filename)[:200]
    if info.compress_type not in METHODS:
        raise ArchiveError(f"{name}: compressed with method {info.compress_type}; bytesup archives use deflate")
    if info.file_size > limit:
        raise ArchiveError(f"{name}: {info.file_size:,} bytes unpacked, more than {what} ({limit:,}): not unpacked")
    inflate = zlib.decompressobj(-zlib.MAX_WBITS) if info.compress_type == zipfile.ZIP_DEFLATED else None
    h, crc, size, consumed = hashlib.sha256(), 0, 0, 0

    def out(block: bytes) -> None:
        nonlocal crc, size
        size += len(block)
        total[0] += len(block)
        if size > limit:
            raise ArchiveError(f"{name}: more than {limit:,} bytes unpacked, more than {what}: stopped there")
        if size > RATIO_FLOOR and size > MAX_RATIO * consumed:
            raise ArchiveError(
                f"{name}: unpacks to over {MAX_RATIO} times its compressed bytes (a zip bomb?):"
                f" stopped after {size:,} bytes"
            )
        if total[0] > MAX_TOTAL_BYTES:
            raise ArchiveError(f"{name}: the members unpacked so far pass {MAX_TOTAL_BYTES:,} bytes: stopped there")
        h.update(block)
        crc = zlib.crc32(block, crc)
        sink(block)

    for block in _compressed(fh, info, name):
        consumed += len(block)
        if inflate is None:
            out(block)
            continue
        while block:
            out(inflate.decompress(block, BLOCK))  # at most BLOCK bytes out per call, whatever went in
            block = inflate.unconsumed_tail
    if inflate is not None:
        while not inflate.eof and (block := inflate.decompress(b"", BLOCK)):
            out(block)
        if not inflate.eof:
            raise _Broken(f"{name}: its compressed data ends early")
    if size != info.file_size or crc != info.CRC:
        raise _Broken(f"{name} fails its checksum")
    return h.hexdigest()


def _write_to(path: Path) -> tuple[Callable[[bytes], int], Callable[[], None]]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "xb")  # a fresh folder of ours: a name written twice is a bug, not an overwrite
    return fh.write, fh.close


def unpack(archive: Path, dest: Path, format_: str, report_files: Callable[[dict], set[str]]) -> Unpacked:
    """The manifest-named members of `archive` under `dest`, checked as described above.

    `report_files(manifest)`: the files a report folder holds (relative to it)."""
    try:
        with open_regular(archive) as fh:
            end = zipfile._EndRecData(fh)  # the end record alone: how large the directory says it is
            if end is None:
                raise damaged(archive, "no end of central directory: truncated or overwritten")
            if end[zipfile._ECD_SIZE] > MAX_DIRECTORY_BYTES:
                raise ArchiveError(
                    f"{archive}: a directory of {end[zipfile._ECD_SIZE]:,} bytes, more than a"
                    f" report's archive holds ({MAX_DIRECTORY_BYTES:,}): not read"
                )
            with zipfile.ZipFile(fh) as zf:
                infos = zf.infolist()
            return _unpack(fh, infos, archive, dest, format_, report_files)
    except (_Broken, zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError) as err:
        raise damaged(archive, err) from None
    except OSError as err:
        if isinstance(err, BytesupError):
            raise
        raise ArchiveError(f"{archive}: {printable(err.strerror or str(err))} while unpacking it into {dest}") from None


def _unpack(fh: BinaryIO, infos: list[zipfile.ZipInfo], archive: Path, dest: Path, format_: str, report_files):
    _names_checked(archive, infos)
    found = [
        i
        for i in infos
        if len(PurePosixPath(i.filename).parts) == 4
        and PurePosixPath(i.filename).parts[1] == "report"
        and i.filename.endswith("/manifest.json")
    ]
    if len(found) != 1:
        raise ArchiveError(
            f"{archive}: expected one llm-bytes-up-<date>/report/<date>/manifest.json inside, found {len(found)}"
        )
    top_name, _, date, _ = PurePosixPath(found[0].filename).parts
    prefix = f"{top_name}/report/{date}/"
    total = [0]
    data = bytearray()
    _stream(fh, found[0], manifest_mod.MAX_BYTES, "a report's manifest holds", total, data.extend)
    where = f"{archive} ({found[0].filename})"
    manifest = manifest_mod.parse(bytes(data), where, format_)
    top, report_dir = dest / top_name, dest / top_name / "report" / date
    report_dir.mkdir(parents=True)
    (report_dir / "manifest.json").write_bytes(data)
    # member name -> (where it goes, the most bytes it may unpack to, what says so, its key in `hashed`)
    wanted: dict[str, tuple[Path, int, str, tuple[bool, str] | None]] = {}
    for name in report_files(manifest) - {"manifest.json"}:
        if inside(report_dir, name) is not None:
            wanted[prefix + name] = (report_dir / name, MAX_PAGE_BYTES, "a report's page holds", None)
    for entry in manifest["files"]:
        base, member = (report_dir, prefix) if entry["in_report"] else (top, f"{top_name}/")
        if inside(base, entry["path"]) is not None:
            key = (entry["in_report"], entry["path"])
            wanted[member + entry["path"]] = (base / entry["path"], entry["bytes"], "its manifest entry says", key)
    result = Unpacked(report_dir, top)
    for info in infos:
        if info.filename == found[0].filename or info.is_dir():
            continue
        if info.filename not in wanted:
            name = printable(info.filename)[:300]
            if info.filename.startswith(prefix):
                result.added.append(
                    f"{name[len(prefix) :]}: in the report folder but not in its manifest (an added file)"
                )
            else:
                result.added.append(f"{name}: in the archive but not in the report's manifest (an added file)")
            continue
        path, limit, what, key = wanted[info.filename]
        write, close = _write_to(path)
        try:
            digest = _stream(fh, info, limit, what, total, write)
        finally:
            close()
        if key is not None:
            result.hashed[key] = (digest, path.stat().st_size)
    return result

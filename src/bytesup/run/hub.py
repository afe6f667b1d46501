"""The Hugging Face hub source of the fetch: a resumable HTTP download of one file of a repository.

Why the download is our own loop and not ``hf_hub_download``: huggingface_hub 2.x downloads into a
process-unique ``*.incomplete`` file and deletes it when the download fails, so a 7 GB download cut
at 90 % starts again from zero on the next run. We ask the hub for the file's metadata with
``get_hf_file_metadata`` (the same HEAD request, token and redirect rules as ``hf_hub_download``) and
stream the bytes with an HTTP ``Range`` request that continues ``<dest>.part``. ``<dest>.part.json``
remembers which commit and ETag those bytes belong to, so bytes of two revisions are never spliced.
Since the bytes land beside ``dest`` there is no second copy in a hub cache either.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from bytesup.run.transfer import (
    OTHER_SOURCES,
    SHA256,
    ChecksumError,
    FetchError,
    Pins,
    Progress,
    check_disk_space,
    check_size,
    copy_hashing,
    discard_partial,
    first_line,
    partial_path,
    read_json,
    required,
    sidecar,
    verify_and_publish,
)

log = logging.getLogger("bytesup.run.fetch")

_COMMIT = re.compile(r"[0-9a-f]{40}")


def fetch_hf(name: str, spec: dict, dest: Path, pins: Pins, progress: bool):
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    repo_id = required(name, spec, "repo_id")
    filename = required(name, spec, "filename")
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
    if pins.sha256 and meta.etag and SHA256.fullmatch(meta.etag) and meta.etag != pins.sha256:
        raise ChecksumError(
            f"sha256 mismatch for {filename} (model {name}): the hub reports {meta.etag} at commit "
            f"{meta.commit_hash}, config expects {pins.sha256}; check models.{name}.sha256 and .revision"
        )
    if meta.size is not None:
        check_size(name, pins, meta.size, f"{filename} on the hub")

    headers = build_hf_headers()  # user-agent, plus the token from HF_TOKEN / `hf auth login` if any
    headers["Accept-Encoding"] = "identity"  # sizes and Range offsets are of the raw bytes
    if _origin(meta.location) != _origin(url):
        headers.pop("authorization", None)  # a redirect to a CDN gets a signed URL, never our token
    part = partial_path(dest)
    identity = {"repo_id": repo_id, "filename": filename, "commit": meta.commit_hash, "etag": meta.etag}
    sha256, size = _resumable_get(name, meta.location, headers, part, identity, meta.size, filename, progress)
    verify_and_publish(name, pins, part, dest, sha256, size, filename)
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
            f"({type(err).__name__}: {first_line(err)}); {OTHER_SOURCES}"
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
    sidecar_path = sidecar(part)
    offset = 0
    if part.exists():
        have = part.stat().st_size
        if read_json(sidecar_path) == identity and (total is None or have <= total):
            offset = have
        else:
            log.info("%s: discarding %s: it holds bytes of another file or revision", name, part.name)
            discard_partial(part)
    if total is not None:
        check_disk_space(name, part.parent, total - offset)
    sidecar_path.write_text(json.dumps(identity, sort_keys=True) + "\n")

    hasher = hashlib.sha256()
    if offset:
        log.info("%s: resuming %s at byte %d of %s", name, filename, offset, total)
        with open(part, "rb") as f:  # the hash must cover the bytes a previous run wrote
            copy_hashing(f, None, hasher, Progress(f"{name}: re-hashing the partial file", offset, progress))
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
            f"({first_line(err)}); {interrupted}"
        ) from None
    with response:
        if offset and response.status == 200:
            log.info("%s: the server ignored the Range request; starting %s again", name, filename)
            offset, hasher = 0, hashlib.sha256()
        elif offset and not (response.headers.get("Content-Range") or "").startswith(f"bytes {offset}-"):
            discard_partial(part)
            raise FetchError(
                f"models.{name}: the server resumed {filename} at the wrong offset "
                f"({response.headers.get('Content-Range')!r}); run again to restart it"
            )
        label = f"{name}: downloading {filename}"
        try:
            with open(part, "ab" if offset else "wb") as out:
                bar = Progress(label, total, progress, done=offset)
                size = offset + copy_hashing(response, out, hasher, bar)
        except (OSError, http.client.HTTPException) as err:  # reset, timeout, disk full
            raise FetchError(
                f"models.{name}: download of {filename} was interrupted "
                f"({type(err).__name__}: {first_line(err)}); {interrupted}"
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


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}

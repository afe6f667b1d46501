"""A local stand-in for the Hugging Face hub, just enough for bytesup.run.fetch's hf source.

What the real hub does for a GGUF (an LFS file), and what this server copies:

    HEAD {endpoint}/{repo_id}/resolve/{revision}/{filename}
        302, Location: <signed CDN url>, X-Repo-Commit: <40 hex>, X-Linked-Etag: "<sha256>",
        X-Linked-Size: <bytes>           (with redirect=False: 200 with ETag and Content-Length)
    GET  <CDN url>, optionally with Range: bytes=N-
        200 (or 206 + Content-Range) and the bytes

The CDN is a second server on another port, so it is another origin, as a real CDN is: the client
must not send the hub token there. ``drop_after=n`` makes the first full GET send the headers of the
whole file and then close the connection after n bytes, like a network cut mid-download.
Unknown repo, revision or file get 404 with the hub's X-Error-Code header.
"""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class FakeHub:
    def __init__(
        self,
        repo_id: str,
        filename: str,
        data: bytes,
        *,
        commit: str = "c0ffee" + "0" * 34,
        etag: str | None = None,
        redirect: bool = True,
        drop_after: int | None = None,
        honour_range: bool = True,
    ):
        self.repo_id, self.filename, self.data, self.commit = repo_id, filename, data, commit
        self.etag = etag if etag is not None else hashlib.sha256(data).hexdigest()  # LFS: ETag = sha256
        self.redirect, self.drop_after, self.honour_range = redirect, drop_after, honour_range
        self.requests: list[tuple[str, str, str, dict]] = []  # (server, method, path, headers)
        self._lock = threading.Lock()
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("hub"))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("cdn"))
        self._threads = [
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
            for s in (self.hub, self.cdn)
        ]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    def gets(self, server: str) -> list[dict]:
        """Headers (lower-case keys) of each GET the given server ('hub' or 'cdn') received."""
        return [h for (s, m, _, h) in self.requests if s == server and m == "GET"]

    def heads(self) -> list[dict]:
        return [h for (s, m, _, h) in self.requests if s == "hub" and m == "HEAD"]

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    # -- request handling -----------------------------------------------------------------------

    def _handler(self, server: str):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_HEAD(self):
                hub._serve(self, server, body=False)

            def do_GET(self):
                hub._serve(self, server, body=True)

        return Handler

    def _serve(self, h: BaseHTTPRequestHandler, server: str, body: bool) -> None:
        with self._lock:
            self.requests.append((server, h.command, h.path, {k.lower(): v for k, v in h.headers.items()}))
        path = unquote(urlparse(h.path).path)
        if server == "cdn":
            if path != f"/blobs/{self.etag}":
                return self._error(h, 404, "EntryNotFound")
            return self._send_bytes(h, body, {})

        m = re.fullmatch(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", path)
        if m is None or m["repo"] != self.repo_id:
            return self._error(h, 404, "RepoNotFound")
        if m["rev"] not in ("main", self.commit):
            return self._error(h, 404, "RevisionNotFound")
        if m["file"] != self.filename:
            return self._error(h, 404, "EntryNotFound")
        meta = {"X-Repo-Commit": self.commit}
        if self.redirect:
            cdn = f"http://127.0.0.1:{self.cdn.server_address[1]}/blobs/{self.etag}?signature=abc"
            h.send_response(302)
            for k, v in {
                **meta,
                "Location": cdn,
                "X-Linked-Etag": f'"{self.etag}"',
                "X-Linked-Size": str(len(self.data)),
                "Content-Length": "0",
            }.items():
                h.send_header(k, v)
            h.end_headers()
            return
        self._send_bytes(h, body, {**meta, "ETag": f'"{self.etag}"'})

    def _send_bytes(self, h: BaseHTTPRequestHandler, body: bool, extra: dict) -> None:
        data, start = self.data, 0
        range_header = h.headers.get("Range")
        if range_header and self.honour_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", range_header)[1])
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            h.send_response(200)
        h.send_header("Content-Length", str(len(data) - start))
        h.send_header("Accept-Ranges", "bytes")
        for k, v in extra.items():
            h.send_header(k, v)
        h.end_headers()
        if not body:
            return
        if self.drop_after is not None and start == 0:
            # Cut the connection mid-body, once: the client was promised the whole file.
            h.wfile.write(data[: self.drop_after])
            h.wfile.flush()
            self.drop_after = None
            h.close_connection = True
            return
        h.wfile.write(data[start:])

    @staticmethod
    def _error(h: BaseHTTPRequestHandler, status: int, code: str) -> None:
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", code)
        h.send_header("Content-Length", "0")
        h.end_headers()

"""Real HTTP servers on 127.0.0.1 that tests use as watched sources."""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class PageServer:
    """Serves pages that a test sets and changes; counts the requests it answers."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, str, bytes]] = {}
        self.hits: dict[str, int] = {}
        #: every request answered, as (path, time.monotonic())
        self.log: list[tuple[str, float]] = []
        #: path -> (ETag, Last-Modified) sent with its page, either may be None (validate())
        self.validators: dict[str, tuple[str | None, str | None]] = {}
        #: every request's headers, lower-cased names, as (path, headers)
        self.requests: list[tuple[str, dict[str, str]]] = []
        #: path -> the Location its 302 sends (redirect())
        self.moved: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base + path

    def set(self, path: str, body: str | bytes, content_type: str = "text/html; charset=utf-8",
            status: int = 200) -> str:
        raw = body.encode("utf-8") if isinstance(body, str) else body
        with self._lock:
            self.pages[path] = (status, content_type, raw)
        return self.url(path)

    def validate(self, path: str, etag: str | None = None, last_modified: str | None = None) -> None:
        """Send these validators with the page at `path`, and answer 304 to a request whose If-None-Match
        matches the ETag (or, without one, whose If-Modified-Since equals Last-Modified)."""
        with self._lock:
            self.validators[path] = (etag, last_modified)

    def redirect(self, path: str, to: str) -> str:
        """Answer `path` with a 302 to the url `to`."""
        with self._lock:
            self.pages[path] = (302, "text/plain", b"moved")
            self.moved[path] = to
        return self.url(path)

    def headers_of(self, path: str) -> list[dict[str, str]]:
        """The headers of each request for `path`, oldest first."""
        with self._lock:
            return [headers for asked, headers in self.requests if asked == path]

    def set_json(self, path: str, body: str) -> str:
        return self.set(path, body, "application/json")

    def start(self) -> "PageServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes, dict[str, str]]:
        """The status, type and body to send, and the headers to send with them: validators (a 304 when they
        match), a redirect's Location."""
        with self._lock:
            self.hits[path] = self.hits.get(path, 0) + 1
            self.log.append((path, time.monotonic()))
            headers = headers or {}
            self.requests.append((path, headers))
            status, content_type, body = self.pages.get(path, (404, "text/plain", b"not found"))
            etag, modified = self.validators.get(path, (None, None))
            location = self.moved.get(path) if status == 302 else None
        sent = {name: value for name, value in (("ETag", etag), ("Last-Modified", modified), ("Location", location))
                if value}
        asked_etag, asked_since = headers.get("if-none-match"), headers.get("if-modified-since")
        if status == 200 and ((etag and asked_etag == etag) or (modified and not asked_etag and asked_since == modified)):
            return 304, content_type, b"", sent
        return status, content_type, body, sent


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that goes away mid-request (a killed worker, say) is not worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler(server: PageServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            headers = {name.lower(): value for name, value in self.headers.items()}
            status, content_type, body, extra = server.answer(self.path, headers)
            self.send_response(status)
            if status != 304:  # a 304 has no body, and says nothing of one
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Handler

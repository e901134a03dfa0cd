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

    def set_json(self, path: str, body: str) -> str:
        return self.set(path, body, "application/json")

    def start(self) -> "PageServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str) -> tuple[int, str, bytes]:
        with self._lock:
            self.hits[path] = self.hits.get(path, 0) + 1
            self.log.append((path, time.monotonic()))
            return self.pages.get(path, (404, "text/plain", b"not found"))


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that goes away mid-request (a killed worker, say) is not worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler(server: PageServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            status, content_type, body = server.answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Handler

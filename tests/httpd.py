"""HTTP servers on 127.0.0.1 for tests, hostile ones included: each route is a method of the handler, so a
test names what it needs."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    """GET /<route>/<arg> calls route_<route>(arg); a subclass adds the routes."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        route, _, arg = self.path[1:].partition("/")
        getattr(self, "route_" + route, self.route_missing)(arg)

    def send(self, status: int, body: bytes = b"", headers: tuple = ()) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def route_missing(self, _: str) -> None:
        self.send(404, b"not found")

    def log_message(self, *args) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client that hangs up mid-bomb is the point of these tests


@contextmanager
def serve(handler: type[Handler]):
    """Run `handler` on a free port of 127.0.0.1; yields the base url."""
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

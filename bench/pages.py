"""The benchmark's watched pages: N distinct ~5 KB HTML pages (--page-bytes) that never change, served at /p/<i>.

Run as its own process (`python -m bench.pages --count 1000 --port 8765`) so its CPU is not
counted in the bench process or in Vigil's. HTTP/1.1 keep-alive, one thread per connection.
`page_html(i)` is deterministic, so the bench computes the same bytes without asking the server.
With `--etag` each page is sent with an ETag (`page_etag(i)`) and a request whose If-None-Match is
that ETag is answered 304 with no body. GET /stats says how many 304s it answered, GET /stats/gets how many pages
(200 or 304).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

PAGE_BYTES = 5 * 1024
_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
          "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu price stock "
          "delivery warranty shipping colour size model release notes version update status order "
          "available limited edition return policy customer review rating specification").split()


def page_html(i: int, size: int = PAGE_BYTES) -> bytes:
    """Page i: a realistic small product/status page (head, style, script, nav, text, table) of ~`size` bytes."""
    rng = random.Random(i)

    def sentence(words: int) -> str:
        text = " ".join(rng.choice(_WORDS) for _ in range(words))
        return text[:1].upper() + text[1:] + "."

    head = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Item {i} – '
            f'{sentence(4)}</title><meta name="viewport" content="width=device-width">'
            '<style>body{font-family:sans-serif;margin:0 auto;max-width:60em}nav a{margin:0 .5em}'
            'table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}</style>'
            f'<script>window.dataLayer=window.dataLayer||[];dataLayer.push({{"page":{i}}});</script>'
            '</head><body><nav><a href="/">Home</a><a href="/shop">Shop</a><a href="/help">Help</a>'
            '<a href="/account">Account</a></nav>')
    parts = [head, f"<main><h1>Item {i}: {sentence(5)}</h1>",
             f'<p class="price" id="price">Price: ${10 + i % 90}.{i % 100:02d}</p>']
    rows = "".join(f"<tr><th>{rng.choice(_WORDS)}</th><td>{sentence(3)}</td><td>{rng.randint(1, 9999)}</td></tr>"
                   for _ in range(8))
    parts.append(f"<table><thead><tr><th>Field</th><th>Value</th><th>Qty</th></tr></thead>"
                 f"<tbody>{rows}</tbody></table>")
    total = sum(len(p) for p in parts)
    while total < size - 200:
        paragraph = f"<p>{sentence(rng.randint(12, 30))} {sentence(rng.randint(8, 20))}</p>"
        parts.append(paragraph)
        total += len(paragraph)
    parts.append('</main><footer><p>&copy; Example Shop &middot; <a href="/terms">Terms</a></p>'
                 '<noscript>Enable JavaScript for the full experience.</noscript></footer></body></html>')
    return "".join(parts).encode("utf-8")


def page_etag(i: int, size: int = PAGE_BYTES) -> str:
    return '"' + hashlib.sha256(page_html(i, size)).hexdigest()[:16] + '"'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024  # headers and body leave in one write, flushed after each request
    pages: list[bytes] = []
    #: with --etag, each page's ETag
    etags: list[str] = []

    #: 304s answered, for the bench to tell its checks were conditional (GET /stats)
    not_modified = 0
    #: GETs of pages answered, 200 or 304, for the bench to count fetches (GET /stats/gets)
    served = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        body, status, etag = b"not found", 404, None
        if self.path == "/stats":
            body, status = str(_Handler.not_modified).encode(), 200
        elif self.path == "/stats/gets":
            body, status = str(_Handler.served).encode(), 200
        prefix, _, number = self.path.rpartition("/")
        if prefix == "/p" and number.isdigit() and int(number) < len(self.pages):
            body, status = self.pages[int(number)], 200
            with _Handler.lock:  # exact: the shared-fetch bench compares this count with a goal
                _Handler.served += 1
            etag = self.etags[int(number)] if self.etags else None
            if etag and self.headers.get("If-None-Match") == etag:
                body, status = b"", 304
                _Handler.not_modified += 1  # a race between threads may miss one: a figure, not a proof
        self.send_response(status)
        if status != 304:
            self.send_header("Content-Type", "text/html; charset=utf-8" if status == 200 else "text/plain")
            self.send_header("Content-Length", str(len(body)))
        if etag:
            self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def not_modified(base: str) -> int:
    """The 304s the page server at `base` has answered so far."""
    return int(requests.get(f"{base}/stats", timeout=5).text)


def served(base: str) -> int:
    """The page GETs (200 or 304) the page server at `base` has answered so far."""
    return int(requests.get(f"{base}/stats/gets", timeout=5).text)


class PageServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--etag", action="store_true", help="send ETags and answer a matching If-None-Match with 304")
    parser.add_argument("--page-bytes", type=int, default=PAGE_BYTES, help="each page's size (default 5 KiB)")
    args = parser.parse_args()
    _Handler.pages = [page_html(i, args.page_bytes) for i in range(args.count)]
    if args.etag:
        _Handler.etags = [page_etag(i, args.page_bytes) for i in range(args.count)]
    with PageServer((args.host, args.port), _Handler) as server:
        server.serve_forever(poll_interval=0.5)


if __name__ == "__main__":
    main()

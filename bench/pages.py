"""The benchmark's watched pages: N distinct ~5 KB HTML pages that never change, served at /p/<i>.

Run as its own process (`python -m bench.pages --count 1000 --port 8765`) so its CPU is not
counted in the bench process or in Vigil's. HTTP/1.1 keep-alive, one thread per connection.
`page_html(i)` is deterministic, so the bench computes the same bytes without asking the server.
"""

from __future__ import annotations

import argparse
import random
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE_BYTES = 5 * 1024
_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
          "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu price stock "
          "delivery warranty shipping colour size model release notes version update status order "
          "available limited edition return policy customer review rating specification").split()


def page_html(i: int) -> bytes:
    """Page i: a realistic small product/status page (head, style, script, nav, text, table)."""
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
    size = sum(len(p) for p in parts)
    while size < PAGE_BYTES - 200:
        paragraph = f"<p>{sentence(rng.randint(12, 30))} {sentence(rng.randint(8, 20))}</p>"
        parts.append(paragraph)
        size += len(paragraph)
    parts.append('</main><footer><p>&copy; Example Shop &middot; <a href="/terms">Terms</a></p>'
                 '<noscript>Enable JavaScript for the full experience.</noscript></footer></body></html>')
    return "".join(parts).encode("utf-8")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024  # headers and body leave in one write, flushed after each request
    pages: list[bytes] = []

    def do_GET(self) -> None:
        body, status = b"not found", 404
        prefix, _, number = self.path.rpartition("/")
        if prefix == "/p" and number.isdigit() and int(number) < len(self.pages):
            body, status = self.pages[int(number)], 200
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8" if status == 200 else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class PageServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    _Handler.pages = [page_html(i) for i in range(args.count)]
    with PageServer((args.host, args.port), _Handler) as server:
        server.serve_forever(poll_interval=0.5)


if __name__ == "__main__":
    main()

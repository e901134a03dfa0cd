#!/usr/bin/env python3
"""The device-side pieces of bench/stream_lines.py, standard library only (they start fast and import nothing of
Vigil's): the line printer a stream monitor watches, and the baseline, a bare loop that POSTs each line it reads to
a bare endpoint.

    stream_bare.py print --control FIFO [--out PATH]   lines `t=<time.time()> n=<k>` on order, each flushed
    stream_bare.py loop --url URL --input PATH          one urllib POST per line read (the baseline "runner")
    stream_bare.py serve --port P --log PATH            http.server: 200 to every POST, each logged with its time

The printer reads orders from the control FIFO, one a line: `pace RATE COUNT` (COUNT lines, RATE a second, on a
fixed schedule), `burst COUNT` (as fast as it can, one write and flush a line), `quit`; it exits at `quit` or
when the FIFO's writer goes away (the bench ended). Each line is stamped just before it is written.
"""

from __future__ import annotations

import argparse
import http.server
import sys
import time
import urllib.request


def printer(control: str, out: str | None) -> int:
    sink = open(out, "w") if out else sys.stdout  # a FIFO: blocks until the baseline loop opens it
    n = 0
    with open(control) as orders:
        for order in orders:
            words = order.split()
            if not words or words[0] == "quit":
                break
            if words[0] == "pace":
                n = _lines(sink, n, int(words[2]), 1 / float(words[1]))
            elif words[0] == "burst":
                n = _lines(sink, n, int(words[1]), 0.0)
    return 0


def _lines(sink, n: int, count: int, interval: float) -> int:
    start = time.monotonic()
    for k in range(count):
        if interval:
            delay = start + k * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        sink.write(f"t={time.time():.6f} n={n + k}\n")
        sink.flush()
    return n + count


def loop(url: str, source: str) -> int:
    """`while read line; do POST "$line"; done`, in Python: one request (and one connection) a line."""
    with open(source, "rb") as lines:
        for line in iter(lines.readline, b""):
            with urllib.request.urlopen(urllib.request.Request(url, data=line, method="POST"), timeout=30) as answer:
                answer.read()
    return 0


def serve(port: int, log: str) -> int:
    sink = open(log, "a", buffering=1)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            sink.write(f"{time.time():.6f} {body.decode('utf-8', 'replace').strip()}\n")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    p = modes.add_parser("print")
    p.add_argument("--control", required=True)
    p.add_argument("--out")
    p = modes.add_parser("loop")
    p.add_argument("--url", required=True)
    p.add_argument("--input", required=True)
    p = modes.add_parser("serve")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    if args.mode == "print":
        return printer(args.control, args.out)
    if args.mode == "loop":
        return loop(args.url, args.input)
    return serve(args.port, args.log)


if __name__ == "__main__":
    sys.exit(main())

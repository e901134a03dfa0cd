#!/usr/bin/env python
"""CPU per request of Vigil's fetcher beside bare `requests` and bare urllib3, in one process, same run.

    .venv/bin/python bench/fetch_cost.py [--requests 3000] [--page-bytes 5120] [--rounds 3]

The page server (bench/pages.py, --etag) runs as its own process, so its CPU is not counted. Each client GETs
the same page over one kept-alive connection: answered 304 (If-None-Match with the page's ETag) and answered 200
(the whole page, read; baselines also sha256 it, as bench/quiet_checks.py's baseline A does). Clients take
turns round by round, so the machine's drift falls on all of them alike; the figure is process CPU
(time.process_time) per request, the ratio Vigil's ÷ each baseline's.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402
import urllib3  # noqa: E402

from bench.pages import PAGE_BYTES, page_etag  # noqa: E402
from bench.common import PYTHON, RESULTS, Processes, figure, free_port, publish, record, wait_listening  # noqa: E402,E501
from engine.http import FetchPolicy, Fetcher, Validators  # noqa: E402


def clients(url: str, etag: str) -> dict[str, dict[str, callable]]:
    fetcher = Fetcher(FetchPolicy(allow_loopback=True))
    validators = Validators(etag)
    session = requests.Session()
    pool = urllib3.PoolManager(maxsize=1)
    conditional = {"If-None-Match": etag}

    def vigil_304():
        assert fetcher.get(url, validators=validators).not_modified

    def vigil_200():
        assert fetcher.get(url).status == 200

    def requests_304():
        assert session.get(url, headers=conditional).status_code == 304

    def requests_200():
        hashlib.sha256(session.get(url).content).hexdigest()

    def urllib3_304():
        assert pool.request("GET", url, headers=conditional).status == 304

    def urllib3_200():
        hashlib.sha256(pool.request("GET", url).data).hexdigest()

    return {"Vigil Fetcher": {"304": vigil_304, "200": vigil_200},
            "requests Session (+ sha256 on 200)": {"304": requests_304, "200": requests_200},
            "urllib3 PoolManager (+ sha256 on 200)": {"304": urllib3_304, "200": urllib3_200}}


def measure(call, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        call()
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per client and answer, over all rounds")
    parser.add_argument("--page-bytes", type=int, default=PAGE_BYTES)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = Processes(logs)
    procs.start("fetch-cost-pages", [PYTHON, "-m", "bench.pages", "--count", "1", "--port", str(port), "--etag",
                                     "--page-bytes", str(args.page_bytes)])
    try:
        wait_listening(port, procs)
        url = f"http://127.0.0.1:{port}/p/0"
        table = clients(url, page_etag(0, args.page_bytes))
        spent = {(name, answer): 0.0 for name, calls in table.items() for answer in calls}
        for calls in table.values():  # warm-up: connections, imports, caches
            for call in calls.values():
                measure(call, 100)
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            for name, calls in table.items():
                for answer, call in calls.items():
                    spent[name, answer] += measure(call, per_round)
        n = per_round * args.rounds
    finally:
        procs.stop()
    vigil = {answer: spent["Vigil Fetcher", answer] / n for answer in ("304", "200")}
    lines = [f"# Fetch cost: CPU per request, one process, one kept-alive connection", "",
             f"- {n:,} requests per client and answer in {args.rounds} rounds, {args.page_bytes:,}-byte page; "
             f"Python {platform.python_version()}, {platform.machine()}", "",
             "| client | CPU-µs per 304 | CPU-µs per 200 | Vigil ÷ this, 304 | Vigil ÷ this, 200 |",
             "|---|---:|---:|---:|---:|"]
    cost = {name: {answer: spent[name, answer] / n for answer in ("304", "200")} for name in table}
    for name in table:
        lines.append(f"| {name} | {cost[name]['304'] * 1e6:,.0f} | {cost[name]['200'] * 1e6:,.0f} | "
                     f"{vigil['304'] / cost[name]['304']:.2f} | {vigil['200'] / cost[name]['200']:.2f} |")
    lines += ["", "Vigil's 200 reads the body (and decodes it if coded) but does not hash it; the baselines' do."]
    us = lambda seconds: f"{seconds * 1e6:,.0f} µs"  # noqa: E731
    bare = cost["requests Session (+ sha256 on 200)"]
    pool = cost["urllib3 PoolManager (+ sha256 on 200)"]
    record("fetch_cost", [
        figure("fetcher CPU per GET answered 304, vs a bare `requests` Session's (one process, kept alive)",
               us(vigil["304"]), us(bare["304"]), vigil["304"] / bare["304"]),
        figure("fetcher CPU per GET answered 304, vs a bare urllib3 PoolManager's",
               us(vigil["304"]), us(pool["304"]), vigil["304"] / pool["304"]),
    ])
    return publish("fetch_cost.md", "\n".join(lines) + "\n")

if __name__ == "__main__":
    sys.exit(main())

"""What bench/web_under_load.py runs against one web process: the slow source, the slowloris client, the
trigger load, the GET sampler (a process of its own) and the slow creates, and the rounds they make up."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

from adapters.settings import Settings
from app.capacity import BUSY
from bench import common
from bench.common import PYTHON, ROOT, BenchError
from bench.trigger_parts import body_for

DB_NAME = "vigil_bench_load"
DATABASE_URL = common.database_url(DB_NAME)
REDIS_URL = "redis://127.0.0.1:6379/7"
SLOW_ACCOUNTS = 20
WEBHOOKS = 20
ROUND_ORDER = ("quiet", "storm", "storm", "quiet")
GETS = ("approve", "login", "monitors")
GET_GOAL_MS = 250.0
#: the file whose --sample-gets runs the GET sampler
BENCH = ROOT / "bench" / "web_under_load.py"


def session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    return s


# ----------------------------------------------------------------------------------------------
# the slow source: every GET answers after --slow-seconds, unless its client hangs up first


class SlowSource:
    """A ThreadingHTTPServer in a thread of the bench; counts the fetches open at once (in all and per
    account: the path is /slow/<account>/<call>) to show the create pool's bounds from the outside."""

    def __init__(self, delay: float) -> None:
        self.delay, self.lock = delay, threading.Lock()
        self.requests, self.open, self.most_open = 0, 0, 0
        self.per_account: Counter = Counter()
        self.most_per_account = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def url(self, account: int, call: str) -> str:
        return f"http://127.0.0.1:{self.port}/slow/{account}/{call}"

    def _enter(self, account: str, sign: int) -> None:
        with self.lock:
            self.requests += sign > 0
            self.open += sign
            self.per_account[account] += sign
            self.most_open = max(self.most_open, self.open)
            self.most_per_account = max(self.most_per_account, self.per_account[account])

    def _handler(self):
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                account = self.path.split("/")[2] if self.path.count("/") >= 3 else "?"
                source._enter(account, +1)
                try:
                    if source._hold(self.connection):
                        self._answer()
                finally:
                    source._enter(account, -1)

            def _answer(self) -> None:
                body = b"slow page: the same text every time\n"
                with contextlib.suppress(OSError):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        return Handler

    def _hold(self, conn: socket.socket) -> bool:
        """Wait out the delay; False as soon as the client hangs up (Vigil's fetch gave up)."""
        end = time.monotonic() + self.delay
        while (left := end - time.monotonic()) > 0:
            readable, _, _ = select.select([conn], [], [], min(left, 0.1))
            if readable:
                with contextlib.suppress(OSError):
                    if conn.recv(1, socket.MSG_PEEK):
                        continue
                return False
        return True

    def wait_idle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.open and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ----------------------------------------------------------------------------------------------
# the slowloris client


class Slowloris:
    """One connection to the web process at all times, sending a request's headers a byte a second and never
    finishing them; notes how long the server let each connection stay before closing it."""

    PREFIX = b"GET / HTTP/1.1\r\nHost: x\r\n"

    def __init__(self, port: int, interval: float = 1.0) -> None:
        self.port, self.interval = port, interval
        self.held: list[float] = []          # seconds each connection stayed open until the server closed it
        self.still_open: list[float] = []    # connections the bench closed itself at the end
        self.bytes_sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                opened = time.monotonic()
                closed_by_server = self._trickle(sock)
                (self.held if closed_by_server else self.still_open).append(time.monotonic() - opened)

    def _trickle(self, sock: socket.socket) -> bool:
        """Send a byte every interval until the server closes the connection (True) or the bench stops (False)."""
        header = itertools.chain(self.PREFIX, itertools.cycle(b"X-Slow: 1\r\n"))
        while not self._stop.is_set():
            readable, _, _ = select.select([sock], [], [], self.interval)
            try:
                if readable and not sock.recv(4096):
                    return True
                if not readable:
                    sock.sendall(bytes([next(header)]))
                    self.bytes_sent += 1
            except OSError:
                return True
        return False

    def wait_closed(self, until: float) -> None:
        """Until the server has closed one of its connections, or time.monotonic() reaches `until`."""
        while not self.held and time.monotonic() < until:
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval + 6)


# ----------------------------------------------------------------------------------------------
# load: trigger deliveries, the cheap GETs, the slow creates


@dataclass
class Triggers:
    accepted: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.accepted / self.wall if self.wall else 0.0

    def add(self, other: "Triggers") -> None:
        self.accepted += other.accepted
        self.wall += other.wall
        self.latencies += other.latencies
        self.errors += other.errors


def deliver(urls: list[str], seconds: float, concurrency: int, tag: str, out: Triggers) -> None:
    """POST deliveries from `concurrency` keep-alive sessions for `seconds`; fills `out`."""
    counter, lock, clock = itertools.count(), threading.Lock(), {}
    ready = threading.Barrier(concurrency + 1, timeout=30)

    def run() -> None:
        with session() as s:
            s.get(urls[0].split("/api/")[0] + "/healthz", timeout=10)  # connected before the clock starts
            ready.wait()
            ready.wait()
            mine, bad = post_until(s, urls, tag, counter, clock["end"])
        with lock:
            out.latencies += mine
            out.errors += bad

    threads = [threading.Thread(target=run, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    try:
        ready.wait()  # every connection is open
        clock["end"] = (begin := time.perf_counter()) + seconds
        ready.wait()  # go
    except threading.BrokenBarrierError:
        raise BenchError("a trigger client thread could not connect to the web process") from None
    for thread in threads:
        thread.join()
    out.wall, out.accepted = time.perf_counter() - begin, len(out.latencies)


def post_until(s: requests.Session, urls: list[str], tag: str, counter, end: float) -> tuple[list[float], Counter]:
    """One client thread's deliveries until `end` (perf_counter): the 202s' latencies, and the failures."""
    latencies, errors = [], Counter()
    while time.perf_counter() < end:
        i = next(counter)
        headers = {"Content-Type": "application/json", "Idempotency-Key": f"{tag}-{i}"}
        start = time.perf_counter()
        try:
            response = s.post(urls[i % len(urls)], data=body_for(tag, "d", i), headers=headers, timeout=30)
        except requests.RequestException as exc:
            errors[type(exc).__name__] += 1
            continue
        if response.status_code == 202:
            latencies.append(time.perf_counter() - start)
        else:
            errors[f"HTTP {response.status_code}"] += 1
    return latencies, errors


def sample_gets(targets: dict[str, tuple[str, dict]], sessions: dict[str, requests.Session], seconds: float,
                interval: float, out: dict[str, list[float]], asked: dict[str, list[float]], errors: Counter) -> None:
    """One thread: GET each target in turn, one every `interval` seconds, each on its own keep-alive session;
    out[name] gets each answer's seconds, asked[name] when it was asked (seconds from the start)."""
    names = itertools.cycle(targets)
    start = time.monotonic()
    for i in itertools.count():
        if time.monotonic() - start >= seconds:
            break
        with contextlib.suppress(ValueError):
            time.sleep(start + i * interval - time.monotonic())
        name = next(names)
        url, headers = targets[name]
        began = time.perf_counter()
        try:
            response = sessions[name].get(url, headers=headers, timeout=30)
        except requests.RequestException as exc:
            errors[f"{name}: {type(exc).__name__}"] += 1
            continue
        if response.status_code == 200:
            out[name].append(time.perf_counter() - began)
            asked[name].append(time.monotonic() - start - out[name][-1])
        else:
            errors[f"{name}: HTTP {response.status_code}"] += 1


class Sampler:
    """sample_gets in a process of its own (this file with --sample-gets), so that the cheap GETs are timed
    away from the bench's own GIL, which the trigger clients and the 100 create threads keep busy. It takes a
    JSON line per round on stdin and answers one on stdout."""

    def __init__(self, targets: dict[str, tuple[str, dict]], logs: Path) -> None:
        with open(logs / "load-sampler.log", "wb") as log:
            self.proc = subprocess.Popen([PYTHON, str(BENCH), "--sample-gets"], cwd=ROOT,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                         start_new_session=True)
        self._send(targets)

    def _send(self, data) -> None:
        self.proc.stdin.write(json.dumps(data) + "\n")
        self.proc.stdin.flush()

    def open(self) -> None:
        """New keep-alive connections, each used once, so that a round's GETs don't time a TCP connect."""
        self._send({"open": True})
        self._answer()

    def start(self, seconds: float, interval: float) -> None:
        self._send({"seconds": seconds, "interval": interval})

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError(f"the GET sampler exited with {self.proc.wait(5)}: bench/results/logs/load-sampler.log")
        return json.loads(line)

    def collect(self, r: "Round") -> None:
        data = self._answer()
        for name in GETS:
            r.gets[name] += data["gets"][name]
            r.asked[name] += data["asked"][name]
        r.get_errors.update(data["errors"])

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)


def serve_sampler() -> int:
    """--sample-gets: the targets on the first line of stdin, then a round per line until stdin closes."""
    targets, sessions = json.loads(sys.stdin.readline()), {}
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("open"):
            for s in sessions.values():
                s.close()
            sessions = {name: session() for name in targets}
            for name, (url, headers) in targets.items():
                sessions[name].get(url, headers=headers, timeout=30)
            print(json.dumps({"ready": True}), flush=True)
            continue
        gets, asked, errors = {name: [] for name in targets}, {name: [] for name in targets}, Counter()
        sample_gets(targets, sessions, command["seconds"], command["interval"], gets, asked, errors)
        print(json.dumps({"gets": gets, "asked": asked, "errors": errors}), flush=True)
    return 0


@dataclass
class Create:
    account: int
    started: float = 0.0
    answered: float = 0.0
    kind: str = "no answer"
    text: str = ""

    @property
    def seconds(self) -> float:
        return self.answered - self.started if self.answered else float("nan")


def classify(response: requests.Response) -> tuple[str, str]:
    """created / busy (told to retry) / timed out (no monitor, the first check ran out) / other."""
    if response.status_code != 200:
        return "other", f"HTTP {response.status_code}: {response.text[:200]}"
    body = response.json()
    if body.get("ok"):
        return "created", body["result"]["monitor_id"]
    error = body.get("error", "")
    if error == BUSY:
        return "busy", error
    if "no monitor was created" in error and ("timed out" in error or "took longer" in error):
        return "timed out", error
    return "other", error


def fire_creates(base: str, accounts: list[tuple[int, str]], source: SlowSource, n: int,
                 tag: str) -> tuple[list[Create], list[threading.Thread]]:
    """n monitor_create calls at once (a barrier), round-robin over the accounts, each on its own session."""
    calls = [Create(account=accounts[i % len(accounts)][0]) for i in range(n)]
    ready = threading.Barrier(n + 1)

    def call(i: int) -> None:
        token = accounts[i % len(accounts)][1]
        payload = {"action": "monitor_create", "context": {"conversation_id": f"load-{tag}-{i}"},
                   "arguments": {"description": f"slow page {tag} {i} changes", "check": {"type": "change"},
                                 "source": {"type": "page", "url": source.url(calls[i].account, f"{tag}-{i}")}}}
        s = session()
        ready.wait()
        calls[i].started = time.monotonic()
        try:
            response = s.post(f"{base}/api/tool/monitor", json=payload, timeout=60,
                              headers={"Authorization": f"Bearer {token}"})
            calls[i].answered = time.monotonic()
            calls[i].kind, calls[i].text = classify(response)
        except (requests.RequestException, ValueError) as exc:
            calls[i].answered, calls[i].kind, calls[i].text = time.monotonic(), "other", type(exc).__name__
        s.close()

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    ready.wait()
    return calls, threads


def in_flight(calls: list[Create], start: float, end: float) -> float:
    """How many of the calls were unanswered, on average, over [start, end]."""
    held = sum(max(0.0, min(c.answered or end, end) - max(c.started, start)) for c in calls)
    return held / (end - start) if end > start else float("nan")


# ----------------------------------------------------------------------------------------------
# rounds


@dataclass
class Round:
    kind: str
    n: int
    triggers: Triggers = field(default_factory=Triggers)
    gets: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in GETS})
    get_errors: Counter = field(default_factory=Counter)
    asked: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in GETS})
    web_cpu: float = 0.0
    creates: list[Create] = field(default_factory=list)
    in_flight: float = 0.0
    source_requests: int = 0
    slowloris: Slowloris | None = None


@dataclass
class Setup:
    args: argparse.Namespace
    base: str
    port: int
    web_pid: int
    links: list[str]
    sampler: Sampler
    accounts: list[tuple[int, str]]
    source: SlowSource
    run: str
    settings: Settings



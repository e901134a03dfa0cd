#!/usr/bin/env python
"""Web-under-load benchmark: do slow first checks stall the cheap paths of one web process?

    .venv/bin/python bench/web_under_load.py [--creates 100] [--slow-seconds 25] [--blocks 2] [--round-seconds 10]

One `vigil web` process (uvicorn, 1 process) on PostgreSQL (database vigil_bench_load, schema recreated) and
Redis (db 7, flushed), with Vigil's own defaults for the create pool (CREATE_CONCURRENCY 8, 2 per account,
CREATE_FETCH_TIMEOUT_SECONDS 10), the thread lanes (WEB_THREADS 16, WEB_PUBLIC_THREADS 8) and the header
deadline (WEB_HEADER_TIMEOUT_SECONDS 10); only the rate limits are raised, so that nothing is refused.
No worker runs: deliveries are stored and queued, never processed, so no worker competes for the CPUs.

Every round measures the same two things for --round-seconds: trigger deliveries (--concurrency client threads,
keep-alive sessions, unique Idempotency-Keys: deliveries/s and the 202's latency), and a process of its own
(this file with --sample-gets, away from the bench's GIL) that GETs `/approve/<token>`, `/login` and
`/api/monitors` (bearer token) in turn at a steady pace, on keep-alive connections opened before the round.
A quiet round has nothing else. A storm round first connects a slowloris client (one header byte a second,
reconnected whenever the server closes it), then fires --creates concurrent `monitor_create` calls from 20
accounts against a source (a thread of this bench) that answers after --slow-seconds, and measures while they
are in flight. Rounds go quiet, storm, storm, quiet, --blocks times (the machine's speed drifts within seconds).

Afterwards: how each create was answered and when, monitors stored for the slow accounts (none may be
half-created), deliveries stored against 202s received, and errors in the web log. Storm figures are reported
as ratios to the quiet rounds of this same run; nothing asserts on time. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402

from app.capacity import BUSY  # noqa: E402
from bench import common  # noqa: E402
from bench.common import (  # noqa: E402
    PYTHON, VIGIL, BenchError, Db, Processes, clean_up, failed, figure, free_port, prepare, publish, record,
    tree_cpu, versions, wait_listening,
)
from bench.quiet_checks import VIGIL_ENV  # noqa: E402
from bench.trigger_parts import body_for, fmt, pct  # noqa: E402
from tests.processes import vigil as vigil_command  # noqa: E402
from adapters.settings import Settings  # noqa: E402

DB_NAME = "vigil_bench_load"
DATABASE_URL = common.database_url(DB_NAME)
REDIS_URL = "redis://127.0.0.1:6379/7"
WEB = "load-web"  # process and log name: another benchmark may be running with its own
SLOW_ACCOUNTS = 20
WEBHOOKS = 20
OWNER = "load-owner@bench.example"
PASSWORD = "bench-password-not-secret"
ROUND_ORDER = ("quiet", "storm", "storm", "quiet")
GETS = ("approve", "login", "monitors")
GET_GOAL_MS = 250.0
LOG_ERRORS = re.compile(r"MaxConnectionsExceeded|pool|Traceback|ERROR|Exception", re.IGNORECASE)


def vigil_env(port: int) -> dict:
    return {
        "DATABASE_URL": DATABASE_URL, "REDIS_URL": REDIS_URL, "PUBLIC_API_BASE_URL": f"http://127.0.0.1:{port}",
        "LOG_LEVEL": "WARNING", "FETCH_ALLOW_LOOPBACK": "true",
        # nothing the bench does may be refused by a rate or hit limit
        "API_RATE_PER_MINUTE": "1000000", "TRIGGER_RATE_PER_MINUTE": "1000000", "TRIGGER_MAX_HITS": "1000000",
        "SECRET_KEY": VIGIL_ENV["SECRET_KEY"], "VIGIL_DATA_DIR": VIGIL_ENV["VIGIL_DATA_DIR"],
    }


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
            self.proc = subprocess.Popen([PYTHON, str(Path(__file__).resolve()), "--sample-gets"], cwd=ROOT,
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


def measure(s: Setup, r: Round, tag: str) -> None:
    """The trigger load and the GET sampler side by side for --round-seconds; the web process's CPU meanwhile."""
    cpu0 = tree_cpu(s.web_pid)
    s.sampler.start(s.args.round_seconds, s.args.get_interval)
    deliver(s.links, s.args.round_seconds, s.args.concurrency, tag, r.triggers)
    s.sampler.collect(r)
    r.web_cpu = tree_cpu(s.web_pid) - cpu0


def quiet_round(s: Setup, n: int) -> Round:
    r = Round("quiet", n)
    s.source.wait_idle()
    s.sampler.open()
    measure(s, r, f"{s.run}-q{n}")
    return r


def storm_round(s: Setup, n: int) -> Round:
    """Slowloris connected, then --creates calls fired at once; measured while they are in flight."""
    r = Round("storm", n)
    s.source.wait_idle()
    requests0 = s.source.requests
    r.slowloris = Slowloris(s.port)
    loris_deadline = time.monotonic() + s.settings.WEB_HEADER_TIMEOUT_SECONDS + 3
    time.sleep(1.0)
    s.sampler.open()
    r.creates, threads = fire_creates(s.base, s.accounts, s.source, s.args.creates, f"{s.run}-s{n}")
    start = time.monotonic()
    measure(s, r, f"{s.run}-s{n}")
    r.in_flight = in_flight(r.creates, start, time.monotonic())
    for thread in threads:
        thread.join(90)
    r.slowloris.wait_closed(loris_deadline)  # a round shorter than the header deadline still sees it act
    r.slowloris.stop()
    r.source_requests = s.source.requests - requests0
    return r


def progress(r: Round) -> str:
    t = r.triggers
    line = (f"  {r.kind} {r.n}: {t.accepted} deliveries in {t.wall:.1f}s = {t.rate:.0f}/s, 202 p50 "
            f"{pct(t.latencies, 50):.1f} ms p99 {pct(t.latencies, 99):.1f} ms; GET p99 "
            + ", ".join(f"{name} {pct(r.gets[name], 99):.0f}" for name in GETS) + " ms")
    if r.kind == "storm":
        kinds = Counter(c.kind for c in r.creates)
        slowest = max((c.seconds for c in r.creates), default=float("nan"))
        line += (f"; creates {dict(kinds)}, slowest {slowest:.2f}s, {r.in_flight:.1f} in flight on average; "
                 f"slowloris held {', '.join(f'{h:.1f}' for h in r.slowloris.held) or 'never closed'} s")
    errors = r.triggers.errors + r.get_errors
    return line + (f"; errors {dict(errors)}" if errors else "")


# ----------------------------------------------------------------------------------------------
# set-up


def make_accounts(n: int) -> list[tuple[int, str]]:
    """The owner (first) and n slow-create accounts, each with a runtime token: (user id, token). Made in this
    process with the functions `vigil user create` and `vigil token create` call (40 CLI runs would take long)."""
    from models import connection, database
    from models.accounts import create_token, create_user
    from models.db import bind

    bind(DATABASE_URL, max_connections=2)
    emails = [OWNER] + [f"load-slow-{i}@bench.example" for i in range(n)]
    with connection():
        accounts = [(create_user(email, PASSWORD).id, create_token(email, "bench")) for email in emails]
    with contextlib.suppress(AttributeError):
        database.obj.close_all()
    return accounts


def tool_create(base: str, token: str, conversation: str, arguments: dict) -> dict:
    with session() as s:
        response = s.post(f"{base}/api/tool/monitor", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                          json={"action": "monitor_create", "context": {"conversation_id": conversation},
                                "arguments": arguments})
    body = response.json()
    if response.status_code != 200 or not body.get("ok"):
        raise BenchError(f"monitor_create failed: {response.status_code} {body}")
    return body["result"]


def owner_monitors(base: str, token: str) -> tuple[list[str], str]:
    """WEBHOOKS unsigned webhook monitors (their trigger links) and one approval monitor (its page)."""
    links = [tool_create(base, token, f"load-owner-{i}", {
        "description": f"deploy {i} finishes", "source": {"type": "webhook", "signature": "none",
                                                          "max_hits": 1_000_000}})["url"] for i in range(WEBHOOKS)]
    approval = tool_create(base, token, "load-owner-approval", {
        "description": "the release is approved", "source": {"type": "approval", "question": "Ship it?"}})
    return links, approval["approval_url"]


def start_web(procs: Processes) -> tuple[int, dict]:
    port = free_port()
    env = vigil_env(port)
    try:
        vigil_command("migrate", env=env)
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    procs.start(WEB, [VIGIL, "web", "--host", "127.0.0.1", "--port", str(port)], env)
    wait_listening(port, procs)
    return port, env


def set_up(args, procs: Processes, source: SlowSource) -> Setup:
    common.fresh_database(DB_NAME)
    redis.Redis.from_url(REDIS_URL).flushdb()
    port, env = start_web(procs)
    base = f"http://127.0.0.1:{port}"
    accounts = make_accounts(SLOW_ACCOUNTS)
    owner_token = accounts[0][1]
    links, approval_url = owner_monitors(base, owner_token)
    targets = {"approve": (approval_url, {}), "login": (f"{base}/login", {}),
               "monitors": (f"{base}/api/monitors", {"Authorization": f"Bearer {owner_token}"})}
    web_pid = next(proc.pid for name, proc in procs.started if name == WEB)
    sampler = Sampler(targets, procs.logs)
    return Setup(args, base, port, web_pid, links, sampler, accounts[1:], source, uuid.uuid4().hex[:8],
                 Settings.from_env({**os.environ, **env}))


# ----------------------------------------------------------------------------------------------
# checks


def half_created(db: Db, rounds: list[Round], accounts: list[tuple[int, str]]) -> tuple[int, int, int]:
    """(monitors stored for the slow accounts, creates answered ok, conversations the calls made)."""
    ids = [user_id for user_id, _ in accounts]
    stored = db.scalar("SELECT count(*) FROM monitors WHERE user_id = ANY(%s)", (ids,))
    conversations = db.scalar("SELECT count(*) FROM conversations WHERE user_id = ANY(%s)", (ids,))
    created = sum(c.kind == "created" for r in rounds for c in r.creates)
    return stored, created, conversations


def web_log_errors(procs: Processes) -> list[str]:
    path = procs.logs / f"{WEB}.log"
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [line for line in lines if LOG_ERRORS.search(line)]


def checks(s: Setup, db: Db, rounds: list[Round], warm: Triggers, procs: Processes) -> tuple[list[str], int]:
    """The report's check lines, and how many monitors are half-created (stored without an ok answer, or
    answered ok and not stored)."""
    s.source.wait_idle()
    time.sleep(1.0)  # a create whose fetch just ended would store now, if it were going to
    stored, created, conversations = half_created(db, rounds, s.accounts)
    deliveries = db.scalar("SELECT count(*) FROM deliveries")
    accepted = warm.accepted + sum(r.triggers.accepted for r in rounds)
    errors = web_log_errors(procs)
    lines = [f"monitors stored for the {len(s.accounts)} slow-create accounts: {stored}; creates answered ok: "
             f"{created} ({'OK, nothing half-created' if stored == created else 'WARNING: HALF-CREATED MONITORS'}); "
             f"conversations those calls made: {conversations}",
             f"deliveries stored {deliveries:,}, 202s received {accepted:,}"
             + ("" if deliveries == accepted else " (WARNING: they differ)"),
             f"web log lines matching {LOG_ERRORS.pattern}: {len(errors)}"
             + "".join(f"\n  - `{line[:300]}`" for line in errors[:10])]
    return lines, abs(stored - created)


# ----------------------------------------------------------------------------------------------
# report


def combined(rounds: list[Round], kind: str) -> Round:
    out = Round(kind, 0)
    mine = [r for r in rounds if r.kind == kind]
    out.in_flight = sum(r.in_flight for r in mine) / len(mine) if mine else float("nan")
    for r in mine:
        out.triggers.add(r.triggers)
        for name in GETS:
            out.gets[name] += r.gets[name]
            out.asked[name] += r.asked[name]
        out.get_errors += r.get_errors
        out.web_cpu += r.web_cpu
        out.creates += r.creates
    return out


def held(rounds: list[Round]) -> list[float]:
    return [h for r in rounds if r.slowloris for h in r.slowloris.held]


def create_counts(creates: list[Create]) -> str:
    kinds = Counter(c.kind for c in creates)
    return " / ".join(str(kinds[k]) for k in ("created", "busy", "timed out")) + \
        f" / {sum(n for k, n in kinds.items() if k not in ('created', 'busy', 'timed out'))}"


def round_row(r: Round, label: str) -> str:
    t = r.triggers
    storm = r.kind == "storm" and r.creates
    slowest = max((c.seconds for c in r.creates), default=float("nan"))
    return (f"| {label} | {fmt(t.wall, 1)} | {t.accepted:,} | {fmt(t.rate)} | {fmt(pct(t.latencies, 50))} | "
            f"{fmt(pct(t.latencies, 99))} | " + " | ".join(fmt(pct(r.gets[n], 99)) for n in GETS) + " | "
            f"{fmt(1000 * r.web_cpu / t.accepted if t.accepted else float('nan'), 2)} | "
            f"{create_counts(r.creates) if storm else '—'} | {fmt(r.in_flight) if storm else '—'} | "
            f"{fmt(slowest, 2) if storm else '—'} |")


def figures(s: Setup, rounds: list[Round], half: int) -> list[dict]:
    """The summary's rows: storm rounds against the quiet rounds of the same run."""
    quiet, storm = combined(rounds, "quiet"), combined(rounds, "storm")
    q99, s99 = pct(quiet.triggers.latencies, 99), pct(storm.triggers.latencies, 99)
    ratio = storm.triggers.rate / quiet.triggers.rate if quiet.triggers.rate else None
    rows = [figure("trigger deliveries/s, slow creates in flight vs none", f"{storm.triggers.rate:,.0f}/s",
                   f"{quiet.triggers.rate:,.0f}/s", ratio, "≥ 0.8", ratio is not None and ratio >= 0.8),
            figure("trigger 202 p99, slow creates in flight vs none", f"{fmt(s99)} ms", f"{fmt(q99)} ms",
                   s99 / q99 if q99 else None, "≤ 3", bool(q99) and s99 <= 3 * q99)]
    for name, path in (("approve", "GET /approve/<token>"), ("login", "GET /login"),
                       ("monitors", "GET /api/monitors")):
        sp, qp = pct(storm.gets[name], 99), pct(quiet.gets[name], 99)
        rows.append(figure(f"{path} p99, slow creates in flight (baseline: none)", f"{fmt(sp)} ms", f"{fmt(qp)} ms",
                           sp / qp if qp else None, f"≤ {GET_GOAL_MS:g} ms", sp <= GET_GOAL_MS))
    rows += create_figures(s, rounds, storm, half)
    return rows


def create_figures(s: Setup, rounds: list[Round], storm: Round, half: int) -> list[dict]:
    limit = s.settings.CREATE_FETCH_TIMEOUT_SECONDS + 1
    slowest = max((c.seconds for c in storm.creates), default=float("nan"))
    other = sum(c.kind not in ("created", "busy", "timed out") for c in storm.creates)
    longest = max(held(rounds) or [float("nan")])
    header = s.settings.WEB_HEADER_TIMEOUT_SECONDS
    return [figure("slowest slow-create answer vs CREATE_FETCH_TIMEOUT_SECONDS + 1 s", f"{fmt(slowest, 2)} s",
                   f"{limit:g} s", slowest / limit, f"≤ {limit:g} s", slowest <= limit),
            figure("slow creates: created / told to retry / timed out / other", create_counts(storm.creates), "—",
                   None, "other 0", other == 0),
            figure("monitors half-created", str(half), "—", None, "0", half == 0),
            figure("slowloris connection held vs WEB_HEADER_TIMEOUT_SECONDS", f"{fmt(longest, 1)} s",
                   f"{header:g} s", longest / header if header else None)]


def figure_rows(rows: list[dict]) -> list[str]:
    out = ["| figure | storm | quiet / limit | ratio | goal | met |", "|---|---:|---:|---:|---:|:---:|"]
    for row in rows:
        met = {True: "yes", False: "NO", None: "—"}[row["met"]]
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}"
        out.append(f"| {row['figure']} | {row['vigil']} | {row['baseline']} | {ratio} | {row['goal']} | {met} |")
    return out


def create_rows(rounds: list[Round]) -> list[str]:
    """How the slow creates were answered: per kind, how many and how fast, and one answer text of each."""
    creates = [c for r in rounds for c in r.creates]
    out = ["| answer | calls | p50 s | p99 s | slowest s | one answer's text |", "|---|---:|---:|---:|---:|---|"]
    for kind, n in Counter(c.kind for c in creates).most_common():
        mine = [c for c in creates if c.kind == kind]
        seconds = [c.seconds for c in mine]
        out.append(f"| {kind} | {n} | {fmt(pct(seconds, 50) / 1000, 2)} | {fmt(pct(seconds, 99) / 1000, 2)} | "
                   f"{fmt(max(seconds), 2)} | {mine[0].text[:160].replace('|', '/')} |")
    return out


def source_lines(s: Setup, rounds: list[Round]) -> list[str]:
    storms = [r for r in rounds if r.kind == "storm"]
    loris = held(rounds)
    left = [h for r in storms for h in r.slowloris.still_open]
    reached = ", ".join(str(r.source_requests) for r in storms)
    return [f"fetches that reached the slow source per storm round: {reached}; most open at once "
            f"{s.source.most_open} (CREATE_CONCURRENCY {s.settings.CREATE_CONCURRENCY}), "
            f"most of one account at once {s.source.most_per_account} "
            f"(CREATE_CONCURRENCY_PER_ACCOUNT {s.settings.CREATE_CONCURRENCY_PER_ACCOUNT})",
            f"slowloris: {len(loris)} connections closed by the server, after "
            f"{', '.join(f'{h:.1f}' for h in loris) or '—'} s "
            f"(WEB_HEADER_TIMEOUT_SECONDS {s.settings.WEB_HEADER_TIMEOUT_SECONDS:g}); {len(left)} closed by the bench "
            f"at the end of its round, after {', '.join(f'{h:.1f}' for h in left) or '—'} s; "
            f"{sum(r.slowloris.bytes_sent for r in storms)} bytes trickled in all"]


def samples(rounds: list[Round], kind: str, name: str) -> list[tuple[float, float, int]]:
    """(seconds, asked at, round) of every answer of GET `name` in the `kind` rounds."""
    return [(sec, at, r.n) for r in rounds if r.kind == kind for sec, at in zip(r.gets[name], r.asked[name])]


def slowest_gets(rounds: list[Round]) -> list[str]:
    """Each path's slowest answer in each phase, and when in its round it was asked (a storm's creates are
    fired at 0 s); then the storm's GETs split into its first second (the burst of calls) and the rest."""
    lines = []
    for kind in ("storm", "quiet"):
        worst = [f"{name} {1000 * sec:.0f} ms ({kind} {n}, asked {at:.1f} s into it)"
                 for name in GETS if (found := samples(rounds, kind, name)) for sec, at, n in [max(found)]]
        lines.append(f"slowest GET answers, {kind} rounds: {', '.join(worst) or '—'}")
    split = []
    for name in GETS:
        found = samples(rounds, "storm", name)
        first, rest = [sec for sec, at, _ in found if at < 1.0], [sec for sec, at, _ in found if at >= 1.0]
        split.append(f"{name} {fmt(pct(first, 99))} ms (n={len(first)}) / {fmt(pct(rest, 99))} ms (n={len(rest)})")
    return lines + ["storm GET p99, asked in the first second after the creates were fired / later: "
                    + ", ".join(split)]


def description(s: Setup) -> list[str]:
    a, st = s.args, s.settings
    return [f"- Vigil: one `vigil web` process (uvicorn), PostgreSQL database {DB_NAME}, Redis db 7, no worker "
            f"(deliveries are stored and queued, not processed); CREATE_CONCURRENCY {st.CREATE_CONCURRENCY}, "
            f"CREATE_CONCURRENCY_PER_ACCOUNT {st.CREATE_CONCURRENCY_PER_ACCOUNT}, CREATE_FETCH_TIMEOUT_SECONDS "
            f"{st.CREATE_FETCH_TIMEOUT_SECONDS:g}, WEB_THREADS {st.WEB_THREADS}, WEB_PUBLIC_THREADS "
            f"{st.WEB_PUBLIC_THREADS}, WEB_HEADER_TIMEOUT_SECONDS {st.WEB_HEADER_TIMEOUT_SECONDS:g}, "
            f"DATABASE_MAX_CONNECTIONS {st.DATABASE_MAX_CONNECTIONS}; API and trigger rate limits raised",
            f"- Rounds: {', '.join(ROUND_ORDER)} × {a.blocks}, {a.round_seconds:g} s each: {a.concurrency} "
            f"trigger client threads (keep-alive sessions, {WEBHOOKS} unsigned webhook links, unique Idempotency-Keys) "
            f"and a process of its own GETting /approve/<token>, /login, /api/monitors in turn, one every "
            f"{a.get_interval:g} s (a keep-alive connection each, opened before the round)",
            f"- Storm: a slowloris client (one header byte a second, reconnected when closed), then {a.creates} "
            f"`monitor_create` calls at once from {SLOW_ACCOUNTS} accounts (a page source each, answering after "
            f"{a.slow_seconds:g} s), measured from the moment they are fired"]


def report(s: Setup, header: list[str], vers: str, rounds: list[Round], check_lines: list[str], half: int) -> str:
    rows = figures(s, rounds, half)
    record("web_under_load", rows)
    blocks = [rounds[i:i + len(ROUND_ORDER)] for i in range(0, len(rounds), len(ROUND_ORDER))]
    per_block = ", ".join(fmt(combined(b, "storm").triggers.rate / combined(b, "quiet").triggers.rate, 2)
                          for b in blocks)
    lines = ["# Vigil web under load: cheap paths while slow first checks are in flight", "", *header,
             f"- {vers}", *description(s), "",
             "| round | s | 202s | deliveries/s | 202 p50 ms | 202 p99 ms | /approve p99 ms | /login p99 ms | "
             "/api/monitors p99 ms | web CPU-ms/delivery | creates: created / retry / timed out / other | "
             "creates in flight (mean) | slowest create s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
             *[round_row(r, f"{r.kind} {r.n}") for r in rounds],
             round_row(combined(rounds, "quiet"), "**all quiet**"),
             round_row(combined(rounds, "storm"), "**all storm**"),
             "", *figure_rows(rows), "", f"Deliveries/s storm ÷ quiet, block by block: {per_block}", "",
             "Slow creates:", "", *create_rows(rounds), "", "Checks:", "",
             *[f"- {line}" for line in source_lines(s, rounds) + slowest_gets(rounds) + check_lines],
             f"- errors: triggers {dict(sum((r.triggers.errors for r in rounds), Counter())) or 'none'}, GETs "
             f"{dict(sum((r.get_errors for r in rounds), Counter())) or 'none'}",
             f"- load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# main


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="One web process: cheap paths while slow first checks are in flight.")
    parser.add_argument("--creates", type=int, default=100, help="monitor_create calls per storm round (default 100)")
    parser.add_argument("--slow-seconds", type=float, default=25.0,
                        help="how long the slow source takes to answer (default 25)")
    parser.add_argument("--blocks", type=int, default=2, help="blocks of rounds quiet, storm, storm, quiet (default 2)")
    parser.add_argument("--round-seconds", type=float, default=10.0,
                        help="length of each round's measurement (default 10: the creates' deadline)")
    parser.add_argument("--concurrency", type=int, default=16, help="trigger client threads (default 16)")
    parser.add_argument("--get-interval", type=float, default=0.03,
                        help="seconds between two sampled GETs (default 0.03; the three paths take turns)")
    parser.add_argument("--sample-gets", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.creates, args.blocks, args.concurrency) < 1 or args.round_seconds <= 0 or args.get_interval <= 0:
        parser.error("--creates, --blocks and --concurrency must be at least 1, the times more than 0")
    return args


def warm_up(s: Setup) -> Triggers:
    """Two seconds of the round's load, not measured."""
    warm = Round("warm-up", 0)
    s.sampler.open()
    s.sampler.start(2.0, s.args.get_interval)
    deliver(s.links, 2.0, s.args.concurrency, f"{s.run}-w", warm.triggers)
    s.sampler.collect(warm)
    if warm.get_errors or warm.triggers.errors:
        raise BenchError(f"errors in the warm-up: {dict(warm.get_errors + warm.triggers.errors)}")
    return warm.triggers


def run_rounds(s: Setup, procs: Processes) -> list[Round]:
    rounds = []
    for n, kind in enumerate(ROUND_ORDER * s.args.blocks, start=1):
        r = storm_round(s, n) if kind == "storm" else quiet_round(s, n)
        rounds.append(r)
        print(progress(r), flush=True)
        procs.check_alive()
    return rounds


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.sample_gets:
        return serve_sampler()
    header, procs = prepare()
    source: SlowSource | None = None
    s: Setup | None = None
    db: Db | None = None
    started = time.monotonic()
    try:
        print(f"setting up (database {DB_NAME}, Redis db 7, one vigil web) …", flush=True)
        source = SlowSource(args.slow_seconds)
        s = set_up(args, procs, source)
        db = Db(DB_NAME, "load-bench")
        warm = warm_up(s)
        rounds = run_rounds(s, procs)
        check_lines, half = checks(s, db, rounds, warm, procs)
        check_lines.append(f"whole run {time.monotonic() - started:.0f}s")
        text = report(s, header, versions(), rounds, check_lines, half)
    except (KeyboardInterrupt, BenchError) as exc:
        return failed(exc)
    finally:
        clean_up(procs, REDIS_URL)
        if s is not None:
            s.sampler.stop()
        if db is not None:
            db.close()
        if source is not None:
            source.close()
    return publish("web_under_load.md", text)


if __name__ == "__main__":
    sys.exit(main())

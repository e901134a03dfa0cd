"""Pieces of bench/wake_push.py: the receiver (its own process), the baseline's signed POST loop, reading back
what each wake went through on its way to the receiver, and the `--coalesce` case's read-back of its bursts."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import sys
import threading
import time
from bisect import bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import requests  # noqa: E402
from standardwebhooks import Webhook  # noqa: E402

from bench.common import Db  # noqa: E402
from bench.trigger_parts import EventStream  # noqa: E402

#: the receiver's two paths: Vigil's endpoint, and the baseline loop's
VIGIL_PATH, BASELINE_PATH = "/vigil", "/baseline"
#: models/wake_endpoints.LEASE: a claim sets next_attempt_at to claim time + this, and a delivered push keeps it
LEASE = timedelta(seconds=60)


# ----------------------------------------------------------------------------------------------
# the receiver: `wake_push.py --serve-receiver --port P` (its own process, so that neither the bench's sender
# threads nor its reading back share its GIL)


def serve_receiver(port: int) -> int:
    """A ThreadingHTTPServer on 127.0.0.1 (HTTP/1.1 keep-alive, a thread a connection) that notes when each POST's
    body has been read (time.time()), answers 200 at once, and only then checks its Standard Webhooks signature
    with `standardwebhooks` against the secret given for its path (POST /secret {path, secret}), as a receiver
    would at that moment (the library refuses a timestamp more than 5 minutes from its clock).
    GET /records?after=K: the records from the K-th on, as JSON."""
    records: list[dict] = []
    secrets: dict[str, Webhook] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        wbufsize = 64 * 1024

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            arrived = time.time()
            if self.path == "/secret":
                given = json.loads(raw)
                secrets[given["path"]] = Webhook(given["secret"])
                return self._answer(b'{"ok":true}')
            self._answer(b'{"ok":true}')
            wanted = {k.lower(): v for k, v in self.headers.items() if k.lower().startswith("webhook-")}
            record = {"path": self.path, "arrived": arrived, "headers": wanted, "body": raw.decode("utf-8", "replace"),
                      "valid": None, "error": ""}
            hook = secrets.get(self.path)
            if hook is not None:
                try:
                    hook.verify(raw, dict(self.headers.items()), json_parse=False)
                    record["valid"] = True
                except Exception as exc:  # noqa: BLE001 — the library's errors, reported as they are
                    record["valid"], record["error"] = False, f"{type(exc).__name__}: {exc}"
            with lock:
                records.append(record)

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/records"):
                after = int(self.path.partition("after=")[2] or 0)
                with lock:
                    chunk = records[after:]
                return self._answer(json.dumps(chunk).encode())
            self._answer(b'{"ok":true}')

        def _answer(self, payload: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()
    return 0


class Receiver:
    """The bench's side of the receiver: hands it the secrets, and reads its records as they come."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.session = requests.Session()
        self.session.trust_env = False
        self.records: list[dict] = []

    def url(self, path: str) -> str:
        return self.base + path

    def give_secret(self, path: str, secret: str) -> None:
        self.session.post(f"{self.base}/secret", json={"path": path, "secret": secret}, timeout=10).raise_for_status()

    def refresh(self) -> list[dict]:
        answer = self.session.get(f"{self.base}/records?after={len(self.records)}", timeout=30)
        answer.raise_for_status()
        self.records += answer.json()
        return self.records

    def of(self, path: str) -> list[dict]:
        return [r for r in self.records if r["path"] == path]

    def close(self) -> None:
        self.session.close()


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


# ----------------------------------------------------------------------------------------------
# the baseline: a bare, signed POST loop to the same receiver


@dataclass
class Baseline:
    """One round of the bare loop: {webhook-id: (sent, answered)} in epoch s, and what went wrong."""
    name: str
    sent: dict[str, tuple[float, float]] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)


def baseline_body(template: dict, number: int, marker: str) -> bytes:
    """A body of the same shape and size as a push Vigil sent (`template`, parsed): its own id, time and marker."""
    message = dict(template["data"]["message"])
    message["id"] = number
    message["created_at"] = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    message["content"] = re.sub(r"tib-[0-9a-f]+-[a-z]+\d+", marker, message["content"])
    return json.dumps({"type": template["type"], "timestamp": message["created_at"],
                       "data": {**template["data"], "message": message, "cursor": str(number)}},
                      separators=(",", ":")).encode()


def baseline_round(name: str, url: str, secret: str, template: dict, run: str, tag: str, count: int,
                   interval: float) -> Baseline:
    """`count` POSTs, the k-th at k × `interval` s from the start, one at a time from one keep-alive
    requests.Session (Vigil's push fetcher keeps its connection too): each body built and signed with
    `standardwebhooks` inside the timed interval, as Vigil builds and signs its own after the wake is stored."""
    out, hook = Baseline(name), Webhook(secret)
    session = requests.Session()
    session.trust_env = False
    session.get(url.rsplit("/", 1)[0] + "/healthz", timeout=10)
    start = time.monotonic()
    for i in range(count):
        with contextlib.suppress(ValueError):
            time.sleep(start + i * interval - time.monotonic())
        msg_id = f"base_{run}_{tag}{i}"
        sent = time.time()
        raw = baseline_body(template, 10 ** 9 + i, f"tib-{run}-{tag}{i}")
        stamp = datetime.now(timezone.utc)
        headers = {"content-type": "application/json", "webhook-id": msg_id,
                   "webhook-timestamp": str(int(stamp.timestamp())),
                   "webhook-signature": hook.sign(msg_id, stamp, raw.decode())}
        try:
            answer = session.post(url, data=raw, headers=headers, timeout=30)
        except requests.RequestException as exc:
            out.errors[type(exc).__name__] += 1
            continue
        if answer.status_code == 200:
            out.sent[msg_id] = (sent, time.time())
        else:
            out.errors[f"HTTP {answer.status_code}"] += 1
    session.close()
    return out


# ----------------------------------------------------------------------------------------------
# reading back


def epoch(naive_utc: datetime | None) -> float | None:
    return None if naive_utc is None else naive_utc.replace(tzinfo=timezone.utc).timestamp()


def iso_epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Wake:
    """One measured wake, every time known about it (epoch s; None where unknown)."""
    marker: str
    post_sent: float
    post_answered: float
    received: float | None = None     # deliveries.received_at: the web process stored the delivery
    d_enqueued: float | None = None   # --trace: Redis ran the relay's enqueue of its process_deliveries message
    d_fetched: float | None = None    # --trace: the worker's `deliveries` consumer fetched it
    processed: float | None = None    # deliveries.processed_at: the delivery actor's `now`, as it began
    stored: float | None = None       # messages.created_at (stamped just before the wake's commit)
    p_enqueued: float | None = None   # --trace: Redis ran the enqueue of its push_message
    p_fetched: float | None = None    # --trace: the worker's `pushes` consumer fetched it
    claimed: float | None = None      # wake_pushes.next_attempt_at − LEASE: the push actor's send() began
    post_began: float | None = None   # wake_attempts.attempted_at − latency_ms: the push's POST began (±1 ms)
    recorded: float | None = None     # wake_attempts.attempted_at: the answer was back
    arrived: float | None = None      # the receiver had read the body
    body_stored: float | None = None  # data.message.created_at as the body carries it
    message_id: int | None = None
    attempts: int = 0
    status: str = ""
    pushes_received: int = 0
    valid: bool | None = None


def read_wakes(db: Db, receiver: Receiver, sent: dict[str, tuple[float, float]], run: str,
               trace: "RedisTrace | None" = None) -> dict[str, Wake]:
    """Every measured delivery (marker → (POST sent, 202)) with its delivery row, its wake message, its push row and
    attempts, and what the receiver got for it (and, with a trace, when its two messages went through Redis)."""
    wakes = {m: Wake(m, s, a) for m, (s, a) in sent.items()}
    pattern = re.compile(rf"tib-{run}-[a-z]+\d+")
    for delivery_id, body, received, processed in db.query(
            "SELECT id, body, received_at, processed_at FROM deliveries"):
        found = pattern.search(body)
        if found and found.group(0) in wakes:
            wake = wakes[found.group(0)]
            wake.received, wake.processed = epoch(received), epoch(processed)
            if trace is not None:
                wake.d_enqueued, wake.d_fetched = trace.passage("deliveries", delivery_id)
    by_message = {}
    for message_id, content, created in db.query("SELECT id, content, created_at FROM messages WHERE role = 'wake'"):
        found = pattern.search(content)
        if found and found.group(0) in wakes:
            wake = wakes[found.group(0)]
            wake.message_id, wake.stored = message_id, epoch(created)
            by_message[message_id] = wake
            if trace is not None:
                wake.p_enqueued, wake.p_fetched = trace.passage("pushes", message_id)
    for message_id, status, attempts, lease_until, attempted, latency_ms in db.query(
            "SELECT p.message_id, p.status, p.attempts, p.next_attempt_at, a.attempted_at, a.latency_ms "
            "FROM wake_pushes p LEFT JOIN wake_attempts a ON a.push_id = p.id ORDER BY a.id"):
        wake = by_message.get(message_id)
        if wake is None:
            continue
        wake.status, wake.attempts = status, attempts
        if wake.recorded is None and attempted is not None:  # the first attempt's
            wake.recorded = epoch(attempted)
            wake.post_began = wake.recorded - latency_ms / 1000
        if status == "delivered" and attempts == 1:
            wake.claimed = epoch(lease_until - LEASE)
    for record in receiver.of(VIGIL_PATH):
        data = json.loads(record["body"])["data"]
        found = pattern.search(data["message"]["content"])
        if not found or found.group(0) not in wakes:
            continue
        wake = wakes[found.group(0)]
        wake.pushes_received += 1
        if wake.arrived is None:
            wake.arrived, wake.body_stored = record["arrived"], iso_epoch(data["message"]["created_at"])
            wake.valid = record["valid"] and record["headers"].get("webhook-id") == f"wake_{data['message']['id']}"
    return wakes


class RedisTrace:
    """`--trace`: MONITOR on the Redis server, read in a thread, keeping db `db`'s dramatiq dispatches: when Redis
    ran each enqueue (by queue and the ids its message carries) and each consumer's fetch (by queue). The fetch
    that took a message is the first of its queue after the enqueue (a consumer fetches whatever is there).
    MONITOR streams every command of the server to this process, and costs Redis and the bench some CPU."""

    def __init__(self, url: str, db: int) -> None:
        self.db, self.error = db, ""
        self.enqueued: dict[tuple[str, int], float] = {}
        self.fetches: dict[str, list[float]] = defaultdict(list)
        self.ready = threading.Event()
        self._client = redis.Redis.from_url(url)
        self._monitor = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._client.monitor() as monitor:
                self._monitor = monitor
                self.ready.set()
                for command in monitor.listen():
                    if command["db"] == self.db and command["client_type"] == "tcp":
                        self._note(command["time"], command["command"].split(" "))
        except Exception as exc:  # noqa: BLE001 — closing the connection from close() lands here too
            if not self._closing:
                self.error = f"{type(exc).__name__}: {exc}"

    _closing = False

    def _note(self, at: float, words: list[str]) -> None:
        # EVALSHA sha 1 dramatiq <command> <timestamp> <queue> … (dramatiq's dispatch.lua), the payload last
        if len(words) < 7 or words[0].lower() != "evalsha" or words[3] != "dramatiq":
            return
        command, queue = words[4], words[6]
        if command == "fetch":
            self.fetches[queue].append(at)
        elif command == "enqueue":
            with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                args = json.loads(words[-1])["args"]
                for number in args[0] if isinstance(args[0], list) else args[:1]:
                    self.enqueued.setdefault((queue, int(number)), at)

    def passage(self, queue: str, number: int) -> tuple[float | None, float | None]:
        """(enqueued, fetched) of the message that carried `number` on `queue`, Redis's clock."""
        at = self.enqueued.get((queue, number))
        if at is None:
            return None, None
        fetches = self.fetches[queue]
        k = bisect_right(fetches, at)
        return at, fetches[k] if k < len(fetches) else None

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(Exception):
            self._monitor.connection.disconnect()
        self._thread.join(5)


def gaps(wakes, start: str, end: str) -> list[float]:
    """Seconds from `start` to `end` of every wake that has both."""
    return [getattr(w, end) - getattr(w, start) for w in wakes
            if getattr(w, start) is not None and getattr(w, end) is not None]


# ----------------------------------------------------------------------------------------------
# --coalesce: bursts of one conversation's wakes, held and delivered as one message by the scheduler's tick


#: a coalesced message's sections: "--- i of N: <description> ---" (engine/wake.coalesced_text)
SECTION = re.compile(r"^--- \d+ of \d+: .* ---$", re.MULTILINE)


@dataclass
class Burst:
    """One burst: K deliveries to K monitors of one conversation within a second, coalescing on or off; the
    worker's and the scheduler's CPU over its busy spans (the idle wait for the window's close left out)."""
    mode: str                     # "on" or "off"
    tag: str
    sent: dict[str, tuple[float, float]] = field(default_factory=dict)  # marker → (POST sent, 202)
    worker_cpu: float = 0.0
    scheduler_cpu: float = 0.0
    seconds: float = 0.0
    messages: list[tuple[int, str, float]] = field(default_factory=list)  # (id, content, created_at) with its markers
    opened: dict[int, float] = field(default_factory=dict)                # message id → its first wake's created_at
    pushes: list[dict] = field(default_factory=list)                      # the receiver's records of this burst
    events: int = 0                                                       # message.created on the stream


def markers_in(text: str, run: str) -> list[str]:
    return re.findall(rf"tib-{run}-[a-z]+\d+", text)


def tag_of(marker: str) -> str:
    return re.sub(r"\d+$", "", marker.rsplit("-", 1)[1])


def read_bursts(db: Db, receiver: Receiver, stream_messages: list[set[str]], bursts: list[Burst], run: str) -> None:
    """Each burst's wake messages (and the created_at of the first wake each carries), its pushes and its events."""
    by_tag = {b.tag: b for b in bursts}
    opened = dict(db.query("SELECT message_id, min(created_at) FROM wakes WHERE message_id IS NOT NULL "
                           "GROUP BY message_id"))
    for message_id, content, created in db.query(
            "SELECT id, content, created_at FROM messages WHERE role = 'wake' AND content LIKE %s", (f"%tib-{run}-%",)):
        for tag in {tag_of(m) for m in markers_in(content, run)} & by_tag.keys():
            by_tag[tag].messages.append((message_id, content, epoch(created)))
            by_tag[tag].opened[message_id] = epoch(opened.get(message_id))
    for record in receiver.of(VIGIL_PATH):
        for tag in {tag_of(m) for m in markers_in(record["body"], run)} & by_tag.keys():
            by_tag[tag].pushes.append(record)
    for found in stream_messages:
        for tag in {tag_of(m) for m in found} & by_tag.keys():
            by_tag[tag].events += 1


def facts_once(b: Burst) -> int:
    """How many of the burst's accepted deliveries are in exactly one section of exactly one of its messages (a
    plain wake is one section)."""
    def sections(content: str) -> list[str]:
        return SECTION.split(content)[1:] if SECTION.search(content) else [content]
    every = [section for _, content, _ in b.messages for section in sections(content)]
    return sum(1 for marker in b.sent if sum(1 for s in every if re.search(rf"{re.escape(marker)}(?!\d)", s)) == 1)


def close_to_push(b: Burst, window: float) -> list[float]:
    """Seconds from each message's window close (its first wake + the window) to the receiver having its push."""
    arrived = {json.loads(rec["body"])["data"]["message"]["id"]: rec["arrived"] for rec in b.pushes}
    return [arrived[m] - (b.opened[m] + window) for m, _, _ in b.messages if m in arrived and b.opened.get(m)]


def close_to_stored(b: Burst, window: float) -> list[float]:
    return [created - (b.opened[m] + window) for m, _, created in b.messages if b.opened.get(m)]


def stored_to_push(b: Burst) -> list[float]:
    arrived = {json.loads(rec["body"])["data"]["message"]["id"]: rec["arrived"] for rec in b.pushes}
    return [arrived[m] - created for m, _, created in b.messages if m in arrived]


class MessageStream(EventStream):
    """GET /api/events with the runtime token: every message.created of the run, as the set of markers its content
    carries (a coalesced message carries several)."""

    def __init__(self, port: int, token: str, run: str) -> None:
        self.run, self.messages = run, []
        super().__init__(port, token, set(), re.compile(rf"tib-{run}-"))

    def _dispatch(self, event: str, raw: str, at: float) -> None:
        if event == "message.created":
            found = set(markers_in(json.loads(raw).get("content", ""), self.run))
            if found:
                self.messages.append(found)

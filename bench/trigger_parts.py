"""Load, latency and profiling pieces of bench/trigger_ingest.py."""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import math
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from bench import common  # noqa: E402
from bench.common import PYTHON, RESULTS, BenchError, Processes, tree_cpu  # noqa: E402

DB_NAME = "vigil_bench_triggers"
DATABASE_URL = f"postgresql://vigil:vigil@127.0.0.1:5432/{DB_NAME}"
REDIS_URL = "redis://127.0.0.1:6379/10"
MONITORS = 20
EMAIL = "trigger-bench@example.com"
CONVERSATION = "trigger-bench-"
#: process (and log file) names: another benchmark may be running at the same moment with its own
WEB, WORKER, SCHEDULER, BASELINE = "triggers-web", "triggers-worker", "triggers-scheduler", "triggers-baseline"
BASELINE_TABLE = "bench_baseline_deliveries"
PROFILE_RATE = 100  # py-spy samples per second


class Db(common.Db):
    """The bench's own autocommit connection to vigil_bench_triggers."""

    def __init__(self) -> None:
        super().__init__(DB_NAME, "trigger-bench")
        self.pid = self.scalar("SELECT pg_backend_pid()")


def pg_cpu_since(db: Db, before: dict[int, int]) -> float:
    return db.backend_cpu_since(before)


@dataclass
class Load:
    name: str
    sent: int = 0
    accepted: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    server_cpu: float = 0.0   # the web process (Vigil) or the baseline server
    pg_cpu: float = 0.0       # PostgreSQL backends of this database
    client_cpu: float = 0.0   # this process
    worker_cpu: float = 0.0   # Vigil's worker tree (0 while it is paused)

    @property
    def rate(self) -> float:
        return self.accepted / self.wall if self.wall else 0.0

    def ms(self, seconds: float) -> float:
        return 1000 * seconds / self.accepted if self.accepted else float("nan")

    def add(self, other: "Load") -> None:
        for name in ("sent", "accepted", "wall", "server_cpu", "pg_cpu", "client_cpu", "worker_cpu"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latencies += other.latencies
        self.errors += other.errors


def body_for(run: str, tag: str, i: int) -> bytes:
    """A distinct, realistic small webhook body (~400 bytes), with a marker the wake text will carry."""
    return json.dumps({
        "event": "deployment_status", "marker": f"tib-{run}-{tag}{i}", "seq": i,
        "sent_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "deployment": {"id": 100000 + i, "environment": "production", "ref": "main",
                       "sha": uuid.uuid5(uuid.NAMESPACE_OID, f"{run}{tag}{i}").hex + "0" * 8,
                       "creator": {"login": "release-bot", "type": "Bot"}},
        "deployment_status": {"state": "success", "description": "Deployment finished",
                              "log_url": f"https://ci.example.com/runs/{i}"},
        "repository": {"full_name": "example/service"},
    }).encode("utf-8")


def post_load(name: str, urls: list[str], bodies: list[bytes], keys: list[str], concurrency: int,
              server_pid: int, db: Db, worker_pid: int | None = None) -> Load:
    """POST every body once, from `concurrency` threads with a keep-alive requests.Session each."""
    result = Load(name, sent=len(bodies))
    health = urls[0].split("/api/")[0] + "/healthz"
    counter = itertools.count()
    ready = threading.Barrier(concurrency + 1)
    lock = threading.Lock()
    latencies: list[float] = []
    errors: Counter = Counter()

    def run() -> None:
        session = requests.Session()
        session.trust_env = False
        mine, bad = [], Counter()
        try:
            session.get(health, timeout=10)  # the keep-alive connection is open before the clock starts
            ready.wait()
            while (i := next(counter)) < len(bodies):
                headers = {"Content-Type": "application/json", "Idempotency-Key": keys[i]}
                start = time.perf_counter()
                try:
                    response = session.post(urls[i % len(urls)], data=bodies[i], headers=headers, timeout=30)
                except requests.RequestException as exc:
                    bad[type(exc).__name__] += 1
                    continue
                elapsed = time.perf_counter() - start
                if response.status_code == 202:
                    mine.append(elapsed)
                else:
                    bad[f"HTTP {response.status_code}"] += 1
        except threading.BrokenBarrierError:
            pass
        finally:
            session.close()
            with lock:
                latencies.extend(mine)
                errors.update(bad)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    ready.wait()
    server0, pg0, client0 = tree_cpu(server_pid), db.backend_cpu(), time.process_time()
    worker0 = tree_cpu(worker_pid) if worker_pid else 0.0
    wall0 = time.perf_counter()
    for thread in threads:
        thread.join()
    result.wall = time.perf_counter() - wall0
    result.client_cpu = time.process_time() - client0
    result.server_cpu = tree_cpu(server_pid) - server0
    result.pg_cpu = pg_cpu_since(db, pg0)
    result.worker_cpu = tree_cpu(worker_pid) - worker0 if worker_pid else 0.0
    result.latencies, result.errors, result.accepted = latencies, errors, len(latencies)
    return result


def bodies_and_keys(run: str, tag: str, n: int) -> tuple[list[bytes], list[str]]:
    return [body_for(run, tag, i) for i in range(n)], [f"{run}-{tag}-{i}" for i in range(n)]


# ----------------------------------------------------------------------------------------------
# the owner's event stream


class EventStream:
    """GET /api/events with the runtime token, read in a thread; notes when each marked wake arrives."""

    def __init__(self, port: int, token: str, monitor_ids: set[str], marker: re.Pattern) -> None:
        self.monitor_ids, self.marker = monitor_ids, marker
        self.seen: dict[str, float] = {}
        self.duplicates = 0
        self.foreign = Counter()   # events about monitors that are not this bench's (see the report)
        self.names = Counter()
        self.connected = threading.Event()
        self.error: str | None = None
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self._conn.request("GET", "/api/events", headers={"Authorization": f"Bearer {token}",
                                                          "Accept": "text/event-stream"})
        self._response = self._conn.getresponse()
        if self._response.status != 200:
            raise BenchError(f"GET /api/events answered {self._response.status}: {self._response.read()[:500]!r}")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        event, data = "message", []
        try:
            while True:
                line = self._response.readline()
                if not line:
                    return
                line = line.decode("utf-8").rstrip("\r\n")
                if line.startswith(":"):
                    if "connected" in line:
                        self.connected.set()
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                elif not line:
                    if data:
                        self._dispatch(event, "\n".join(data), time.time())
                    event, data = "message", []
        except Exception as exc:  # noqa: BLE001 — closing the socket from close() lands here too
            if not self._closing:
                self.error = f"{type(exc).__name__}: {exc}"

    _closing = False

    def _dispatch(self, event: str, raw: str, at: float) -> None:
        self.names[event] += 1
        data = json.loads(raw)
        if event == "monitor.updated" and data.get("monitor_id") not in self.monitor_ids:
            self.foreign[event] += 1
        elif event == "conversation.updated" and not str(data.get("conversation_id")).startswith(CONVERSATION):
            self.foreign[event] += 1
        if event != "message.created":
            return
        ref = ((data.get("metadata") or {}).get("wake") or {}).get("ref_id")
        if ref not in self.monitor_ids:
            self.foreign[event] += 1
            return
        found = self.marker.search(data.get("content", ""))
        if found is None:
            return
        if found.group(0) in self.seen:
            self.duplicates += 1
        else:
            self.seen[found.group(0)] = at

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(Exception):
            self._conn.sock.shutdown(2)
        with contextlib.suppress(Exception):
            self._conn.close()
        self._thread.join(5)


@dataclass
class Paced:
    name: str
    sent: dict[str, tuple[float, float]] = field(default_factory=dict)  # marker → (POST sent, 202 received)
    errors: Counter = field(default_factory=Counter)
    stored: dict[str, float] = field(default_factory=dict)               # marker → messages.created_at (epoch)
    streamed: dict[str, float] = field(default_factory=dict)             # marker → SSE event received
    rate: float = 0.0


def paced(name: str, run: str, tag: str, urls: list[str], count: int, interval: float) -> Paced:
    """One delivery every `interval` seconds, one at a time, from one keep-alive session."""
    out = Paced(name, rate=1 / interval)
    session = requests.Session()
    session.trust_env = False
    session.get(urls[0].split("/api/")[0] + "/healthz", timeout=10)
    bodies, keys = bodies_and_keys(run, tag, count)
    start = time.monotonic()
    for i in range(count):
        with contextlib.suppress(ValueError):
            time.sleep(start + i * interval - time.monotonic())
        headers = {"Content-Type": "application/json", "Idempotency-Key": keys[i]}
        sent = time.time()
        try:
            response = session.post(urls[i % len(urls)], data=bodies[i], headers=headers, timeout=30)
        except requests.RequestException as exc:
            out.errors[type(exc).__name__] += 1
            continue
        if response.status_code == 202:
            out.sent[f"tib-{run}-{tag}{i}"] = (sent, time.time())
        else:
            out.errors[f"HTTP {response.status_code}"] += 1
    session.close()
    return out


def collect(out: Paced, run: str, tag: str, stream: EventStream, db: Db, procs: Processes,
            timeout: float = 30) -> None:
    """Wait until every accepted delivery of `out` is a stored wake and an event on the stream."""
    pattern = re.compile(rf"tib-{run}-{tag}\d+")
    deadline = time.monotonic() + timeout
    while True:
        rows = db.query("SELECT content, created_at FROM messages WHERE role = 'wake' AND content LIKE %s",
                        (f"%tib-{run}-{tag}%",))
        for content, created_at in rows:
            found = pattern.search(content)
            if found:
                out.stored[found.group(0)] = created_at.replace(tzinfo=timezone.utc).timestamp()
        streamed = {m: t for m, t in stream.seen.items() if m in out.sent}
        if len(out.stored) >= len(out.sent) and len(streamed) >= len(out.sent):
            break
        if time.monotonic() > deadline:
            print(f"  WARNING: after {timeout:.0f}s only {len(out.stored)} wakes stored and {len(streamed)} "
                  f"events streamed of {len(out.sent)} deliveries ({out.name})", flush=True)
            break
        procs.check_alive()
        time.sleep(0.2)
    out.streamed = streamed


# ----------------------------------------------------------------------------------------------
# Vigil set-up and control



class Profiler:
    """py-spy (when it is installed in the venv) on one process tree, two samplers at once, raw collapsed stacks:
    "wall" samples every thread that is not idle (a thread waiting on a PostgreSQL or Redis reply counts), "gil"
    only the thread holding the GIL, i.e. where the process spends its Python CPU."""

    def __init__(self, name: str, pid: int, procs: Processes) -> None:
        spy = Path(PYTHON).with_name("py-spy")
        if not spy.exists():
            raise BenchError(f"--profile needs py-spy: {PYTHON} -m pip install py-spy")
        self.name, self.outs, self.procs = name, {}, procs
        for mode, extra in (("wall", []), ("gil", ["--gil"])):
            out = self.outs[mode] = RESULTS / f"trigger_ingest_{name}_{mode}.pyspy.txt"
            out.unlink(missing_ok=True)
            procs.start(f"py-spy-{name}-{mode}", [str(spy), "record", "-p", str(pid), "--subprocesses",
                                                  "-r", str(PROFILE_RATE), "-f", "raw", "-o", str(out),
                                                  "--nonblocking", *extra])
        time.sleep(1.5)  # attached

    def stop(self) -> str:
        for mode in self.outs:
            for name, proc in self.procs.started:
                if name == f"py-spy-{self.name}-{mode}":
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(20)
            self.procs.stop(f"py-spy-{self.name}-{mode}")
        return "\n\n".join(f"### {mode}: " + ("all non-idle threads (CPU and waiting on replies)" if mode == "wall"
                                                else "the GIL holder only (Python CPU)") + "\n\n"
                            + (summarize_profile(out) if out.exists() else "(no py-spy output)")
                            for mode, out in self.outs.items())


#: where a sample is spent, decided by its innermost frame that matches one of these (first bucket wins)
BUCKETS = [
    ("PostgreSQL round trips (psycopg2 execute, BEGIN/COMMIT, pool ping)",
     ("_execute_cursor (peewee", "begin (peewee", "commit (peewee", "rollback (peewee", "is_connection_closed (peewee",
      "_connect (peewee", "close (peewee", "psycopg2")),
    ("Redis round trips (redis-py socket I/O)", ("redis/connection.py", "redis/_parsers")),
    ("redis-py / limits / dramatiq client-side code", ("redis/", "limits/", "dramatiq/")),
    ("peewee query building and row mapping", ("peewee.py", "playhouse/")),
    ("uvicorn / h11 HTTP", ("uvicorn/", "h11/")),
    ("litestar request/response handling", ("litestar/", "msgspec")),
    ("Vigil code itself", ("app/", "models/", "engine/", "tasks/", "vigil/")),
    ("event loop, thread pool hand-off, waits (asyncio, anyio, concurrent.futures, threading)",
     ("asyncio/", "anyio/", "concurrent/", "threading.py", "selectors.py", "queue.py")),
]


def _bucket(frames: list[str]) -> str:
    for frame in reversed(frames):
        location = frame[frame.rfind("(") + 1:]
        for label, needles in BUCKETS:
            if any(needle in frame if "(" in needle else needle in location for needle in needles):
                return label
    return "other"


def summarize_profile(path: Path, top: int = 20) -> str:
    """Collapsed stacks → where the samples go: buckets by innermost matching frame, then top functions."""
    inclusive, own, buckets = Counter(), Counter(), Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith("process ")]
        total += n
        for frame in set(frames):
            inclusive[frame] += n
        if frames:
            own[frames[-1]] += n
        buckets[_bucket(frames)] += n
    if not total:
        return "(empty profile)"
    lines = [f"{total} samples at {PROFILE_RATE}/s", "", "| where (innermost matching frame) | % of samples |",
             "|---|---:|"]
    lines += [f"| {label} | {100 * n / total:.1f} |" for label, n in buckets.most_common()]
    lines += ["", f"Top {top} functions, inclusive:", ""]
    lines += [f"    {100 * n / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)
              if "threading.py" not in frame and "concurrent/futures" not in frame]
    lines += ["", f"Top {top} functions, own time:", ""]
    lines += [f"    {100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# report


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile, in ms."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return 1000 * ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def fmt(value: float, digits: int = 1) -> str:
    return "n/a" if value != value else f"{value:,.{digits}f}"

"""Pieces of bench/time_and_documents.py: the watches it stores through the models, the paced document writes,
the owner's event stream, and reading the wakes back."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from bench.common import BenchError, Db, clone_monitors, database_url  # noqa: E402
from bench.trigger_parts import EventStream  # noqa: E402

#: seed 001's armed-monitor limits (MONITOR_MAX_ARMED_PER_ACCOUNT, _PER_CONVERSATION): the time watches' owners
#: hold exactly as many as Vigil lets an account arm, so no conversation nears its 20 fires a day either
PER_ACCOUNT, PER_CONVERSATION = 50, 10
#: the documents' types: watched ones, and the baseline's that nobody watches
WATCHED_TYPE, BARE_TYPE = "ct:bench", "ct:bench-bare"
CONDITION = "has(doc.status) && doc.status == 'done'"
#: client threads the paced writes come from (a PUT takes longer than 1/50 s under load)
CLIENTS = 4


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # as the tables store times


def epoch(naive_utc: datetime) -> float:
    return naive_utc.replace(tzinfo=timezone.utc).timestamp()


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile, in the values' own unit."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# ----------------------------------------------------------------------------------------------
# storing watches through the models (in the bench process; the pool is closed after)


@contextlib.contextmanager
def models_bound(database_url: str):
    """The models bound to the bench's database for one unit of work; the pool's connections closed after,
    so that the PostgreSQL CPU the bench reads later is the Vigil processes' alone."""
    from models import connection, database
    from models.db import bind

    bind(database_url)
    try:
        with connection():
            yield database
    finally:
        with contextlib.suppress(AttributeError):
            database.obj.close_all()


def owners(prefix: str, accounts: int, conversations_each: int) -> list[tuple[int, int]]:
    """`accounts` new users with `conversations_each` chat conversations each: [(user id, conversation id)]."""
    from models.tables import Conversation, User

    now = utcnow()
    User.insert_many([{"email": f"{prefix}-{a}@bench.example", "password_hash": "-", "created_at": now}
                      for a in range(accounts)]).execute()
    users = [u.id for u in User.select(User.id).where(User.email ** f"{prefix}-%@bench.example").order_by(User.id)]
    Conversation.insert_many([{"user": u, "external_id": f"{prefix}-{u}-{k}", "channel": "chat", "created_at": now,
                               "updated_at": now} for u in users for k in range(conversations_each)]).execute()
    return [(c.user_id, c.id) for c in Conversation.select(Conversation.id, Conversation.user)
            .where(Conversation.external_id ** f"{prefix}-%").order_by(Conversation.user, Conversation.id)]


def seed_time_watches(dbname: str, count: int, t0: datetime, spread: float, prefix: str) -> dict[str, datetime]:
    """`count` time watches due over [t0, t0 + spread), whole seconds (a fire_at has no fraction), in an order
    unrelated to the insertion order. One is made the way the tool makes it (parse_create, then
    create_time_monitor); the rest are copies of its row in one INSERT … SELECT (common.clone_monitors, owners
    of PER_ACCOUNT in conversations of PER_CONVERSATION), each given its own fire_at in the same UPDATE that
    rounds its due time down to the second. Returns {monitor id: fire_at}."""
    from engine.sources.time_source import format_time
    from engine.spec import Limits, parse_create
    from models.monitors import create_time_monitor
    from models.tables import Conversation, User

    with models_bound(database_url(dbname)) as database, database.atomic():
        user_id, conv_id = owners(f"template-{prefix}", 1, 1)[0]  # not "{prefix}-…": clone_monitors takes those
        spec, _ = parse_create({"description": "stand-up starts", "note": "Post the stand-up link.",
                                "on_match": "Tell the user it is time.",
                                "source": {"type": "time", "fire_at": format_time(t0)}}, Limits())
        template = create_time_monitor(User.get_by_id(user_id), Conversation.get_by_id(conv_id), spec, utcnow(), t0)
        template_id, interval, expires = template.id, template.interval_seconds, template.expires_at
    clone_monitors(dbname, template_id, count, t0, spread, interval, expires, prefix=prefix,
                   per_user=PER_ACCOUNT, per_conversation=PER_CONVERSATION)
    db = Db(dbname, "timedocs-seed")
    try:
        db.query("UPDATE monitors SET next_check_at = date_trunc('second', next_check_at), source = replace(source, "
                 "%s, to_char(date_trunc('second', next_check_at), 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')) "
                 "WHERE id LIKE %s", (format_time(t0), f"{prefix}-%"))
        db.query("DELETE FROM users WHERE email LIKE %s", (f"template-{prefix}-%",))  # the template goes with it
        return {monitor_id: due for monitor_id, due in
                db.query("SELECT id, next_check_at FROM monitors WHERE id LIKE %s", (f"{prefix}-%",))}
    finally:
        db.close()


def seed_history(dbname: str, template_id: str, monitors: int, wakes_each: int) -> None:
    """A deployment's past: `monitors` finished copies of `template_id` (a fired time watch) in their own accounts,
    each with `wakes_each` wakes and wake messages from two days ago and older (outside any 24-hour fire cap),
    then fresh statistics, as autovacuum keeps them. Without it the wakes and messages tables start empty, the
    statistics taken by clone_monitors' ANALYZE say so, and PostgreSQL plans the wake path's lookups (the daily
    fire cap's count, the foreign-key checks) as scans of tables it believes empty, for the whole run."""
    clone_monitors(dbname, template_id, monitors, utcnow(), 1, 30, utcnow(), prefix="past")
    db = Db(dbname, "timedocs-seed")
    try:
        db.query("WITH past AS (SELECT m.id, m.conversation_id, k FROM monitors m CROSS JOIN generate_series(1, %s) k "
                 "WHERE m.id LIKE 'past-%%'), "
                 "msg AS (INSERT INTO messages (conversation_id, role, content, metadata, created_at) "
                 "SELECT conversation_id, 'wake', 'past ' || id || ' ' || k, '{}', "
                 "(now() AT TIME ZONE 'utc') - interval '2 days' - k * interval '1 hour' FROM past "
                 "RETURNING id, content, created_at) "
                 "INSERT INTO wakes (monitor_id, dedupe_key, message_id, created_at) "
                 "SELECT split_part(content, ' ', 2), 'past:' || split_part(content, ' ', 3), id, created_at FROM msg",
                 (wakes_each,))
        for table in ("monitors", "conversations", "users", "wakes", "messages"):
            db.query(f"ANALYZE {table}")
    finally:
        db.close()


def seed_documents(database_url: str, owner_email: str, watched: int, bare: int) -> dict[int, str]:
    """The owner's documents, each at version 1 with status "running" (stored by put_document, as a PUT stores
    them): `watched` of WATCHED_TYPE, each with one document watch (parse_create, then create_document_monitor,
    PER_CONVERSATION a conversation), and `bare` of BARE_TYPE that nobody watches. Returns {i: monitor id}.

    The watches' first check (the tool queues it at create) is left out: on a document whose condition is false
    it is quiet, and the measured write claims and checks the watch again in any case."""
    from engine.spec import Limits, parse_create
    from models.documents import encode, put_document
    from models.monitors import create_document_monitor
    from models.tables import Conversation, User

    with models_bound(database_url) as database, database.atomic():
        user, now = User.get(User.email == owner_email), utcnow()
        for item_type, n in ((WATCHED_TYPE, watched), (BARE_TYPE, bare)):
            for i in range(n):
                put_document(user.id, item_type, f"doc-{i}", encode({"status": "running", "n": i}), None, None, now)
        Conversation.insert_many([{"user": user.id, "external_id": f"doc-watch-{k}", "channel": "chat",
                                   "created_at": now, "updated_at": now}
                                  for k in range(math.ceil(watched / PER_CONVERSATION))]).execute()
        convs = {c.external_id: c for c in Conversation.select().where(Conversation.external_id ** "doc-watch-%")}
        ids = {}
        for i in range(watched):
            spec, _ = parse_create({"description": f"job {i} is done", "on_match": "Tell the user the job is done.",
                                    "source": {"type": "document", "item_type": WATCHED_TYPE, "item_id": f"doc-{i}"},
                                    "check": {"type": "cel", "expr": CONDITION}}, Limits())
            ids[i] = create_document_monitor(user, convs[f"doc-watch-{i // PER_CONVERSATION}"], spec, now).id
    return ids


# ----------------------------------------------------------------------------------------------
# the document writes


@dataclass
class Writes:
    """One paced round of PUTs: when each started and was answered (epoch s), by document number."""
    name: str
    item_type: str
    rate: float
    started: dict[int, float] = field(default_factory=dict)
    answered: dict[int, float] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)
    wall: float = 0.0

    @property
    def rtt(self) -> list[float]:
        return [self.answered[i] - self.started[i] for i in self.answered]

    def add(self, other: "Writes") -> None:
        self.started.update(other.started)
        self.answered.update(other.answered)
        self.errors.update(other.errors)
        self.wall += other.wall


def put_paced(base: str, token: str, name: str, item_type: str, numbers: range, rate: float, watched: bool,
              clients: int = CLIENTS) -> Writes:
    """PUT each document of `numbers` once, status "done", the k-th at k/rate s from the start whatever the
    earlier ones are doing (open loop: a slow answer does not slow the pace), from `clients` threads with a
    keep-alive session each, connected before the clock starts."""
    out, interval, lock = Writes(name, item_type, rate), 1 / rate, threading.Lock()
    slots, ready, clock = iter(enumerate(numbers)), threading.Barrier(clients + 1, timeout=30), {}

    def client() -> None:
        with requests.Session() as session:
            session.trust_env = False
            session.get(f"{base}/healthz", timeout=10)
            ready.wait()
            ready.wait()
            while True:
                with lock:
                    k, i = next(slots, (None, None))
                if k is None:
                    return
                with contextlib.suppress(ValueError):
                    time.sleep(clock["start"] + k * interval - time.monotonic())
                put_one(session, base, token, item_type, i, watched, out, lock)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        ready.wait()
        clock["start"] = time.monotonic()
        ready.wait()
    except threading.BrokenBarrierError:
        raise BenchError("a document client could not connect to the web process") from None
    for thread in threads:
        thread.join()
    out.wall = time.monotonic() - clock["start"]
    return out


def put_one(session: requests.Session, base: str, token: str, item_type: str, i: int, watched: bool, out: Writes,
            lock: threading.Lock) -> None:
    """One PUT of document i, noted in `out`: its start and answer times, or what went wrong."""
    body = json.dumps({"status": "done", "n": i, "outputs": {"txt": f"transcript {i}"}})
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    began = time.time()
    try:
        answer = session.put(f"{base}/api/documents/{item_type}/doc-{i}", data=body, headers=headers, timeout=30)
    except requests.RequestException as exc:
        with lock:
            out.errors[type(exc).__name__] += 1
        return
    ended = time.time()
    checked = answer.json().get("watches_checked") if answer.status_code == 200 else None
    with lock:
        if answer.status_code != 200:
            out.errors[f"HTTP {answer.status_code}"] += 1
        elif checked != (1 if watched else 0):
            out.errors[f"watches_checked {checked}"] += 1
        else:
            out.started[i], out.answered[i] = began, ended


class WakeEvents(EventStream):
    """GET /api/events with the owner's token: when each watch's wake (`message.created`) arrives."""

    def __init__(self, port: int, token: str, monitor_ids: set[str]) -> None:
        self.arrived: dict[str, float] = {}
        super().__init__(port, token, monitor_ids, marker=None)

    def _dispatch(self, event: str, raw: str, at: float) -> None:
        self.names[event] += 1
        if event != "message.created":
            return
        ref = ((json.loads(raw).get("metadata") or {}).get("wake") or {}).get("ref_id")
        if ref not in self.monitor_ids:
            self.foreign[event] += 1
        elif ref in self.arrived:
            self.duplicates += 1
        else:
            self.arrived[ref] = at


# ----------------------------------------------------------------------------------------------
# reading back


@dataclass
class TimeWatch:
    fire_at: datetime
    claimed: datetime | None = None    # last_checked_at: the (last) claim, by the scheduler's clock
    checked: datetime | None = None    # last_changed_at: the worker's `now` when it fired
    stored: datetime | None = None     # the wake message's created_at
    late_seconds: float | None = None  # what the wake itself says
    claims: int = 0                    # check_count: the scheduler's claims of it
    wakes: int = 0
    status: str = ""


def read_time_watches(db: Db, watches: dict[str, datetime], prefix: str) -> dict[str, TimeWatch]:
    found = {monitor_id: TimeWatch(fire_at) for monitor_id, fire_at in watches.items()}
    for monitor_id, status, claims, claimed, checked in db.query(
            "SELECT id, status, check_count, last_checked_at, last_changed_at FROM monitors WHERE id LIKE %s",
            (f"{prefix}-%",)):
        watch = found[monitor_id]
        watch.status, watch.claims, watch.claimed, watch.checked = status, claims, claimed, checked
    for monitor_id, created_at, metadata in db.query(
            "SELECT w.monitor_id, m.created_at, m.metadata FROM wakes w JOIN messages m ON m.id = w.message_id "
            "WHERE w.monitor_id LIKE %s", (f"{prefix}-%",)):
        watch = found[monitor_id]
        watch.wakes += 1
        watch.stored = created_at
        watch.late_seconds = json.loads(metadata).get("late_seconds")
    return found


def stored_wakes(db: Db, monitor_ids: set[str]) -> tuple[dict[str, float], Counter]:
    """{monitor id: its wake message's created_at (epoch s)} of the given watches, and wakes per watch."""
    stored, per_watch = {}, Counter()
    for monitor_id, created_at in db.query("SELECT w.monitor_id, m.created_at FROM wakes w JOIN messages m "
                                           "ON m.id = w.message_id WHERE w.monitor_id = ANY(%s)",
                                           (list(monitor_ids),)):
        stored[monitor_id] = epoch(created_at)
        per_watch[monitor_id] += 1
    return stored, per_watch


def wait_for(done, what: str, timeout: float, check_alive, poll: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            print(f"  WARNING: {what} not seen within {timeout:.0f} s", flush=True)
            return False
        check_alive()
        time.sleep(poll)
    return True


def sweeper_lateness(fire_at: datetime) -> float:
    """Seed 001's time watch: fired at "the next sweeper minute after fireAt" (a sweep on each whole minute that
    fires what is due by then). Its wait alone, seconds; what the sweep then spends firing is not added."""
    at = epoch(fire_at)
    return math.ceil(at / 60) * 60 - at


def require(condition: bool, message: str) -> None:
    if not condition:
        raise BenchError(message)

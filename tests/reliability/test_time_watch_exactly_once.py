"""Time watches fire exactly once: with two schedulers and two workers, one worker SIGKILLed mid-fire, and with
Vigil down at the time a watch was due.

A time watch's check is a few milliseconds of database work, so a kill that lands mid-fire by chance is rare. The
test makes it certain: it holds the conversation rows of the first second's watches (SELECT … FOR UPDATE), so the
worker that checks them stops inside fire_time_watch's transaction (monitor updated, wake row inserted, the
wake message waiting on the conversation row). That worker, found through the blocked backend's application_name
(PGAPPNAME), is SIGKILLed and replaced. Its transaction never commits, and its check message stays in its Redis ack
set; the scheduler claims those watches again TIME_RETRY_SECONDS later and another worker fires them. Then the
lost message is handed back to the queue, as Dramatiq's maintenance does once a worker's heartbeat is stale, and
must change nothing: its claims are no longer current.

How late each watch fired is printed as information only; no timing is asserted beyond a generous bound.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone

import psycopg2
import pytest
import redis

from tests.reliability.stack import Stack

pytestmark = pytest.mark.reliability

WATCHES = 30
SECONDS = 3                 #: the watches come due over this many distinct seconds, WATCHES // SECONDS in each
LEAD_SECONDS = 6            #: the first of those seconds is at least this far after the watches are created
BLOCK_SECONDS = 20          #: bound for a worker to reach the held conversation rows after the first second
SETTLE_SECONDS = 90         #: bound for every watch to be done after the first second (a re-claim takes ~30 s)
REDELIVERED_SECONDS = 30    #: bound for the lost message, handed back to the queue, to be processed
STALE_HEARTBEAT_MS = 5000   #: live workers poll Redis every 100 ms (dramatiq_worker_timeout), so this is dead
DOWN_PAST_DUE = 8           #: seconds Vigil stays down after the watch was due
QUEUE = "checks"
NS = "dramatiq"
READY = "Worker process is ready for action."  #: what Dramatiq's worker process logs once it consumes


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _start(stack: Stack, name: str) -> None:
    """A worker or scheduler (by its name) whose database sessions carry its name (libpq's PGAPPNAME), so a blocked
    one can be told apart; returns once it is up: a SIGTERM before it installed its handler would kill it."""
    stack.env["PGAPPNAME"] = name
    try:
        (stack.start_scheduler if name.startswith("scheduler") else stack.start_worker)(name)
    finally:
        del stack.env["PGAPPNAME"]
    assert _wait(lambda: _up(stack, name), 60, 0.1), f"{name} did not come up\n{stack.log_tails()}"


def _up(stack: Stack, name: str) -> bool:
    if name.startswith("scheduler"):  # its first tick opens the session its pool then keeps
        return name in [n for (n,) in stack.query("SELECT application_name FROM pg_stat_activity")]
    return READY in stack.logs[name].read_text(errors="replace").rsplit("===== start", 1)[-1]


def _blocked_by(stack: Stack, backend_pid: int) -> list[str]:
    """application_name of each session waiting on a lock that the session `backend_pid` holds."""
    rows = stack.query("SELECT application_name FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                       (backend_pid,))
    return [name for (name,) in rows]


def _lost_messages(client: redis.Redis) -> dict[tuple[bytes, bytes], list]:
    """The check messages that dead workers fetched and never acked: (ack set, message id) -> the claims."""
    lost = {}
    now_ms = time.time() * 1000
    for key in client.scan_iter(f"{NS}:__acks__.*.{QUEUE}"):
        worker_id = key.decode()[len(f"{NS}:__acks__."):-len(f".{QUEUE}")]
        beat = client.zscore(f"{NS}:__heartbeats__", worker_id)
        if beat is not None and beat > now_ms - STALE_HEARTBEAT_MS:
            continue
        for message_id in client.smembers(key):
            data = client.hget(f"{NS}:{QUEUE}.msgs", message_id)
            if data:
                lost[(key, message_id)] = json.loads(data)["args"][0]
    return lost


def _redeliver(client: redis.Redis, lost: dict) -> None:
    """Back on the queue, what Dramatiq's maintenance does with a dead worker's unacked messages (if it has not)."""
    for key, message_id in lost:
        if client.srem(key, message_id):
            client.rpush(f"{NS}:{QUEUE}", message_id)


def _watches(stack: Stack) -> dict[str, dict]:
    """Each monitor's status, claims, wake rows and wake messages (read straight from the database)."""
    found = {monitor_id: {"status": status, "claims": claims, "wake_keys": [], "messages": []}
             for monitor_id, status, claims in stack.query("SELECT id, status, check_count FROM monitors")}
    for monitor_id, key in stack.query("SELECT monitor_id, dedupe_key FROM wakes"):
        found[monitor_id]["wake_keys"].append(key)
    for monitor_id, content, metadata in stack.query(
            "SELECT o.id, m.content, m.metadata FROM monitors o JOIN messages m "
            "ON m.conversation_id = o.conversation_id AND m.role = 'wake' ORDER BY m.id"):
        found[monitor_id]["messages"].append((content, json.loads(metadata) if isinstance(metadata, str)
                                              else metadata))
    return found


def _fired_once(monitor_id: str, watch: dict) -> list[str]:
    """What is wrong with a watch that should have fired exactly once."""
    problems = []
    if watch["status"] != "done":
        problems.append(f"status {watch['status']}")
    if watch["wake_keys"] != ["time:fired"]:
        problems.append(f"wake rows {watch['wake_keys']}")
    wakes = [{k: v for k, v in meta.get("wake", {}).items() if k != "description"} for _, meta in watch["messages"]]
    if wakes != [{"source": "time", "ref_id": monitor_id, "dedupe_key": "time:fired"}]:
        problems.append(f"{len(wakes)} wake messages: {wakes}")
    return problems


def _wait(predicate, seconds: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def test_time_watch_fires_once_with_two_schedulers_and_a_worker_killed_mid_fire(stack_factory):
    began = time.monotonic()
    stack = stack_factory()
    stack.start_web()
    for name in ("worker-a", "worker-b", "scheduler-a", "scheduler-b"):
        _start(stack, name)
    client = redis.Redis.from_url(stack.env["REDIS_URL"])

    first = (_utcnow() + timedelta(seconds=LEAD_SECONDS + 1)).replace(microsecond=0)
    second_of, conversation_of = {}, {}
    for i in range(WATCHES):
        due = first + timedelta(seconds=i % SECONDS)
        created = stack.tool(f"time-{i}", description=f"time watch {i}", source={"type": "time", "fire_at": _iso(due)})
        assert created["status"] == "active" and created["fire_at"] == _iso(due), created
        second_of[created["monitor_id"]], conversation_of[created["monitor_id"]] = i % SECONDS, f"time-{i}"
    held = [conversation_of[m] for m, second in second_of.items() if second == 0]

    locker = psycopg2.connect(stack.database_url, connect_timeout=10)
    timeline: list[str] = []

    def note(what: str) -> None:
        timeline.append(f"{(_utcnow() - first).total_seconds():+.1f}s {what}")

    try:
        with locker.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            [(locker_pid,)] = cur.fetchall()
            cur.execute("SELECT id FROM conversations WHERE external_id = ANY(%s) FOR UPDATE", (held,))
            assert len(cur.fetchall()) == len(held)
        note(f"holding the conversations of the {len(held)} watches of the first second")
        assert _utcnow() < first, f"creating the watches took too long: {timeline}"
        assert _wait(lambda: _blocked_by(stack, locker_pid), (first - _utcnow()).total_seconds() + BLOCK_SECONDS,
                     0.05), f"no worker reached the held rows\n{stack.log_tails()}"
        blocked = _blocked_by(stack, locker_pid)
        victim = blocked[0]
        assert victim in ("worker-a", "worker-b"), blocked
        stack.kill(victim)
        note(f"{victim} SIGKILLed mid-fire (blocked sessions: {blocked})")
        _start(stack, f"{victim}-again")
        time.sleep(1.0)
    finally:
        locker.rollback()
        locker.close()
    note("conversations released")

    assert _wait(lambda: len(_lost_messages(client)) > 0, STALE_HEARTBEAT_MS / 1000 + 5), (
        f"the killed worker holds no unacked check message: the kill was not mid-fire; {timeline}")
    lost = _lost_messages(client)
    lost_claims = {monitor_id for claims in lost.values() for monitor_id, _ in claims}
    note(f"{len(lost)} check message(s) lost with {victim}, claims of {len(lost_claims)} watches")

    done = _wait(lambda: stack.query("SELECT count(*) FROM monitors WHERE status = 'done'")[0][0] == WATCHES,
                 SETTLE_SECONDS - (_utcnow() - first).total_seconds())
    note(f"all done: {done}")
    _redeliver(client, lost)
    processed = _wait(lambda: not any(client.hexists(f"{NS}:{QUEUE}.msgs", message_id) for _, message_id in lost),
                      REDELIVERED_SECONDS)
    time.sleep(1.0)  # a wrong fire of the redelivered claims would be written by now
    note(f"the lost message(s) handed back to the queue and processed: {processed}")

    watches = _watches(stack)
    context = f"timeline: {timeline}\n{stack.log_tails(2500)}"
    late = defaultdict(list)
    for monitor_id, watch in watches.items():
        for _, meta in watch["messages"]:
            late["re-claimed" if watch["claims"] > 1 else "first claim"].append(meta.get("late_seconds"))
    print(f"\n{'; '.join(timeline)}\nlate_seconds by claim: {dict(late)}; took {time.monotonic() - began:.0f}s")

    assert len(watches) == WATCHES
    wrong = {monitor_id: problems for monitor_id, watch in watches.items()
             for problems in [_fired_once(monitor_id, watch)] if problems}
    assert not wrong, f"watches that did not fire exactly once: {wrong}\n{context}"
    [(duplicates,)] = stack.query("SELECT count(*) FROM (SELECT 1 FROM wakes GROUP BY monitor_id, dedupe_key "
                                  "HAVING count(*) > 1) AS d")
    assert duplicates == 0
    assert processed, f"the redelivered message was never processed\n{context}"
    claims = Counter(watch["claims"] for watch in watches.values())
    reclaimed = {m for m, watch in watches.items() if watch["claims"] > 1}
    assert reclaimed, f"no watch was claimed again after the kill (claims: {claims})\n{context}"
    assert reclaimed <= lost_claims, f"watches claimed twice that no dead worker held: {reclaimed - lost_claims}"
    assert all(watches[m]["claims"] <= 2 for m in lost_claims), claims
    assert stack.alive() == {name: True for name in stack.processes}, context


def test_time_watch_passed_while_vigil_was_down_fires_once_at_start_saying_how_late(stack_factory):
    stack = stack_factory()
    stack.start_web()
    for name in ("worker", "scheduler-a", "scheduler-b"):
        _start(stack, name)
    created = stack.tool("down-over-the-time", description="a time watch Vigil sleeps through",
                         source={"type": "time", "delay": "8s"})
    fire_at = datetime.strptime(created["fire_at"], "%Y-%m-%dT%H:%M:%SZ")
    for name in ("scheduler-a", "scheduler-b"):  # the schedulers first: nothing claims it once they are down
        assert stack.stop(name) == 0, stack.log_tails()
    down_at = _utcnow()
    for name in ("worker", "web"):
        assert stack.stop(name) == 0, stack.log_tails()
    [(status, claims)] = stack.query("SELECT status, check_count FROM monitors WHERE id = %s",
                                     (created["monitor_id"],))
    assert (status, claims) == ("active", 0), f"claimed before Vigil went down: stopping took too long"
    assert down_at < fire_at, "the schedulers went down after the watch's time (a loaded machine): no test"

    time.sleep(max(0.0, (fire_at + timedelta(seconds=DOWN_PAST_DUE) - _utcnow()).total_seconds()))
    stack.start_web()
    for name in ("worker", "scheduler-a", "scheduler-b"):
        _start(stack, name)
    assert _wait(lambda: stack.query("SELECT status FROM monitors")[0][0] != "active", 30), stack.log_tails()
    time.sleep(1.0)  # a second fire would be written by now

    watch = _watches(stack)[created["monitor_id"]]
    assert not _fired_once(created["monitor_id"], watch), (watch, stack.log_tails())
    assert watch["claims"] == 1, watch
    [(content, meta)] = watch["messages"]
    print(f"\nlate_seconds {meta['late_seconds']}: {content!r}")
    assert meta["fire_at"] == created["fire_at"]
    assert meta["late_seconds"] >= DOWN_PAST_DUE - 3, meta
    assert "late" in content and "Vigil was not running" in content, content

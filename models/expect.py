"""Expected deliveries (issue 18): a trigger link whose deliveries stop coming wakes its conversation once per
missed window, and the next delivery says it is back.

Each delivery moves the monitor's deadline (`arrived`, one UPDATE in the delivery's transaction). The scheduler's
tick calls `miss_due`, which reads every monitor past its deadline in one query and claims them by compare-and-set
on that deadline and their claim number, so two schedulers (or a replayed tick) wake once, and the unique wake
key, taken from the missed expected time, guards it again; on PostgreSQL a batch of them is written in one
statement (a burst of a thousand misses took seconds written one at a time). It also writes the "back" notices
the deliveries left for it, so they are published like every other wake. Engine/expect.py holds the rules; this
module only loads and stores.
"""

from __future__ import annotations

import functools
import time
from datetime import datetime

from peewee import SQL, Case, PostgresqlDatabase, fn

from engine.expect import (
    Expect, Missed, back_text, deadline, local_time, missed, missed_text, parse_expect, terms,
)
from models import coalesce, events
from models.coalesce import written_of
from models.compiled import Compiled, run_prepared
from models.db import database, iso, utcnow
from models.due import sooner
from models.events import record_event
from models.results import (
    ONE_MORE, Lifecycle, Recorded, caps_columns, caps_params, caps_reached, composed, counts_of, daily_cap_reason,
    daily_capped, end_in_error, pause_and_tell, settled, store_fire, write_wake,
)
from models.tables import ACTIVE, DONE, Conversation, Message, Monitor

#: monitors claimed at most per tick, for each of the two passes
LIMIT = 500
#: missed windows written together: on PostgreSQL one statement for their updates, events, wakes, messages and
#: pushes, one for their caps (a miss written alone cost ~2 ms of scheduler and PostgreSQL CPU in four round trips)
BATCH = 250

# One statement for every delivery of a link with an expect: the new deadline, and, when the row (not this
# worker's copy) says deliveries were missing, the time one came back, for the scheduler to announce.
_ARRIVED = Compiled(lambda due, now, monitor_id: Monitor.update({
    Monitor.expect_due_at: due,
    Monitor.expect_back_at: fn.COALESCE(Monitor.expect_back_at,
                                        Case(None, ((Monitor.expect_missed_since.is_null(False), now),))),
}).where(Monitor.id == monitor_id))


def arrived(monitor: Monitor, now: datetime) -> None:
    """A delivery of `monitor`'s link was processed at `now`: its deadline moves on. Free for links without an
    expect (the stored source says so), and for monitors that are not active (a resume restarts the clock)."""
    raw = (monitor.source or {}).get("expect")
    if raw is None or monitor.status != ACTIVE:
        return
    due = deadline(parse_expect(raw), now)
    _ARRIVED.rowcount(due, now, monitor.id)
    monitor.expect_due_at = due
    if monitor.expect_missed_since is not None:  # back after a miss: the scheduler announces it
        sooner(now)


def _with_conversation():
    return Monitor.select(Monitor, Conversation.id, Conversation.external_id).join(Conversation)


def _due(now: datetime, limit: int) -> list[Monitor]:
    query = (_with_conversation().where((Monitor.status == ACTIVE) & (Monitor.expect_due_at <= now))
             .order_by(Monitor.expect_due_at).limit(limit))
    return list(query)


def _back(limit: int) -> list[Monitor]:
    return list(_with_conversation().where(Monitor.expect_back_at.is_null(False)).limit(limit))


class Told(list):
    """Each monitor told (as it is now) with the wake written; `more`: the time given ran out with misses left."""
    more = False


def miss_due(now: datetime, life: Lifecycle = Lifecycle(), limit: int = LIMIT, until: float | None = None,
             batch: int = BATCH) -> Told:
    """Announce the deliveries that came back, then wake each active monitor whose deadline passed, once per
    missed window, for the caller to publish. The due monitors are read in one query and written `batch` at a
    time (_miss_batch). `until` (time.monotonic()): stop there, one batch at least; a burst of misses must not
    hold up the scheduler's other work for seconds. `more`: misses may be left (the time ran out, or `limit`
    were due).

    Each monitor told is the copy read here with what was written applied to it (as a check's write applies to
    its copy), not read back: the compare-and-set that wrote it proves the row was that copy."""
    told = Told()
    for monitor in _back(limit):
        message = _announce_back(monitor)
        if message is not None:
            told.append((monitor, message))
    due = _due(now, limit)
    told.more = len(due) >= limit
    for start in range(0, len(due), batch):
        if until is not None and told and time.monotonic() >= until:
            told.more = True
            break
        told.extend(_miss_batch(due[start:start + batch], now, life))
    return told


def _miss_batch(monitors: list[Monitor], now: datetime, life: Lifecycle) -> list[tuple[Monitor, object]]:
    """Each monitor's missed window, as _miss writes it: on PostgreSQL the caps and in-flight deliveries of all of
    them in one statement, and the wakes of those within their caps in another (_fire_missed); a pause, an end or
    a daily-capped kind one at a time. SQLite (embedded, few monitors) writes them one at a time."""
    if not isinstance(database.obj, PostgresqlDatabase):
        return [(monitor, recorded.woke) for monitor in monitors if (recorded := _miss(monitor, now, life)).written]
    counts = counts_of([monitor.id for monitor in monitors], now, life, daily=False, also=_WAITING_OF)
    told, fires = [], []
    for monitor in monitors:
        if monitor.id not in counts:
            continue  # deleted since it was read
        _day, hour, waiting = counts[monitor.id]
        if waiting:
            continue  # a delivery came in time and is still on its way through the queue
        if daily_capped(monitor) or hour >= life.max_wakes_per_hour:
            # its own caps again, one at a time: a pause, or a cap counted per conversation (two of a batch in
            # one conversation would each be counted without the other)
            recorded = _miss(monitor, now, life)
            if recorded.written:
                told.append((monitor, recorded.woke))
        else:
            fires.append(monitor)
    return told + _fire_missed(fires, now) if fires else told


def _announce_back(monitor: Monitor):
    """The notice that deliveries came back, once per run of misses (its key is when the run began)."""
    since, count, back_at = monitor.expect_missed_since, monitor.expect_missed_count, monitor.expect_back_at
    with database.atomic():
        if _CLEAR_BACK.rowcount(monitor.id, back_at) != 1:
            return None
        monitor.expect_back_at, monitor.expect_missed_since, monitor.expect_missed_count = None, None, 0
        if since is None:
            return None
        expect = _expect_of(monitor)
        text = back_text(monitor.description, expect, back_at, since, max(count, 1))
        record_event(monitor, "back", "", back_at, {"reason": text})
        return write_wake(monitor, "trigger_back", f"expect:back:{iso(since)}", text,
                          {"missed_since": iso(since), "missed_windows": count, "arrived_at": iso(back_at)})


def _miss(monitor: Monitor, now: datetime, life: Lifecycle) -> Recorded:
    """One missed window (or several, when the tick ran late): a wake that counts like a fire, within the
    monitor's max_wakes and the hourly cap (past it, a pause); a trigger link is seed 000's, so seed 001's daily
    cap is not its guard (caps_reached never says it is over it)."""
    over_day, over_hour, waiting = _caps_and_waiting(monitor, now, life)
    if waiting:
        return Recorded(False)  # a delivery came in time and is still on its way through the queue
    expect = _expect_of(monitor)
    miss = missed(expect, monitor.expect_due_at, now)
    if over_day or over_hour:
        with database.atomic():  # the pause or the end, its event and its notice together
            if over_day:
                return end_in_error(monitor, monitor.claim_seq, daily_cap_reason(life, _finding(expect, miss)), now)
            reason = (f"It would have woken you more than {life.max_wakes_per_hour} times in an hour; "
                      f"the latest finding was: {_finding(expect, miss)}")
            return pause_and_tell(monitor, monitor.claim_seq, reason, now)
    last = monitor.wakes_used + 1 >= monitor.max_wakes
    text = missed_text(monitor.description, expect, miss, now, last=last)
    extra = {"expected_at": iso(miss.expected), "missed_windows": miss.windows, "next_expected_by": iso(miss.next_due)}
    # no transaction around the two round trips: the caps read holds no lock in one either, and the write is one
    # statement on PostgreSQL (store_fire gives SQLite's two steps a transaction of their own)
    return store_fire(monitor, monitor.claim_seq, _window_fields(monitor, miss, last, now),
                      ("missed", _finding(expect, miss), now, {"reason": text}), "trigger_missed",
                      f"expect:missed:{iso(miss.expected)}", text, extra,
                      guard={Monitor.expect_due_at: monitor.expect_due_at})


def _expect_of(monitor: Monitor) -> Expect:
    return parse_expect(monitor.source["expect"])


def _fire_missed(monitors: list[Monitor], now: datetime) -> list[tuple[Monitor, object]]:
    """PostgreSQL: the missed windows of monitors within their caps, as _miss writes each (store_fire's claimed
    update under the compare-and-set on the claim and the deadline, its event, its wake with its message and
    pushes), in one statement for all of them (_FIRE_MISSED_SQL). Those another scheduler holds or has written
    are left out; each monitor told with its message (None: held for its window, or its wake was written
    already)."""
    at = utcnow()
    rows, parts = {name: [] for name in _FIRE_MISSED_COLUMNS}, {}
    for monitor in monitors:
        expect = _expect_of(monitor)
        miss = missed(expect, monitor.expect_due_at, now)
        last = monitor.wakes_used + 1 >= monitor.max_wakes
        text = missed_text(monitor.description, expect, miss, now, last=last)
        extra = {"expected_at": iso(miss.expected), "missed_windows": miss.windows,
                 "next_expected_by": iso(miss.next_due)}
        key = f"expect:missed:{iso(miss.expected)}"
        content, metadata = composed(monitor, "trigger_missed", key, text, extra)
        fields = _window_fields(monitor, miss, last, now)
        event = events.event_params(monitor, "missed", _finding(expect, miss), now, {"reason": text})
        parts[monitor.id] = (monitor, fields, content, metadata)
        for name, value in zip(_FIRE_MISSED_COLUMNS, (
                monitor.id, monitor.claim_seq, monitor.expect_due_at, miss.next_due,
                fields[Monitor.expect_missed_since], fields[Monitor.expect_missed_count], fields[Monitor.status],
                event[1], event[4], event[3], key, content, Message.metadata.db_value(metadata),
                monitor.conversation_id, monitor.user_id)):
            rows[name].append(value)
    cursor = database.execute_sql(_FIRE_MISSED_SQL, {**rows, "now": now, "at": at, "kept": events.EVENTS_KEPT,
                                                     "seconds": coalesce.DEFAULT_SECONDS})
    told = []
    for monitor_id, *row in cursor.fetchall():
        monitor, fields, content, metadata = parts[monitor_id]
        for field, value in {**fields, Monitor.claim_seq: ONE_MORE, Monitor.events_written: ONE_MORE}.items():
            setattr(monitor, field.name, getattr(monitor, field.name) + 1 if value is ONE_MORE else value)
        written = written_of(row, monitor.conversation_id, content, metadata, at)
        told.append((monitor, settled(monitor, written, content, metadata, at)))
    return told


#: _FIRE_MISSED_SQL's arrays, one value per monitor: the monitor, its claim and deadline as read (the
#: compare-and-set), what its row becomes, its event, its wake and message, and whom they belong to
_FIRE_MISSED_COLUMNS = ("id", "claim_seq", "due_was", "next_due", "missed_since", "missed_count", "status",
                        "detail", "data", "check_count", "dedupe_key", "content", "metadata", "conversation_id",
                        "user_id")
_FIRE_MISSED_TYPES = ("varchar", "integer", "timestamp", "timestamp", "timestamp", "integer", "varchar", "text",
                      "text", "integer", "varchar", "text", "text", "integer", "integer")

#: PostgreSQL: a batch of missed windows in one statement, as models/results' claimed fire writes one (with_event
#: and models/coalesce.wake_ctes, set-based). The rows are locked in the order of their ids and those another
#: transaction holds skipped (SKIP LOCKED), so two schedulers never wait on each other, let alone deadlock; the
#: update's compare-and-set on the claim number, the status and the deadline then makes each window one
#: scheduler's, and the wake's unique key guards it again. An event and a wake are written only for a row the
#: update changed; a message only for a wake its conversation does not coalesce (the caller holds the others).
#: Returns, per monitor written, what models/coalesce.written_of reads.
_FIRE_MISSED_SQL = (
    "WITH i AS (SELECT * FROM unnest("
    + ", ".join(f"%({name})s::{kind}[]" for name, kind in zip(_FIRE_MISSED_COLUMNS, _FIRE_MISSED_TYPES))
    + ") AS t(" + ", ".join(_FIRE_MISSED_COLUMNS) + ")), "
    "locked AS (SELECT o.id FROM monitors o WHERE o.id IN (SELECT id FROM i) ORDER BY o.id FOR UPDATE SKIP LOCKED), "
    "upd AS (UPDATE monitors m SET expect_due_at = i.next_due, expect_missed_since = i.missed_since, "
    "expect_missed_count = i.missed_count, wakes_used = m.wakes_used + 1, fire_count = m.fire_count + 1, "
    "status = i.status, updated_at = %(now)s, claim_seq = m.claim_seq + 1, events_written = m.events_written + 1 "
    "FROM i JOIN locked ON locked.id = i.id WHERE m.id = i.id AND m.claim_seq = i.claim_seq "
    "AND m.status = 'active' AND m.expect_due_at = i.due_was RETURNING m.id, m.events_written), "
    "run AS (INSERT INTO monitor_runs (monitor_id, kind, detail, created_at, check_count, data, seq) "
    "SELECT upd.id, 'missed', i.detail, %(now)s, i.check_count, i.data, upd.events_written "
    "FROM upd JOIN i ON i.id = upd.id), "
    "pruned AS (DELETE FROM monitor_runs r USING upd WHERE r.monitor_id = upd.id "
    "AND r.seq <= upd.events_written - %(kept)s), "
    "gate AS (SELECT i.*, COALESCE(c.coalesce_seconds, %(seconds)s) AS seconds FROM upd JOIN i ON i.id = upd.id "
    "LEFT JOIN conversations c ON c.id = i.conversation_id), "
    "w AS (INSERT INTO wakes (monitor_id, dedupe_key, created_at, message_id) "
    "SELECT gate.id, gate.dedupe_key, %(at)s, CASE WHEN gate.seconds <= 0 THEN nextval('messages_id_seq') END "
    "FROM gate ON CONFLICT DO NOTHING RETURNING id, monitor_id, message_id), "
    "msg AS (INSERT INTO messages (id, conversation_id, role, content, metadata, created_at) "
    "SELECT w.message_id, i.conversation_id, 'wake', i.content, i.metadata, %(at)s "
    "FROM w JOIN i ON i.id = w.monitor_id WHERE w.message_id IS NOT NULL RETURNING id, conversation_id), "
    "touched AS (UPDATE conversations SET updated_at = %(at)s WHERE id IN (SELECT conversation_id FROM msg)), "
    "pushes AS (INSERT INTO wake_pushes (endpoint_id, message_id, status, attempts, next_attempt_at, created_at) "
    "SELECT e.id, msg.id, 'pending', 0, %(at)s, %(at)s FROM msg JOIN w ON w.message_id = msg.id "
    "JOIN i ON i.id = w.monitor_id JOIN wake_endpoints e ON e.user_id = i.user_id AND e.enabled "
    "RETURNING message_id) "
    "SELECT gate.id, w.id, w.message_id, gate.seconds, "
    "(SELECT COUNT(*) FROM pushes WHERE pushes.message_id = w.message_id) FROM gate "
    "LEFT JOIN w ON w.monitor_id = gate.id")


# built once (peewee built it anew on every call)
_CLEAR_BACK = Compiled(lambda monitor_id, back_at: Monitor.update({
    Monitor.expect_back_at: SQL("NULL"), Monitor.expect_missed_since: SQL("NULL"),
    Monitor.expect_missed_count: SQL("0"),
}).where((Monitor.id == monitor_id) & (Monitor.expect_back_at == back_at)))


def _window_fields(monitor: Monitor, miss: Missed, last: bool, now: datetime) -> dict:
    """What a missed window writes, under the compare-and-set on the claim and the deadline (store_fire's guard),
    so only one scheduler moves this deadline on; the row is the caller's copy while it holds, so the values
    are worked out from the copy."""
    return {Monitor.expect_due_at: miss.next_due,
            Monitor.expect_missed_since: monitor.expect_missed_since or miss.expected,
            Monitor.expect_missed_count: monitor.expect_missed_count + miss.windows,
            Monitor.wakes_used: ONE_MORE, Monitor.fire_count: ONE_MORE, Monitor.status: DONE if last else ACTIVE,
            Monitor.updated_at: now}


#: whether a delivery received by the deadline is still unprocessed, beside fire_caps' two counts
_WAITING = ("EXISTS (SELECT 1 FROM deliveries d JOIN trigger_links l ON l.id = d.link_id WHERE l.monitor_id = {id} "
            "AND d.processed_at IS NULL AND d.received_at <= {due})")
#: the same, as a column of counts_of's monitor `o`
_WAITING_OF = _WAITING.format(id="o.id", due="o.expect_due_at")


def _caps_and_waiting(monitor: Monitor, now: datetime, life: Lifecycle) -> tuple[bool, bool, bool]:
    """fire_caps' answer (over the daily cap, over the hourly one), and whether a delivery received by the
    deadline has not been processed yet: one statement, one round trip."""
    day, hour, waiting = run_prepared("vigil_miss_caps", _caps_and_waiting_sql(database.param),
                                      (*caps_params(monitor, now, life), monitor.id, monitor.expect_due_at)).fetchone()
    return (*caps_reached(day, hour, life, monitor), bool(waiting))


@functools.cache
def _caps_and_waiting_sql(param: str) -> str:
    """Its text, once per kind of database (the placeholder is the only thing that differs)."""
    return f"SELECT {caps_columns()}, {_WAITING.format(id=param, due=param)}"


def _finding(expect: Expect, miss: Missed) -> str:
    """ "no delivery by 2026-03-28 02:30 (Europe/Paris); expected every day at 02:30, grace 30m"."""
    return f"no delivery by {local_time(expect, miss.expected)} ({expect.tz}); {terms(expect)}"

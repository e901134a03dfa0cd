"""Processing a stored delivery: the same check, judge, dedupe and wake as a polled change."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime

import peewee
from peewee import fn

import requests

from engine.checks import evaluate
from engine.errors import ContentError
from engine.pipeline import CHANGED, FIRED, Outcome
from engine.sources import normalize
from engine.spec import check_from_record, source_from_record
from engine.wake import misfit_text
from models.compiled import Prepared, run_prepared
from models.db import database
from models.due import sooner
from models.judging import JudgePolicy, judge_match
from models.events import record_event
from models.expect import arrived
from models.results import (
    Lifecycle, Recorded, caps_columns, caps_params, caps_reached, counts_of, daily_capped, fire_caps, pause_and_tell,
    record_check, record_judge_failure, write_wake,
)
from models.tables import ACTIVE, Conversation, Delivery, Monitor, TriggerLink

#: attempts when another delivery of the same link updated the monitor first
ATTEMPTS = 5
#: the first key of the advisory locks held while a delivery is judged ("vd")
_LOCKS = 0x7664
#: the pgcode of a statement sent after an error in the same transaction
_IN_FAILED_TRANSACTION = "25P02"
_local = threading.Lock()
log = logging.getLogger(__name__)
_judging: set[int] = set()


@dataclass(frozen=True)
class Processed:
    """The delivery's monitor as it is now (None when there was nothing to do), the wake written if any, and
    the monitor's status before, so its events can tell whether the status moved."""
    monitor: Monitor | None = None
    woke: object = None
    status_before: str | None = None


class _Lost(Exception):
    """Another worker changed the monitor meanwhile; roll back and read it again."""


class _ToJudge(Exception):
    """A fire that its condition must judge: the transaction (and the monitor's row lock) ends before the call."""

    def __init__(self, delivery: Delivery, outcome: Outcome) -> None:
        super().__init__()
        self.delivery, self.outcome = delivery, outcome


def process(delivery_id: int, session: requests.Session, judge: JudgePolicy, life: Lifecycle,
            max_text_bytes: int, now: datetime) -> Processed:
    """Check one delivery's body against its monitor, exactly once.

    On PostgreSQL the delivery is read with its monitor's row locked, in the transaction that records it, so
    deliveries of one monitor in other threads or workers wait for each other instead of losing the claimed
    update's race and starting over (with 4 threads on 20 busy links, most deliveries did). A fire that a
    condition must judge lets go of the lock first: no lock is held across a judge call.

    DEPARTURE (issue 27 asks for no CPU-bound work inside a write transaction on either database): on PostgreSQL
    the check (a regex or CEL bounded by its own deadline) still runs inside the transaction that holds this
    monitor's row lock. There it holds up only the same monitor's other deliveries, never another writer; taking
    it out of the lock would bring back the lost races above, and the issue also asks that PostgreSQL's behaviour
    and ingest figures stay as they are.
    SQLite, where one write lock covers the whole file, checks outside any transaction (_attempt_embedded)."""
    for _ in range(ATTEMPTS):
        try:
            return _attempt(delivery_id, session, judge, life, max_text_bytes, now)
        except _Lost:
            continue
        except peewee.InternalError as exc:
            if getattr(getattr(exc, "orig", None), "pgcode", None) != _IN_FAILED_TRANSACTION:
                raise
            continue  # a prepared statement the server had dropped (models/prepared.py): prepared again now
    raise RuntimeError(f"delivery {delivery_id} lost the race {ATTEMPTS} times; it will be retried")


def process_batch(delivery_ids: list[int], life: Lifecycle, max_text_bytes: int, now: datetime,
                  done: Callable[[Processed], None], kept: Callable[[], None]) -> list[int]:
    """PostgreSQL: a message's deliveries in as few transactions as other workers allow, each locking its
    deliveries' rows and their monitors' by one statement. A batch took 16 BEGINs, locked reads and COMMITs
    where it now takes one of each, or a few (issue 18: the worker's drain must keep up with the web's ingest).

    A round locks what no other worker holds (SKIP LOCKED), so workers whose messages share monitors work side
    by side on different ones instead of queueing behind each other's whole batch; when all that is left is
    held elsewhere, one round waits for it, locking in (monitor, delivery) order, the order every batch takes,
    so two waiting batches never deadlock. Each delivery is checked and recorded as process() would, in delivery
    order per monitor, on one copy of the monitor that the deliveries before it changed.

    `done` is called for each delivery done, inside its round's transaction, so its events can be built from
    the monitor as that delivery left it; `kept` once that round committed: only what was built before it may be
    sent. Returns the ids left for process() one by one: from a fire that a condition must judge on (no lock is
    held across a judge call) on; or, when a round fails, that round's and the ones not reached (its transaction
    rolled back, so a bad delivery holds up only itself). A delivery that is gone is not returned."""
    pending = list(dict.fromkeys(delivery_ids))
    if not isinstance(database.obj, peewee.PostgresqlDatabase) or len(pending) < 2:
        return pending
    wait = False
    while pending:
        try:
            with database.atomic():
                rows = (_BATCH_WAITING if wait else _BATCH_FREE).rows(pending)
                judged = _round(rows, life, max_text_bytes, now, done)
        except Exception as exc:  # noqa: BLE001 — rolled back: each goes the one-by-one way, with its own retries
            log.info("%d deliveries of a batch went one by one (%s: %s)", len(pending), type(exc).__name__, exc)
            return pending
        kept()
        taken = {row.id for row in rows}
        if judged:
            return judged + [delivery_id for delivery_id in pending if delivery_id not in taken]
        if wait:
            return []  # all that was pending was locked and done: any not found is gone
        pending = [delivery_id for delivery_id in pending if delivery_id not in taken]
        wait = not rows  # the rest is held by other workers: wait for it
    return []


def _round(rows: list[Delivery], life: Lifecycle, max_text_bytes: int, now: datetime,
           done: Callable[[Processed], None]) -> list[int]:
    """One transaction of process_batch; the ids from a fire that must be judged on, if there is one.

    Two round trips a delivery fewer than process(): the round's marks are one statement at its end (its rows are
    locked and were read unprocessed, so nothing can mark them meanwhile), and the caps are read once for all its
    monitors. A delivery adds at most one wake that the caps count, so a monitor whose counts plus its deliveries
    in the round (its conversation's, for the daily cap) stay below the caps can't reach them in this round; the
    others read their caps before each fire, as process() does."""
    todo = [row for row in rows if row.processed_at is None]
    state = _Round(marks=[], clear=_clear_of_caps(todo, life, now))
    _rounds.current = state
    try:
        judged = []
        monitors: dict[str, Monitor] = {}
        for index, delivery in enumerate(rows):
            monitor = monitors.setdefault(delivery.link.monitor.id, delivery.link.monitor)
            delivery.link.monitor = monitor  # what the deliveries before it left
            if delivery.processed_at is not None:
                continue
            status_before = monitor.status
            try:
                processed = _check(delivery, monitor, life, max_text_bytes, now)
            except _ToJudge:
                judged = [row.id for row in rows[index:]]
                break
            done(replace(processed, status_before=status_before))
    finally:
        _rounds.current = None
    if state.marks:
        ids, outcomes = zip(*state.marks)
        run_prepared("vigil_deliveries_marked", _MARK_ALL_SQL, (now, list(ids), list(outcomes)))
    return judged


@dataclass
class _Round:
    """A round of process_batch in this thread: its marks, to write together, and the monitors whose caps it
    can't reach."""
    marks: list[tuple[int, str]]
    clear: set[str]


_rounds = threading.local()
_MARK_ALL_SQL = ("UPDATE deliveries SET processed_at = %s, outcome = marked.outcome FROM "
                 "unnest(CAST(%s AS integer[]), CAST(%s AS varchar[])) AS marked (id, outcome) "
                 "WHERE deliveries.id = marked.id")


def _clear_of_caps(todo: list[Delivery], life: Lifecycle, now: datetime) -> set[str]:
    per_monitor = Counter(delivery.link.monitor.id for delivery in todo)
    if not per_monitor:
        return set()
    conversation = {delivery.link.monitor.id: delivery.link.monitor.conversation_id for delivery in todo}
    per_conversation = Counter()
    for monitor_id, count in per_monitor.items():
        per_conversation[conversation[monitor_id]] += count
    capped = {delivery.link.monitor.id for delivery in todo if daily_capped(delivery.link.monitor)}
    counts = counts_of(list(per_monitor), now, life, daily=bool(capped))  # a trigger link's: no daily cap
    return {monitor_id for monitor_id, (day, hour) in counts.items()
            if (monitor_id not in capped
                or day + per_conversation[conversation[monitor_id]] < life.max_fires_per_conversation_day)
            and hour + per_monitor[monitor_id] < life.max_wakes_per_hour}


def _with_monitor() -> peewee.Select:
    """A delivery with its link's monitor and that monitor's conversation."""
    return (Delivery.select(Delivery.id, Delivery.body, Delivery.processed_at, TriggerLink.id, Monitor,
                            Conversation.id, Conversation.external_id)
            .join(TriggerLink).join(Monitor).join(Conversation))


_WITH_MONITOR = Prepared("vigil_delivery_with_monitor", lambda delivery_id: _with_monitor().where(
    Delivery.id == delivery_id))
_WITH_MONITOR_LOCKED = Prepared("vigil_delivery_with_monitor_locked", lambda delivery_id: _with_monitor().where(
    Delivery.id == delivery_id).for_update(of=(Delivery, Monitor)))

#: a batch's deliveries with their monitors (PostgreSQL only): those no other worker holds, and all of them,
#: waiting, locked in the one order every batch takes
def _batch(delivery_ids, skip: bool) -> peewee.Select:
    return (_with_monitor().where(Delivery.id == fn.ANY(delivery_ids)).order_by(Monitor.id, Delivery.id)
            .for_update(of=(Delivery, Monitor), skip_locked=skip))


_BATCH_FREE = Prepared("vigil_deliveries_free_locked", lambda delivery_ids: _batch(delivery_ids, True))
_BATCH_WAITING = Prepared("vigil_deliveries_with_monitors_locked", lambda delivery_ids: _batch(delivery_ids, False))


def _load(delivery_id: int) -> Delivery | None:
    """The delivery with its monitor, both rows locked until the transaction ends (PostgreSQL; SQLite has one
    writer at a time): a worker that waited reads them as the one before it left them."""
    query = _WITH_MONITOR_LOCKED if isinstance(database.obj, peewee.PostgresqlDatabase) else _WITH_MONITOR
    return next(iter(query.rows(delivery_id)), None)


def _attempt(delivery_id, session, judge, life, max_text_bytes, now) -> Processed:
    if not isinstance(database.obj, peewee.PostgresqlDatabase):
        return _attempt_embedded(delivery_id, session, judge, life, max_text_bytes, now)
    try:
        with database.transaction():
            delivery = _load(delivery_id)
            if delivery is None or delivery.processed_at is not None:
                return Processed()
            status_before = delivery.link.monitor.status
            done = _check(delivery, delivery.link.monitor, life, max_text_bytes, now)
    except _ToJudge as fire:
        delivery, status_before = fire.delivery, fire.delivery.link.monitor.status
        done = _judged(delivery, delivery.link.monitor, fire.outcome, session, judge, life, now)
    return replace(done, status_before=status_before)


#: embedded mode's turns: deliveries of one monitor take turns on one of these locks (picked by the monitor's id),
#: as PostgreSQL's row lock makes them take turns there
_TURNS = tuple(threading.Lock() for _ in range(64))


def _attempt_embedded(delivery_id, session, judge, life, max_text_bytes, now) -> Processed:
    """SQLite has one write lock for the whole file, so the check (a regex or CEL over the body) must not run
    inside a transaction: four slow checks at once held every other writer off until they failed "database is
    locked". Embedded mode is one process, so deliveries of one monitor take turns on a lock of this process
    instead, each reading the monitor as the one before it left it; the check runs in its turn, outside any
    transaction, and only the record takes the write lock (record_check's claim guard still refuses a stale
    write). A fire to judge leaves its turn before the judge call, as on PostgreSQL."""
    first = _load(delivery_id)
    if first is None or first.processed_at is not None:
        return Processed()
    with _TURNS[hash(first.link.monitor.id) % len(_TURNS)]:
        delivery = _load(delivery_id)  # read again in its turn
        if delivery is None or delivery.processed_at is not None:
            return Processed()
        status_before = delivery.link.monitor.status
        try:
            return replace(_check(delivery, delivery.link.monitor, life, max_text_bytes, now),
                           status_before=status_before)
        except _ToJudge as exc:
            fire = exc
    done = _judged(fire.delivery, fire.delivery.link.monitor, fire.outcome, session, judge, life, now)
    return replace(done, status_before=status_before)


def _check(delivery, monitor, life, max_text_bytes, now) -> Processed:
    if monitor.status != ACTIVE:
        _mark(delivery, now, "ignored")
        return Processed()  # the monitor did not change: nothing to publish
    try:
        content = normalize(source_from_record(monitor.source), delivery.body.encode("utf-8"), max_text_bytes)
        verdict = evaluate(check_from_record(monitor.check), content, monitor.check_state or {}, now)
    except ContentError as exc:
        return _misfit(delivery, monitor, str(exc), now)
    outcome = Outcome(FIRED if verdict.fired else CHANGED, content_hash=content.digest, verdict=verdict,
                      text=content.text)
    if outcome.kind == FIRED and monitor.condition:
        raise _ToJudge(delivery, outcome)
    return _record(delivery, monitor, outcome, False, life, now)


def _judged(delivery, monitor, outcome, session, judge, life, now) -> Processed:
    """The judge call for a fire, outside any transaction, then the record in one of its own."""
    with _exclusive(delivery.id) as ours:
        if not ours or _processed(delivery.id):  # another worker has this delivery's judge call
            return Processed()
        step = judge_match(monitor, outcome, session, judge, now)
        if step.over_budget or step.failure:
            return _judge_trouble(delivery, monitor, step, outcome, now)
        return _record(delivery, monitor, step.outcome, step.unchecked, life, now)


def _record(delivery: Delivery, monitor: Monitor, outcome: Outcome, unchecked: bool, life: Lifecycle,
            now: datetime) -> Processed:
    with database.transaction():  # part of _attempt's, when it runs in it (no savepoint round trips)
        caps = _mark(delivery, now, outcome.kind, life if outcome.kind == FIRED else None)
        recorded = record_check(monitor, monitor.claim_seq, outcome, now, life, unchecked, source="trigger",
                                caps=caps)
        if not recorded.written:
            raise _Lost()
    return Processed(monitor, recorded.woke)


@contextmanager
def _exclusive(delivery_id: int) -> Iterator[bool]:
    """Whether this worker may judge the delivery. The sweep can queue a delivery again while a slow judge
    call is still working on it; a second worker then leaves it alone rather than pay for the call twice.
    A worker that dies drops the lock with its connection, and the sweep brings the delivery back."""
    if isinstance(database.obj, peewee.PostgresqlDatabase):
        ours = database.execute_sql("SELECT pg_try_advisory_lock(%s, %s)", (_LOCKS, delivery_id)).fetchone()[0]
        try:
            yield ours
        finally:
            if ours:
                database.execute_sql("SELECT pg_advisory_unlock(%s, %s)", (_LOCKS, delivery_id))
        return
    with _local:  # embedded: one process, so a set of the deliveries being judged here does
        ours = delivery_id not in _judging
        _judging.add(delivery_id)
    try:
        yield ours
    finally:
        if ours:
            with _local:
                _judging.discard(delivery_id)


def _processed(delivery_id: int) -> bool:
    return Delivery.select().where((Delivery.id == delivery_id) & Delivery.processed_at.is_null(False)).exists()


def _misfit(delivery: Delivery, monitor: Monitor, problem: str, now: datetime) -> Processed:
    """A call without what the check reads: the agent hears it once; later ones stay silent."""
    with database.transaction():
        _mark(delivery, now, "misfit")
        record_event(monitor, "misfit", problem, now, {"reason": f"A delivery did not fit the check: {problem}"})
        woke = write_wake(monitor, "trigger", "misfit", misfit_text(monitor.description, problem), {})
    return Processed(monitor, woke)


def _judge_trouble(delivery: Delivery, monitor: Monitor, step, outcome: Outcome, now: datetime) -> Processed:
    """A judge failure leaves the delivery for the sweep to bring back; a spent budget pauses the monitor."""
    if step.failure:
        if not record_judge_failure(monitor, monitor.claim_seq, step.failure, now).written:
            raise _Lost()
        sooner(now)  # a sleeping scheduler looks now, and plans the sweep that brings this delivery back
        return Processed(monitor)
    with database.transaction():
        _mark(delivery, now, "paused")
        reason = f"Its judge model has used up its token budget; the latest match was: {outcome.verdict.found}"
        recorded: Recorded = pause_and_tell(monitor, monitor.claim_seq, reason, now)
    return Processed(monitor, recorded.woke)


_MARK = Prepared("vigil_delivery_mark", lambda delivery_id, now, outcome: (
    Delivery.update({Delivery.processed_at: now, Delivery.outcome: outcome})
    .where((Delivery.id == delivery_id) & Delivery.processed_at.is_null())))


#: PostgreSQL: the mark, and a fire's caps (models/results.fire_caps) read in the same round trip
_MARK_AND_CAPS_SQL = ("WITH mark AS (UPDATE deliveries SET processed_at = %s, outcome = %s WHERE id = %s AND "
                      "processed_at IS NULL RETURNING id) SELECT (SELECT COUNT(*) FROM mark), ")


def _mark(delivery: Delivery, now: datetime, outcome: str, life: Lifecycle | None = None) -> tuple[bool, bool] | None:
    """Mark the delivery processed, or raise _Lost; with `life` (a fire), also what fire_caps says, on PostgreSQL
    (None elsewhere: record_check reads it then)."""
    caps = None
    state = getattr(_rounds, "current", None)
    if state is not None:  # in a round of process_batch: written with the round's others at its end
        state.marks.append((delivery.id, outcome))
        if life is not None:
            monitor = delivery.link.monitor
            caps = (False, False) if monitor.id in state.clear else fire_caps(monitor, now, life)
        arrived(delivery.link.monitor, now)
        return caps
    if life is not None and isinstance(database.obj, peewee.PostgresqlDatabase):
        params = (now, outcome, delivery.id, *caps_params(delivery.link.monitor, now, life))
        marked, day, hour = run_prepared("vigil_delivery_mark_caps", _MARK_AND_CAPS_SQL + caps_columns(),
                                         params).fetchone()
        caps = caps_reached(day, hour, life, delivery.link.monitor)
    else:
        marked = _MARK.rowcount(delivery.id, now, outcome)
    if marked != 1:
        raise _Lost()
    arrived(delivery.link.monitor, now)  # an expected delivery came: its deadline moves on (models/expect)
    return caps

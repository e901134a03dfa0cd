"""Recording what a check found: quiet, changed, fired, failed; wakes, pauses and their notices."""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from peewee import PostgresqlDatabase, fn

from engine.pipeline import ERROR, FIRED, QUIET, Outcome
from engine.sources import DAILY_CAP_SOURCES, DOCUMENT_SOURCES, ERROR_PATH_SOURCES
from engine.explain import change_data
from engine.wake import ended_text, paused_text, time_text, wake_text
from models.coalesce import (
    WAKE_RESULT, Written, deliver, hold, wake_ctes, wake_params, window_seconds, write_new_wake, written_of,
)
from models.compiled import Compiled, run_prepared
from models.db import database, iso, utcnow
from models.runs import stop_runs
from models.events import COUNTS_ITS_EVENT, counted, event_params, record_event, with_event
from models.tables import ACTIVE, DONE, ERROR, PAUSED, Monitor, Wake

log = logging.getLogger(__name__)

#: a field's new value in _claimed_update: one more than it was
ONE_MORE = object()


@dataclass(frozen=True)
class Lifecycle:
    """The limits that pause a monitor (settings of the same names)."""
    unreachable_grace_seconds: int = 6 * 3600
    autopause_failures: int = 3
    #: seed 000's sources and seed 001's watches (not seed 002's streams): past it the monitor pauses
    max_wakes_per_hour: int = 10
    #: seed 001: its watches' fires per conversation in any 24 hours; the watch whose fire is past it ends in error
    max_fires_per_conversation_day: int = 20


@dataclass(frozen=True)
class Recorded:
    """What recording a check did: whether it won the claim, the message written if any, and a pause."""
    written: bool
    woke: object = None
    paused: bool = False


def record_check(monitor, claim_seq: int, outcome: Outcome, now: datetime,
                 life: Lifecycle = Lifecycle(), unchecked: bool = False, source: str = "monitor",
                 wake_extra: dict | None = None, caps: tuple[bool, bool] | None = None) -> Recorded:
    """Store what a check found beyond "unchanged", if its claim still holds.

    A quiet check writes nothing here unless it must clear an error or remember new raw bytes; it takes the
    scheduler's Claimed copy. Anything else takes the Monitor (with its conversation) that the wake is written for.
    `caps`: what fire_caps says, when the caller read it already in this transaction (models/deliveries).
    """
    if outcome.kind == QUIET:
        return _record_quiet(monitor, claim_seq, outcome)
    with database.transaction():  # inside a caller's transaction, part of it (no savepoint round trips)
        if outcome.kind == ERROR:
            return _record_error(monitor, claim_seq, outcome, now, life)
        return _record_change(monitor, claim_seq, outcome, now, life, unchecked, source, wake_extra or {}, caps)


def _record_quiet(monitor, claim_seq: int, outcome: Outcome) -> Recorded:
    fields = {}
    if outcome.raw_hash != monitor.raw_hash:
        fields[Monitor.raw_hash] = outcome.raw_hash
        fields.update(_changed_validators(monitor, outcome.validators))  # the new bytes', or none
    elif outcome.validators and not (monitor.etag or monitor.last_modified):
        fields.update(_changed_validators(monitor, outcome.validators))  # learnt once, for the next check to ask
    # the same bytes under other validators are not written: a server that makes them up on every answer would
    # cost a row write per check; the stored ones are asked with until the bytes change
    if monitor.last_error or monitor.failure_count or monitor.unreachable_since:
        fields.update({Monitor.last_error: "", Monitor.failure_count: 0, Monitor.unreachable_since: None})
    if fields and not _claimed_update(monitor, claim_seq, fields, bump=False):
        return Recorded(False)
    return _WRITTEN


_WRITTEN = Recorded(True)  # frozen: every quiet check that wrote shares it (one fewer object a check)


def _record_error(monitor: Monitor, claim_seq: int, outcome: Outcome, now: datetime, life: Lifecycle) -> Recorded:
    """Unreachable is a skipped check until the grace runs out; other errors count toward a pause."""
    if outcome.unreachable:
        since = monitor.unreachable_since or now
        if (now - since).total_seconds() >= life.unreachable_grace_seconds:
            return pause_and_tell(monitor, claim_seq, f"The source has been unreachable since {iso(since)} "
                                  f"({outcome.error.rstrip('.')}).", now)
        fields = {Monitor.unreachable_since: since, Monitor.last_error: outcome.error, Monitor.updated_at: now}
        return _store_run(monitor, claim_seq, fields, "unreachable", outcome.error, now)
    if monitor.failure_count + 1 >= life.autopause_failures and (monitor.source or {}).get("type") in ERROR_PATH_SOURCES:
        what = "Its poll failed" if monitor.source.get("type") == "tool" else "Its condition failed to evaluate"
        return end_in_error(monitor, claim_seq, f"{what} {monitor.failure_count + 1} times in a row; last: "
                            f"{outcome.error}", now)
    if monitor.failure_count + 1 >= life.autopause_failures:
        return pause_and_tell(monitor, claim_seq, f"The check failed {monitor.failure_count + 1} times in a row; "
                              f"last: {outcome.error}", now)
    fields = {Monitor.failure_count: ONE_MORE, Monitor.last_error: outcome.error,
              Monitor.unreachable_since: None, Monitor.updated_at: now}
    if (monitor.source or {}).get("type") in DOCUMENT_SOURCES and outcome.raw_hash:
        fields[Monitor.raw_hash] = outcome.raw_hash  # the version that failed: a sweep doesn't count it again
    return _store_run(monitor, claim_seq, fields, ERROR, outcome.error, now)


def _record_change(monitor: Monitor, claim_seq: int, outcome: Outcome, now: datetime, life: Lifecycle,
                   unchecked: bool, source: str, wake_extra: dict, caps: tuple[bool, bool] | None) -> Recorded:
    verdict = outcome.verdict
    fired = outcome.kind == FIRED
    over_day, over_hour = (caps or fire_caps(monitor, now, life)) if fired else (False, False)
    if over_day:
        return end_in_error(monitor, claim_seq, daily_cap_reason(life, verdict.found), now)
    if over_hour:
        reason = (f"It would have woken you more than {life.max_wakes_per_hour} times in an hour; "
                  f"the latest finding was: {verdict.found}")
        return pause_and_tell(monitor, claim_seq, reason, now, _state_fields(outcome, now))
    last = fired and monitor.wakes_used + 1 >= monitor.max_wakes
    fire_number = monitor.fire_count + 1
    fields = _state_fields(outcome, now)
    if fired:
        fields.update({Monitor.fire_count: ONE_MORE, Monitor.wakes_used: ONE_MORE,
                       Monitor.judge_failures: 0})
        if last:
            fields[Monitor.status] = DONE
    data = change_data(monitor.check or {}, verdict.summary, verdict.found, monitor.check_state, verdict.state,
                       outcome.judged)  # before the update: it gives the monitor its new state
    event = (outcome.kind, verdict.found or verdict.summary, now, data)
    if not fired:
        return Recorded(_claimed_update(monitor, claim_seq, fields, event=event))
    key = f"{monitor.check['type']}:{fire_number}:{verdict.fact}"
    text = wake_text(monitor.description, verdict.found, monitor.on_match, last=last, unchecked=unchecked)
    extra = {"found": verdict.found, **wake_extra}
    if monitor.condition:  # said only where there is a condition to have checked
        extra["checked_against_condition"] = not unchecked
    return store_fire(monitor, claim_seq, fields, event, source, key, text, extra)


def store_fire(monitor: Monitor, claim_seq: int, fields: dict, event: tuple, source: str, key: str, text: str,
               extra: dict, guard: dict | None = None) -> Recorded:
    """The claimed update, its event and the fire's wake: one statement on PostgreSQL (_claimed_fire), the update
    and then write_wake on SQLite. `guard`: more columns the row must still hold ({field: value}) for the claim
    to hold (a missed window's deadline, models/expect)."""
    if not isinstance(database.obj, PostgresqlDatabase):
        with database.atomic():  # the update and the wake together (a savepoint inside a caller's transaction)
            if not _claimed_update(monitor, claim_seq, fields, event=event, guard=guard):
                return Recorded(False)
            return Recorded(True, write_wake(monitor, source, key, text, extra))
    at = utcnow()
    text, metadata = composed(monitor, source, key, text, extra)
    written = _claimed_fire(monitor, claim_seq, fields, event, (key, text, metadata, at), guard)
    if written is None:
        return Recorded(False)
    return Recorded(True, settled(monitor, written, text, metadata, at))


def fire_time_watch(monitor: Monitor, claim_seq: int, fire_at: datetime, now: datetime,
                    life: Lifecycle = Lifecycle()) -> Recorded:
    """A time watch's moment came: it fires once (the unique wake key guards a second claim), and is done."""
    late = max((now - fire_at).total_seconds(), 0.0)
    if over_daily_cap(monitor, now, life):
        with database.transaction():
            return end_in_error(monitor, claim_seq, daily_cap_reason(life, f"the time {iso(fire_at)} came"), now)
    fields = {Monitor.status: DONE, Monitor.fire_count: ONE_MORE, Monitor.wakes_used: ONE_MORE,
              Monitor.last_changed_at: now, Monitor.updated_at: now}
    with database.transaction():
        if not _claimed_update(monitor, claim_seq, fields):
            return Recorded(False)
        record_event(monitor, "fired", f"{late:.1f} s late", now,
                     {"reason": f"Its time came ({iso(fire_at)}); it fired {late:.1f} s after it."})
        text = time_text(monitor.description, iso(fire_at), late, monitor.on_match)
        return Recorded(True, write_wake(monitor, "time", "time:fired", text, {"fire_at": iso(fire_at),
                                                                             "late_seconds": round(late, 1)}))


def _state_fields(outcome: Outcome, now: datetime) -> dict:
    """The new state with its raw_hash, and always the validators of the same body (or none)."""
    validators = outcome.validators
    return {Monitor.raw_hash: outcome.raw_hash, Monitor.content_hash: outcome.content_hash,
            Monitor.check_state: outcome.verdict.state, Monitor.last_changed_at: now, Monitor.failure_count: 0,
            Monitor.unreachable_since: None, Monitor.last_error: "", Monitor.updated_at: now,
            Monitor.etag: validators.etag if validators else "",
            Monitor.last_modified: validators.last_modified if validators else ""}


def validator_values(validators) -> dict:
    """The monitor's etag and last_modified columns for `validators` (None: none)."""
    return {"etag": validators.etag if validators else "",
            "last_modified": validators.last_modified if validators else ""}


def _changed_validators(monitor, validators) -> dict:
    """The validator columns to write: only those that differ from the monitor's."""
    values = validator_values(validators)
    return {getattr(Monitor, name): value for name, value in values.items() if getattr(monitor, name) != value}


def pause_and_tell(monitor: Monitor, claim_seq: int, reason: str, now: datetime,
                   extra_fields: dict | None = None) -> Recorded:
    """Pause the monitor and tell its conversation why, once for this pause."""
    fields = {**(extra_fields or {}), Monitor.status: PAUSED, Monitor.last_error: reason, Monitor.updated_at: now}
    if not _claimed_update(monitor, claim_seq, fields):
        return Recorded(False)
    if (monitor.source or {}).get("type") == "command":
        stop_runs(monitor.id)
    record_event(monitor, "paused", reason, now, {"reason": reason, "by_check": True})
    text = paused_text(monitor.description, reason)
    return Recorded(True, write_wake(monitor, "monitor_paused", f"paused:{claim_seq}", text, {"reason": reason}),
                    paused=True)


def end_in_error(monitor: Monitor, claim_seq: int, reason: str, now: datetime) -> Recorded:
    """Seed 001's error path: the monitor ends in `error` and tells its conversation once; nothing resumes it."""
    fields = {Monitor.status: ERROR, Monitor.last_error: reason, Monitor.updated_at: now}
    if not _claimed_update(monitor, claim_seq, fields):
        return Recorded(False)
    stop_runs(monitor.id)
    record_event(monitor, "ended", reason, now, {"reason": reason, "by_check": True})
    text = ended_text(monitor.description, reason)
    return Recorded(True, write_wake(monitor, "monitor_error", "error", text, {"reason": reason}), paused=True)


def end_any_in_error(monitor: Monitor, reason: str, now: datetime):
    """The error path from outside a check (the watched tool was edited or removed): whatever its live status, the
    monitor ends in `error` and tells its conversation once. The wake written, or False when it had ended."""
    changed = Monitor.update({Monitor.status: ERROR, Monitor.last_error: reason, Monitor.updated_at: now,
                              Monitor.claim_seq: Monitor.claim_seq + 1}) \
        .where((Monitor.id == monitor.id) & (Monitor.status == monitor.status)).execute()
    if changed != 1:
        return False
    monitor.status = ERROR
    stop_runs(monitor.id)
    record_event(monitor, "ended", reason, now, {"reason": reason})
    return write_wake(monitor, "monitor_error", "error", ended_text(monitor.description, reason), {"reason": reason})


def daily_cap_reason(life: Lifecycle, finding: str) -> str:
    return (f"This conversation has been woken {life.max_fires_per_conversation_day} times in the last 24 hours, the "
            f"most a conversation may be; the fire that would have gone past it was: {finding}")


#: the wakes that are fires: not the expiry notice, not pause, error or misfit notices
_NOTICE_KEYS = ("expired", "error", "misfit", "denied")


def daily_capped(monitor: Monitor) -> bool:
    """Whether seed 001's daily fire cap is this monitor's guard: only seed 001's watches (DAILY_CAP_SOURCES)."""
    return (monitor.source or {}).get("type") in DAILY_CAP_SOURCES


def over_daily_cap(monitor: Monitor, now: datetime, life: Lifecycle) -> bool:
    """Whether this seed 001 watch's conversation has had its fires for any 24 hours already (seed 001's 20 a
    day); never for another kind of monitor."""
    if not daily_capped(monitor):
        return False
    return fires_in_last_day(monitor.conversation_id, now) >= life.max_fires_per_conversation_day


#: the fires of seed 001's watches in a conversation ({kind}: _source_type's expression for their type)
_FIRES_FROM = ("FROM wakes w JOIN monitors m ON m.id = w.monitor_id WHERE m.conversation_id = {conversation} "
               "AND w.created_at > {p} AND w.dedupe_key NOT IN ({keys}) AND w.dedupe_key NOT LIKE 'paused:%%' "
               "AND {kind} IN (" + ", ".join(f"'{kind}'" for kind in DAILY_CAP_SOURCES) + ")")
_FIRES_SQL = "SELECT COUNT(*) " + _FIRES_FROM


def fires_in_last_day(conversation_id: int, now: datetime) -> int:
    """The fires of the conversation's seed 001 watches in the last 24 hours (what their daily cap counts)."""
    sql = _FIRES_SQL.format(p=database.param, conversation=database.param, keys=_notice_keys(), kind=_source_type())
    return database.execute_sql(sql, (conversation_id, now - timedelta(days=1))).fetchone()[0]


def _source_type(postgres: bool | None = None) -> str:
    """The SQL expression for the type in the source of the monitor `m` (the source is JSON text)."""
    if postgres is None:
        postgres = isinstance(database.obj, PostgresqlDatabase)
    return "(m.source::json ->> 'type')" if postgres else "json_extract(m.source, '$.type')"


#: the daily and the hourly count as two columns, each counted only up to its cap; {conversation} and {monitor}
#: are parameters, or (counts_of) the columns of an outer query
_CAPS_COLUMNS = ("(SELECT COUNT(*) FROM (SELECT 1 " + _FIRES_FROM + " LIMIT {p}) AS day), "
                 "(SELECT COUNT(*) FROM (SELECT 1 FROM wakes WHERE monitor_id = {monitor} AND created_at > {p} "
                 "AND dedupe_key <> 'expired' AND dedupe_key NOT LIKE 'paused:%%' LIMIT {p}) AS hour)")


def fire_caps(monitor: Monitor, now: datetime, life: Lifecycle) -> tuple[bool, bool]:
    """Whether a fire now would go past the conversation's daily cap, and past the monitor's hourly one: what
    over_daily_cap and wakes_in_last_hour say, in one statement that stops counting at each cap."""
    day, hour = run_prepared("vigil_fire_caps", "SELECT " + caps_columns(), caps_params(monitor, now, life)).fetchone()
    return caps_reached(day, hour, life, monitor)


def caps_columns() -> str:
    """fire_caps' two counts, as columns for a statement of the caller's that also does something else."""
    p = database.param
    return _CAPS_COLUMNS.format(p=p, conversation=p, monitor=p, keys=_notice_keys(), kind=_source_type())


def _notice_keys() -> str:
    return ", ".join(f"'{key}'" for key in _NOTICE_KEYS)


def caps_params(monitor: Monitor, now: datetime, life: Lifecycle) -> tuple:
    """caps_columns' parameters; a monitor the daily cap is not the guard of counts no fires for it (LIMIT 0)."""
    day_limit = life.max_fires_per_conversation_day if daily_capped(monitor) else 0
    return (monitor.conversation_id, now - timedelta(days=1), day_limit, monitor.id, now - timedelta(hours=1),
            life.max_wakes_per_hour)


#: PostgreSQL: fire_caps' two counts for each of several monitors at once (models/deliveries' rounds)
_CAPS_OF_SQL = ("SELECT o.id, " + _CAPS_COLUMNS.format(p="%s", conversation="o.conversation_id", monitor="o.id",
                                                        keys="{keys}", kind=_source_type(postgres=True))
                + "{also} FROM monitors o WHERE o.id = ANY(%s)")


def counts_of(monitor_ids: list[str], now: datetime, life: Lifecycle, daily: bool = True,
              also: str = "") -> dict[str, tuple]:
    """Each monitor's (conversation's fires in the last day, its wakes in the last hour), as fire_caps counts
    them (each stopping at its cap), in one statement. `daily` false: none of them has the daily cap, so no
    fires are counted (0). `also`: more columns of the monitor `o` (no parameters), after the two counts."""
    name, sql = _caps_of_statement(also)
    day_limit = life.max_fires_per_conversation_day if daily else 0
    rows = run_prepared(name, sql, (now - timedelta(days=1), day_limit, now - timedelta(hours=1),
                                    life.max_wakes_per_hour, monitor_ids))
    return {monitor_id: tuple(counts) for monitor_id, *counts in rows.fetchall()}


@functools.cache
def _caps_of_statement(also: str) -> tuple[str, str]:
    """counts_of's prepared statement for `also`: its name and text, built once per kind of call."""
    name = f"vigil_caps_of_{hashlib.sha1(also.encode()).hexdigest()[:12]}" if also else "vigil_caps_of"
    return name, _CAPS_OF_SQL.format(keys=_notice_keys(), also=f", {also}" if also else "")


def caps_reached(day: int, hour: int, life: Lifecycle, monitor: Monitor) -> tuple[bool, bool]:
    """(past the daily cap: only ever for seed 001's watches, past the hourly cap) from caps_columns' counts."""
    return daily_capped(monitor) and day >= life.max_fires_per_conversation_day, hour >= life.max_wakes_per_hour


#: the wakes that count toward the hourly cap: not the expiry notice, not pause notices
_WAKES_SINCE = Compiled(lambda monitor_id, since, expired, paused: Wake.select(fn.COUNT(Wake.id)).where(
    (Wake.monitor == monitor_id) & (Wake.created_at > since) & (Wake.dedupe_key != expired)
    & ~(Wake.dedupe_key ** paused)))  # ** is (I)LIKE on both databases


def wakes_in_last_hour(monitor_id: str, now: datetime) -> int:
    return _WAKES_SINCE.scalar(monitor_id, now - timedelta(hours=1), "expired", "paused:%")


def record_judge_failure(monitor: Monitor, claim_seq: int, error: str, now: datetime) -> Recorded:
    """A failed judge call on a match: nothing is stored as seen, so the next check judges it again."""
    fields = {Monitor.judge_failures: ONE_MORE, Monitor.last_error: error, Monitor.updated_at: now}
    return _store_run(monitor, claim_seq, fields, "judge_failed", error, now, {"reason": error})


def _store_run(monitor: Monitor, claim_seq: int, fields: dict, kind: str, detail: str, now: datetime,
               data: dict | None = None) -> Recorded:
    """The claimed update and the event for the monitor's page, together (never for a quiet check): one
    statement on PostgreSQL."""
    return Recorded(_claimed_update(monitor, claim_seq, fields, event=(kind, detail, now, data or {"reason": detail})))


def _claimed_update(monitor, claim_seq: int, fields: dict, bump: bool = True, event: tuple | None = None,
                    guard: dict | None = None) -> bool:
    """Write only while the claim holds; bumping the claim number makes any duplicate of it stale. Whether
    it was written; if so, the caller's copy (a Monitor, or a quiet check's Claimed) gets the same changes, so
    its events are built without reading the row back. `event`: record_event's arguments after the monitor,
    written with the update (in the same statement on PostgreSQL).

    A field set to ONE_MORE counts up. The statement's text depends only on which fields change, so it is
    built once per shape (peewee spent ~0.7 ms of CPU building this UPDATE on every call).
    """
    if bump:
        fields = {**fields, Monitor.claim_seq: ONE_MORE}
    together = event is not None and isinstance(database.obj, PostgresqlDatabase)
    params = _claimed_params(monitor, claim_seq, fields, event if together else None, guard)
    cursor = run_prepared(*_statement(fields, "event" if together else "", guard), params)
    if (cursor.fetchone()[0] if together else cursor.rowcount) != 1:
        return False
    _applied(monitor, fields)
    if event is not None and not together:
        record_event(monitor, *event)
    elif together:
        counted(monitor)
    return True


def _claimed_fire(monitor: Monitor, claim_seq: int, fields: dict, event: tuple, wake: tuple,
                  guard: dict | None = None) -> Written | None:
    """PostgreSQL: _claimed_update with its event and, only if the claim held, the fire's wake (`wake`: its dedupe
    key, text, metadata and time), in one statement: a fire was two round trips. None when the claim was lost."""
    key, text, metadata, at = wake
    fields = {**fields, Monitor.claim_seq: ONE_MORE}
    params = (*_claimed_params(monitor, claim_seq, fields, event, guard),
              *wake_params(monitor.id, monitor.conversation_id, monitor.user_id, key, text, metadata, at))
    updated, *row = run_prepared(*_statement(fields, "wake", guard), params).fetchone()
    if updated != 1:
        return None
    _applied(monitor, fields)
    counted(monitor)
    return written_of(row, monitor.conversation_id, text, metadata, at)


def _claimed_params(monitor, claim_seq: int, fields: dict, event: tuple | None, guard: dict | None = None) -> tuple:
    values = [field.db_value(value) for field, value in fields.items() if value is not ONE_MORE]
    guarded = [field.db_value(value) for field, value in (guard or {}).items()]
    return (*values, monitor.id, claim_seq, ACTIVE, *guarded, *(event_params(monitor, *event) if event else ()))


def _applied(monitor, fields: dict) -> None:
    """The caller's copy gets the changes the claimed update wrote."""
    for field, value in fields.items():
        setattr(monitor, field.name, getattr(monitor, field.name) + 1 if value is ONE_MORE else value)


def _statement(fields: dict, after: str, guard: dict | None = None) -> tuple[str, str]:
    """The prepared name and text of the claimed update of these fields; `after`: "" the update alone, "event" with
    its event, "wake" with its event and the fire's wake (the last two PostgreSQL's); `guard`'s columns are
    compared too."""
    columns = tuple((field.column_name, value is ONE_MORE) for field, value in fields.items())
    guards = tuple(field.column_name for field in guard or ())
    shape = (type(database.obj), after, columns, guards)
    return _UPDATES.get(shape) or _UPDATES.setdefault(shape, _update_sql(columns, after, guards))


_UPDATES: dict[tuple, tuple[str, str]] = {}


def _update_sql(columns: tuple[tuple[str, bool], ...], after: str, guards: tuple[str, ...] = ()) -> tuple[str, str]:
    """The UPDATE of this shape (with its event: models/events.with_event; and its wake: models/coalesce.wake_ctes),
    and the name PostgreSQL prepares it under (the same in every process)."""
    p = database.param
    sets = ", ".join(f'"{name}" = "{name}" + 1' if counts else f'"{name}" = {p}' for name, counts in columns)
    if after:
        sets = f"{sets}, {COUNTS_ITS_EVENT}"
    sql = f'UPDATE "monitors" SET {sets} WHERE "id" = {p} AND "claim_seq" = {p} AND "status" = {p}'
    sql += "".join(f' AND "{name}" = {p}' for name in guards)
    if after == "event":
        sql = with_event(sql)
    elif after == "wake":
        sql = with_event(sql, ctes=wake_ctes(after="upd"), results=WAKE_RESULT)
    return f"vigil_claimed_{hashlib.sha1(sql.encode()).hexdigest()[:16]}", sql


#: SQLite's wake (PostgreSQL writes it in models/coalesce._WAKE_SQL)
_NEW_WAKE = Compiled(lambda monitor_id, dedupe_key, created_at: Wake.insert({
    Wake.monitor: monitor_id, Wake.dedupe_key: dedupe_key, Wake.created_at: created_at}).on_conflict_ignore())
_WAKE_ID = Compiled(lambda monitor_id, dedupe_key: Wake.select(Wake.id).where(
    (Wake.monitor == monitor_id) & (Wake.dedupe_key == dedupe_key)))


def write_wake(monitor: Monitor, source: str, dedupe_key: str, text: str, extra: dict):
    """Append the wake message once per (monitor, dedupe_key); None when it was already written, or when the
    conversation coalesces: then the wake is held, and counts as a wake from now, but its message is written with
    the others of its window when the window closes (models/coalesce)."""
    now = utcnow()
    text, metadata = composed(monitor, source, dedupe_key, text, extra)
    if isinstance(database.obj, PostgresqlDatabase):  # one round trip: models/coalesce._WAKE_SQL
        written = write_new_wake(monitor.id, monitor.conversation_id, monitor.user_id, dedupe_key, text, metadata,
                                 now)
        return settled(monitor, written, text, metadata, now)
    if _NEW_WAKE.rowcount(monitor.id, dedupe_key, now) != 1:
        return None
    wake_id = _WAKE_ID.scalar(monitor.id, dedupe_key)
    _log_wake(monitor, wake_id, source)
    seconds = window_seconds(monitor.conversation_id)
    if seconds:
        hold(wake_id, monitor.conversation_id, monitor.user_id, text, metadata, now, seconds)
        return None
    return deliver(monitor.conversation_id, monitor.user_id, text, metadata, [wake_id])


def composed(monitor: Monitor, source: str, dedupe_key: str, text: str, extra: dict) -> tuple[str, dict]:
    """The wake message's text (with the owner's note) and metadata."""
    metadata = {"wake": {"source": source, "ref_id": monitor.id, "dedupe_key": dedupe_key,
                         "description": monitor.description},
                "on_match": monitor.on_match, **extra}
    if getattr(monitor, "note", ""):
        text = f"{text}\nYour note, as you wrote it when you armed this monitor:\n{monitor.note}"
        metadata["note"] = monitor.note
    return text, metadata


def settled(monitor: Monitor, written: Written, text: str, metadata: dict, now: datetime):
    """The message a new wake wrote; a wake its conversation coalesces is held for its window instead (None)."""
    if written.wake_id is not None:
        _log_wake(monitor, written.wake_id, metadata["wake"]["source"])
    if written.wake_id is not None and written.message is None:
        hold(written.wake_id, monitor.conversation_id, monitor.user_id, text, metadata, now, written.seconds)
    return written.message


def _log_wake(monitor: Monitor, wake_id: int, source: str) -> None:
    """One line a wake: its monitor and ids only (never what it found: that is the source's, maybe a secret)."""
    log.info("monitor %s woke its conversation: wake %s (%s)", monitor.id, wake_id, source)

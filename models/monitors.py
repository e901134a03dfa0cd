"""Monitors and the transactional operations on them: create, claim due, record a check, change status."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import peewee

from engine.pipeline import BASELINE, ERROR, FIRED, QUIET, Outcome
from engine.schedule import next_check_at
from engine.spec import MonitorSpec, spec_to_record
from engine.wake import expired_text, wake_text
from models.conversations import append_message
from models.db import database, iso, utcnow
from models.tables import Conversation, Monitor, MonitorRun, User, Wake

ACTIVE, PAUSED, DONE, CANCELLED, EXPIRED = "active", "paused", "done", "cancelled", "expired"
#: status -> action -> new status
TRANSITIONS = {
    "pause": {ACTIVE: PAUSED},
    "resume": {PAUSED: ACTIVE},
    "cancel": {ACTIVE: CANCELLED, PAUSED: CANCELLED},
}


class MonitorNotFound(LookupError):
    """No such monitor for this user."""


class TransitionRefused(ValueError):
    """The action does not apply to the monitor's status; the message says why."""


@dataclass(frozen=True)
class Recorded:
    """What recording a check did: whether it won the claim, and the wake message if one was written."""
    written: bool
    woke: object = None


def create_monitor(user: User, conversation: Conversation, spec: MonitorSpec, outcome: Outcome,
                   now: datetime, next_at: datetime) -> Monitor:
    assert outcome.kind == BASELINE and outcome.verdict is not None
    record = spec_to_record(spec)
    return Monitor.create(
        id=uuid.uuid4().hex, user=user, conversation=conversation, description=spec.description,
        source=record["source"], check=record["check"], on_match=spec.on_match,
        interval_seconds=spec.interval_seconds, max_wakes=spec.max_wakes, status=ACTIVE,
        next_check_at=next_at, expires_at=now + timedelta(seconds=spec.ttl_seconds),
        check_count=1, last_checked_at=now, last_changed_at=now, raw_hash=outcome.raw_hash,
        content_hash=outcome.content_hash, check_state=outcome.verdict.state,
        baseline=outcome.verdict.summary, created_at=now, updated_at=now)


def claim_due(now: datetime, limit: int) -> list[tuple[str, int]]:
    """Claim due monitors: each gets a new claim number, its next due time and the check counted.

    Locked rows are skipped, so any number of schedulers can claim at once without overlap. The claim
    is the only write an unchanged (quiet) check makes; a lost message leaves the monitor to be
    claimed again at that next due time.
    """
    with database.atomic(*_immediate()):
        query = (Monitor.select(Monitor.id, Monitor.claim_seq, Monitor.interval_seconds)
                 .where((Monitor.status == ACTIVE) & (Monitor.next_check_at <= now) & (Monitor.expires_at > now))
                 .order_by(Monitor.next_check_at).limit(limit))
        if database.for_update:
            query = query.for_update(skip_locked=True)
        rows = list(query.tuples())
        if rows:
            _mark_claimed(now, [(row[0], next_check_at(now, row[2])) for row in rows])
    return [(row[0], row[1] + 1) for row in rows]


def _mark_claimed(now: datetime, next_times: list[tuple[str, datetime]]) -> None:
    """One UPDATE for the whole batch, each row with its own jittered next due time."""
    p = database.param
    values = ", ".join([f"({p}, {p})"] * len(next_times))
    params = [now] + [value for pair in next_times for value in pair]
    database.execute_sql(
        "UPDATE monitors SET claim_seq = claim_seq + 1, check_count = check_count + 1, "
        f"last_checked_at = {p}, next_check_at = v.column2 FROM (VALUES {values}) AS v "
        "WHERE monitors.id = v.column1", params)


def load_for_check(monitor_id: str) -> Monitor | None:
    return (Monitor.select(Monitor, Conversation.id, Conversation.external_id).join(Conversation)
            .where(Monitor.id == monitor_id).first())


@dataclass
class Claimed:
    """What a check needs of a claimed monitor, read without building a model row."""
    id: str
    claim_seq: int
    user_id: int
    conversation_external_id: str
    status: str
    source: dict
    check: dict
    raw_hash: str
    content_hash: str
    state_json: str | None
    last_error: str
    failure_count: int
    check_count: int
    last_checked_at: datetime | None
    wakes_left: int

    def state(self) -> dict | None:
        return None if self.state_json is None else json.loads(self.state_json)


_CLAIMED_SQL = (
    'SELECT m.id, m.claim_seq, m.user_id, c.external_id, m.status, m.source, m."check", m.raw_hash, '
    "m.content_hash, m.check_state, m.last_error, m.failure_count, m.check_count, m.last_checked_at, "
    "m.max_wakes - m.wakes_used FROM monitors m JOIN conversations c ON c.id = m.conversation_id "
    "WHERE m.status = 'active' AND m.id IN ({ids})")


def load_claimed(claims: list[tuple[str, int]]) -> list[Claimed]:
    """The claimed monitors whose claims are still current and active, in one query."""
    wanted = dict(claims)
    if not wanted:
        return []
    sql = _CLAIMED_SQL.format(ids=", ".join([database.param] * len(wanted)))
    found = []
    for row in database.execute_sql(sql, list(wanted)).fetchall():
        if row[1] == wanted[row[0]]:
            checked = row[13] if row[13] is None or isinstance(row[13], datetime) else _parse_time(row[13])
            found.append(Claimed(*row[:5], json.loads(row[5]), json.loads(row[6]), *row[7:13], checked,
                                 max(row[14], 0)))
    return found


def record_check(monitor, claim_seq: int, outcome: Outcome, now: datetime) -> Recorded:
    """Store what a check found beyond "unchanged", if its claim still holds.

    A quiet check writes nothing here unless it must clear an error or remember new raw bytes.
    """
    if outcome.kind == QUIET:
        return _record_quiet(monitor, claim_seq, outcome)
    if not isinstance(monitor, Monitor):
        monitor = load_for_check(monitor.id)
    with database.atomic():
        if outcome.kind == ERROR:
            fields = {Monitor.failure_count: Monitor.failure_count + 1, Monitor.last_error: outcome.error,
                      Monitor.updated_at: now}
            return _store_run(monitor, claim_seq, fields, ERROR, outcome.error)
        return _record_change(monitor, claim_seq, outcome, now)


def _record_quiet(monitor: Monitor, claim_seq: int, outcome: Outcome) -> Recorded:
    fields = {}
    if outcome.raw_hash != monitor.raw_hash:
        fields[Monitor.raw_hash] = outcome.raw_hash
    if monitor.last_error or monitor.failure_count:
        fields.update({Monitor.last_error: "", Monitor.failure_count: 0})
    if fields and _claimed_update(monitor.id, claim_seq, fields, bump=False) != 1:
        return Recorded(False)
    return Recorded(True)


def _record_change(monitor: Monitor, claim_seq: int, outcome: Outcome, now: datetime) -> Recorded:
    verdict = outcome.verdict
    fired = outcome.kind == FIRED
    last = fired and monitor.wakes_used + 1 >= monitor.max_wakes
    fields = {Monitor.raw_hash: outcome.raw_hash, Monitor.content_hash: outcome.content_hash,
              Monitor.check_state: verdict.state, Monitor.last_changed_at: now, Monitor.failure_count: 0,
              Monitor.last_error: "", Monitor.updated_at: now}
    if fired:
        fields.update({Monitor.fire_count: Monitor.fire_count + 1, Monitor.wakes_used: Monitor.wakes_used + 1})
        if last:
            fields[Monitor.status] = DONE
    recorded = _store_run(monitor, claim_seq, fields, outcome.kind, verdict.found or verdict.summary)
    if not (recorded.written and fired):
        return recorded
    key = f"{monitor.check['type']}:{monitor.fire_count + 1}:{verdict.fact}"
    text = wake_text(monitor.description, verdict.found, monitor.on_match, last=last)
    return Recorded(True, write_wake(monitor, "monitor", key, text, {"found": verdict.found}))


def _store_run(monitor: Monitor, claim_seq: int, fields: dict, kind: str, detail: str) -> Recorded:
    if _claimed_update(monitor.id, claim_seq, fields) != 1:
        return Recorded(False)
    MonitorRun.create(monitor=monitor.id, kind=kind, detail=detail[:4000])
    return Recorded(True)


def _claimed_update(monitor_id: str, claim_seq: int, fields: dict, bump: bool = True) -> int:
    """Write only while the claim holds; bumping the claim number makes any duplicate of it stale."""
    if bump:
        fields = {**fields, Monitor.claim_seq: Monitor.claim_seq + 1}
    return (Monitor.update(fields)
            .where((Monitor.id == monitor_id) & (Monitor.claim_seq == claim_seq) & (Monitor.status == ACTIVE))
            .execute())


def write_wake(monitor: Monitor, source: str, dedupe_key: str, text: str, extra: dict):
    """Append the wake message once per (monitor, dedupe_key); None when it was already written."""
    inserted = (Wake.insert(monitor=monitor.id, dedupe_key=dedupe_key, created_at=utcnow())
                .on_conflict_ignore().as_rowcount().execute())
    if inserted != 1:
        return None
    wake = Wake.get((Wake.monitor == monitor.id) & (Wake.dedupe_key == dedupe_key))
    metadata = {"wake": {"source": source, "ref_id": monitor.id, "dedupe_key": dedupe_key},
                "on_match": monitor.on_match, **extra}
    message = append_message(monitor.conversation_id, "wake", text, metadata)
    Wake.update(message=message).where(Wake.id == wake.id).execute()
    return message


def change_status(user: User, monitor_id: str, action: str) -> Monitor:
    """Pause, resume or cancel one of the user's monitors."""
    monitor = Monitor.get_or_none((Monitor.id == monitor_id) & (Monitor.user == user))
    if monitor is None:
        raise MonitorNotFound(monitor_id)
    target = TRANSITIONS[action].get(monitor.status)
    if target is None:
        raise TransitionRefused(f"the monitor is {monitor.status}, so it can't be {_past(action)}")
    fields = {Monitor.status: target, Monitor.updated_at: utcnow()}
    if action == "resume":
        fields[Monitor.next_check_at] = utcnow()
    updated = Monitor.update(fields).where((Monitor.id == monitor.id) & (Monitor.status == monitor.status)).execute()
    if updated != 1:
        raise TransitionRefused("the monitor changed meanwhile; try again")
    return load_for_check(monitor.id)


def expire_due(now: datetime, limit: int = 500) -> list[tuple[Monitor, object]]:
    """End monitors past their expiry; one that never fired tells its conversation once.

    Returns each expired monitor with the wake message written for it, if any.
    """
    expired = []
    candidates = (Monitor.select().where(Monitor.status.in_((ACTIVE, PAUSED)) & (Monitor.expires_at <= now))
                  .limit(limit))
    for monitor in candidates:
        message = None
        with database.atomic():
            changed = (Monitor.update(status=EXPIRED, updated_at=now)
                       .where((Monitor.id == monitor.id) & (Monitor.status == monitor.status)).execute())
            if changed and monitor.fire_count == 0:
                message = write_wake(monitor, "monitor_expired", "expired", expired_text(monitor.description), {})
        if changed:
            expired.append((load_for_check(monitor.id), message))
    return expired


def user_monitors(user: User, conversation: Conversation | None = None, live: bool = False) -> list[Monitor]:
    query = Monitor.select(Monitor, Conversation.id, Conversation.external_id).join(Conversation).where(Monitor.user == user)
    if conversation is not None:
        query = query.where(Monitor.conversation == conversation)
    if live:
        query = query.where(Monitor.status.in_((ACTIVE, PAUSED)))
    return list(query.order_by(Monitor.created_at.desc()))


def event_payload(monitor: Monitor | Claimed) -> dict:
    """The monitor.updated event."""
    conversation = (monitor.conversation_external_id if isinstance(monitor, Claimed)
                    else monitor.conversation.external_id)
    return {"monitor_id": monitor.id, "status": monitor.status, "wakes_left": monitor.wakes_left,
            "last_checked_at": iso(monitor.last_checked_at), "conversation_id": conversation,
            "check_count": monitor.check_count, "last_error": monitor.last_error or None}


def monitor_json(monitor: Monitor) -> dict:
    return {**event_payload(monitor), "description": monitor.description, "source": monitor.source,
            "check": monitor.check, "on_match": monitor.on_match, "interval_seconds": monitor.interval_seconds,
            "next_check_at": iso(monitor.next_check_at) if monitor.status == ACTIVE else None,
            "expires_at": iso(monitor.expires_at), "max_wakes": monitor.max_wakes,
            "baseline": monitor.baseline, "created_at": iso(monitor.created_at)}


def _parse_time(value: str) -> datetime:
    """SQLite hands timestamps back as text."""
    return datetime.fromisoformat(value)


def _immediate() -> tuple:
    return ("IMMEDIATE",) if isinstance(database.obj, peewee.SqliteDatabase) else ()


def _past(action: str) -> str:
    return {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[action]

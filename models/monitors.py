"""Monitors and the transactional operations on them: create, claim due, record a check, change status."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta


from engine.pipeline import BASELINE, Outcome
from engine.expect import deadline_of
from engine.spec import MonitorSpec, spec_to_record
from engine.wake import expired_text
from models.claims import Claimed
from models.compiled import Prepared
from models.db import database, iso, utcnow
from models.documents import watch_key
from models.due import sooner
from models.events import record_event
from models.guardrails import one_per_wake
from models.results import validator_values, write_wake
from models.runs import stop_runs
from models.triggers import revoke
from models.tables import ACTIVE, AWAITING, CANCELLED, DONE, ERROR, EXPIRED, NOT_ENDED, PAUSED, Conversation, Monitor, User

#: status -> action -> new status
TRANSITIONS = {
    "pause": {ACTIVE: PAUSED},
    "resume": {PAUSED: ACTIVE},
    "cancel": {ACTIVE: CANCELLED, PAUSED: CANCELLED, AWAITING: CANCELLED},
}


log = logging.getLogger(__name__)


class MonitorNotFound(LookupError):
    """No such monitor for this user."""


class TransitionRefused(ValueError):
    """The action does not apply to the monitor's status; the message says why."""


def create_monitor(user: User, conversation: Conversation, spec: MonitorSpec, outcome: Outcome,
                   now: datetime, next_at: datetime) -> Monitor:
    """A polled monitor, with its first check as the baseline."""
    assert outcome.kind == BASELINE and outcome.verdict is not None
    return _create(user, conversation, spec, now, next_check_at=next_at, check_count=1, last_checked_at=now,
                   last_changed_at=now, raw_hash=outcome.raw_hash, content_hash=outcome.content_hash,
                   check_state=outcome.verdict.state, baseline=outcome.verdict.summary,
                   **validator_values(outcome.validators))


def create_time_monitor(user: User, conversation: Conversation, spec: MonitorSpec, now: datetime,
                        fire_at: datetime) -> Monitor:
    """A time watch: due exactly at its time (no jitter), when the scheduler claims it and it fires once."""
    return _create(user, conversation, spec, now, next_check_at=fire_at, check_state={})


def create_document_monitor(user: User, conversation: Conversation, spec: MonitorSpec, now: datetime) -> Monitor:
    """A document watch: nothing is read at create (the condition is parse-checked only); its first check is
    queued at once by the caller (claim 1), and a condition that already holds fires then."""
    return _create(user, conversation, spec, now, next_check_at=now + timedelta(seconds=spec.interval_seconds),
                   check_state={"holds": False}, claim_seq=1, check_count=1, last_checked_at=now,
                   watch_key=watch_key(user.id, spec.source.item_type, spec.source.item_id))


def create_event_monitor(user: User, conversation: Conversation, spec: MonitorSpec, now: datetime) -> Monitor:
    """A monitor whose events arrive (a trigger link): never claimed by the scheduler."""
    expires_at = now + timedelta(seconds=spec.ttl_seconds)
    return _create(user, conversation, spec, now, next_check_at=expires_at, polled=False, check_state={},
                   expect_due_at=deadline_of(spec.source.expect, now))


def _create(user: User, conversation: Conversation, spec: MonitorSpec, now: datetime, **fields) -> Monitor:
    record = spec_to_record(spec)
    with one_per_wake(spec.parent_message_id):  # a woken run's second monitor, raced past with_lineage, is refused
        monitor = Monitor.create(
            id=uuid.uuid4().hex, user=user, conversation=conversation, description=spec.description,
            source=record["source"], check=record["check"], on_match=spec.on_match,
            interval_seconds=spec.interval_seconds, max_wakes=spec.max_wakes, status=ACTIVE,
            expires_at=now + timedelta(seconds=spec.ttl_seconds), condition=spec.condition,
            judge_model=spec.judge_model, note=spec.note, parent_message_id=spec.parent_message_id,
            depth=spec.depth, created_at=now, updated_at=now, **fields)
    # the scheduler may be asleep past this monitor's first due moment (its next check, expiry or deadline)
    sooner(min(t for t in (monitor.next_check_at if monitor.polled else None, monitor.expires_at,
                           monitor.expect_due_at) if t is not None))
    # ids and kinds only: never the source's url (it may carry a credential) or anything the agent wrote
    log.info("monitor %s created: %s, conversation %s", monitor.id, _kind(record), conversation.id)
    if monitor.baseline:  # a polled monitor's first check, at create
        record_event(monitor, "baseline", monitor.baseline, now, {"reason": f"The first check: {monitor.baseline}."})
    else:
        record_event(monitor, "armed", "", now, {"reason": "Armed; it waits for its first event."})
    return monitor


def _kind(record: dict) -> str:
    """"page/threshold", "webhook/payload"…: what a monitor watches and how, for a log line."""
    return f"{record['source'].get('type', '?')}/{(record.get('check') or {}).get('type', '?')}"


#: prepared: the worker's checks and every POST of a runner's records load a monitor this way
_FOR_CHECK = Prepared("vigil_monitor_for_check", lambda monitor_id: (
    Monitor.select(Monitor, Conversation.id, Conversation.external_id).join(Conversation)
    .where(Monitor.id == monitor_id)))


def load_for_check(monitor_id: str) -> Monitor | None:
    """The monitor with its conversation's id and external id."""
    return _FOR_CHECK.first(monitor_id)


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
        fields.update({Monitor.next_check_at: utcnow(), Monitor.failure_count: 0, Monitor.judge_failures: 0,
                       Monitor.unreachable_since: None, Monitor.last_error: "",
                       Monitor.expect_due_at: deadline_of((monitor.source or {}).get("expect"), utcnow())})
    updated = Monitor.update(fields).where((Monitor.id == monitor.id) & (Monitor.status == monitor.status)).execute()
    if updated != 1:
        raise TransitionRefused("the monitor changed meanwhile; try again")
    if action == "resume":
        sooner(fields[Monitor.next_check_at])  # due now: the scheduler may be asleep until much later
    record_event(monitor, _past(action), "", utcnow(), {"reason": f"{_past(action).capitalize()} by a call to the API "
                                                                 "or from Settings → Monitors."})
    if action == "cancel":
        revoke(monitor.id, utcnow())
    if action in ("pause", "cancel"):
        stop_runs(monitor.id)
    elif _is_stream(monitor):
        # a stream resumes as a new run of its watcher; models.commands builds on this module, hence the import
        from models.commands import restart_stream
        restart_stream(monitor.id, utcnow())
    return load_for_check(monitor.id)


#: the statuses a monitor ends in: only such a monitor may be deleted
ENDED = (DONE, CANCELLED, EXPIRED, ERROR)


class StillRunning(ValueError):
    """A monitor that has not ended can't be deleted; the message says what to do first."""


def delete_ended(user: User, monitor_id: str) -> None:
    """Delete one of the user's ended monitors with its history (its events, link, runs; the tables cascade). The
    wake messages it wrote stay in their conversation."""
    with database.atomic():
        monitor = Monitor.get_or_none((Monitor.id == monitor_id) & (Monitor.user == user))
        if monitor is None:
            raise MonitorNotFound(monitor_id)
        if monitor.status not in ENDED:
            raise StillRunning(f"The monitor is {monitor.status.replace('_', ' ')}; cancel it first, then delete it.")
        deleted = Monitor.delete().where((Monitor.id == monitor_id) & Monitor.status.in_(ENDED)).execute()
        if deleted != 1:
            raise StillRunning("The monitor changed meanwhile; try again.")


def _is_stream(monitor: Monitor) -> bool:
    return (monitor.source or {}).get("type") == "command" and monitor.source.get("mode") == "stream"


def expire_due(now: datetime, limit: int = 500) -> list[tuple[Monitor, object]]:
    """End monitors past their expiry; one that never fired tells its conversation once.

    Returns each expired monitor with the wake message written for it, if any.
    """
    expired = []
    candidates = (Monitor.select().where(Monitor.status.in_(NOT_ENDED) & (Monitor.expires_at <= now))
                  .limit(limit))
    for monitor in candidates:
        message = None
        with database.atomic():
            changed = (Monitor.update(status=EXPIRED, updated_at=now)
                       .where((Monitor.id == monitor.id) & (Monitor.status == monitor.status)).execute())
            if changed:
                stop_runs(monitor.id)
                record_event(monitor, "expired", "", now, {"reason": "It reached its expiry time."})
            if changed and monitor.fire_count == 0:
                message = write_wake(monitor, "monitor_expired", "expired", expired_text(monitor.description), {})
        if changed:
            expired.append((load_for_check(monitor.id), message))
    return expired


def find_monitor(user: User, monitor_id: str) -> Monitor | None:
    """One of the user's monitors, with its conversation's external id; another account's is None."""
    return (Monitor.select(Monitor, Conversation.id, Conversation.external_id).join(Conversation)
            .where((Monitor.id == monitor_id) & (Monitor.user == user)).first())


def user_monitors(user: User, conversation: Conversation | None = None, live: bool = False) -> list[Monitor]:
    query = Monitor.select(Monitor, Conversation.id, Conversation.external_id).join(Conversation).where(Monitor.user == user)
    if conversation is not None:
        query = query.where(Monitor.conversation == conversation)
    if live:
        query = query.where(Monitor.status.in_(NOT_ENDED))
    return list(query.order_by(Monitor.created_at.desc()))


def event_payload(monitor: Monitor | Claimed) -> dict:
    """The monitor.updated event."""
    conversation = (monitor.conversation_external_id if isinstance(monitor, Claimed)
                    else monitor.conversation.external_id)
    return {"monitor_id": monitor.id, "status": monitor.status, "wakes_left": monitor.wakes_left,
            "last_checked_at": iso(monitor.last_checked_at), "conversation_id": conversation,
            "check_count": monitor.check_count, "last_error": monitor.last_error or None}


#: a status as seed 001 names it (GET /api/monitors/{id}'s monitorState); a watch that waits for its owner's
#: approval is not armed yet, and says so
SEED_STATES = {ACTIVE: "armed", AWAITING: AWAITING, PAUSED: "paused", DONE: "fired", EXPIRED: "expired",
               CANCELLED: "cancelled", ERROR: "error"}


def seed_state(monitor: Monitor) -> str:
    return SEED_STATES.get(monitor.status, monitor.status)


def monitor_json(monitor: Monitor) -> dict:
    return {**event_payload(monitor), "description": monitor.description, "source": monitor.source,
            "check": check_json(monitor.check), "on_match": monitor.on_match, "interval_seconds": monitor.interval_seconds,
            "next_check_at": iso(monitor.next_check_at) if monitor.status == ACTIVE else None,
            "expires_at": iso(monitor.expires_at), "max_wakes": monitor.max_wakes,
            "baseline": monitor.baseline, "condition": monitor.condition or None,
            "judge_model": monitor.judge_model or None, "note": monitor.note or None,
            "lineage": {"depth": monitor.depth, "woken_by": monitor.parent_message_id},
            "monitorState": seed_state(monitor), "fire_count": monitor.fire_count,
            "created_at": iso(monitor.created_at)}


def check_json(check: dict | None) -> dict:
    """The stored check in the tool's own words: `for`, as monitor_create took it (stored as hold_for)."""
    return {("for" if key == "hold_for" else key): value for key, value in (check or {}).items()}


def _past(action: str) -> str:
    return {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[action]

"""Processing a stored delivery: the same check, judge, dedupe and wake as a polled change."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

import peewee

import requests

from engine.checks import evaluate
from engine.errors import ContentError
from engine.pipeline import CHANGED, FIRED, Outcome
from engine.sources import normalize
from engine.spec import check_from_record, source_from_record
from engine.wake import misfit_text
from models.compiled import Compiled
from models.db import database
from models.judging import JudgePolicy, judge_match
from models.events import record_event
from models.expect import arrived
from models.results import Lifecycle, Recorded, pause_and_tell, record_check, record_judge_failure, write_wake
from models.tables import ACTIVE, Conversation, Delivery, Monitor, TriggerLink

#: attempts when another delivery of the same link updated the monitor first
ATTEMPTS = 5
#: the first key of the advisory locks held while a delivery is judged ("vd")
_LOCKS = 0x7664
_local = threading.Lock()
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


def process(delivery_id: int, session: requests.Session, judge: JudgePolicy, life: Lifecycle,
            max_text_bytes: int, now: datetime) -> Processed:
    """Check one delivery's body against its monitor, exactly once."""
    for _ in range(ATTEMPTS):
        try:
            return _attempt(delivery_id, session, judge, life, max_text_bytes, now)
        except _Lost:
            continue
    raise RuntimeError(f"delivery {delivery_id} lost the race {ATTEMPTS} times; it will be retried")


#: a delivery with its link's monitor and that monitor's conversation, in one query
_WITH_MONITOR = Compiled(lambda delivery_id: (
    Delivery.select(Delivery.id, Delivery.body, Delivery.processed_at, TriggerLink.id, Monitor, Conversation.id,
                    Conversation.external_id)
    .join(TriggerLink).join(Monitor).join(Conversation).where(Delivery.id == delivery_id)))


def _attempt(delivery_id, session, judge, life, max_text_bytes, now) -> Processed:
    delivery = _WITH_MONITOR.first(delivery_id)
    if delivery is None or delivery.processed_at is not None:
        return Processed()
    status_before = delivery.link.monitor.status
    done = _check(delivery, delivery.link.monitor, session, judge, life, max_text_bytes, now)
    return replace(done, status_before=status_before)


def _check(delivery, monitor, session, judge, life, max_text_bytes, now) -> Processed:
    if monitor.status != ACTIVE:
        _mark(delivery, now, "ignored")
        return Processed(monitor)
    try:
        content = normalize(source_from_record(monitor.source), delivery.body.encode("utf-8"), max_text_bytes)
        verdict = evaluate(check_from_record(monitor.check), content, monitor.check_state or {}, now)
    except ContentError as exc:
        return _misfit(delivery, monitor, str(exc), now)
    outcome = Outcome(FIRED if verdict.fired else CHANGED, content_hash=content.digest, verdict=verdict,
                      text=content.text)
    if outcome.kind == FIRED and monitor.condition:
        with _exclusive(delivery.id) as ours:
            if not ours or _processed(delivery.id):  # another worker has this delivery's judge call
                return Processed()
            step = judge_match(monitor, outcome, session, judge, now)
            if step.over_budget or step.failure:
                return _judge_trouble(delivery, monitor, step, outcome, now)
            return _record(delivery, monitor, step.outcome, step.unchecked, life, now)
    return _record(delivery, monitor, outcome, False, life, now)


def _record(delivery: Delivery, monitor: Monitor, outcome: Outcome, unchecked: bool, life: Lifecycle,
            now: datetime) -> Processed:
    with database.atomic():
        _mark(delivery, now, outcome.kind)
        recorded = record_check(monitor, monitor.claim_seq, outcome, now, life, unchecked, source="trigger")
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
    with database.atomic():
        _mark(delivery, now, "misfit")
        record_event(monitor, "misfit", problem, now, {"reason": f"A delivery did not fit the check: {problem}"})
        woke = write_wake(monitor, "trigger", "misfit", misfit_text(monitor.description, problem), {})
    return Processed(monitor, woke)


def _judge_trouble(delivery: Delivery, monitor: Monitor, step, outcome: Outcome, now: datetime) -> Processed:
    """A judge failure leaves the delivery for the sweep to bring back; a spent budget pauses the monitor."""
    if step.failure:
        if not record_judge_failure(monitor, monitor.claim_seq, step.failure, now).written:
            raise _Lost()
        return Processed(monitor)
    with database.atomic():
        _mark(delivery, now, "paused")
        reason = f"Its judge model has used up its token budget; the latest match was: {outcome.verdict.found}"
        recorded: Recorded = pause_and_tell(monitor, monitor.claim_seq, reason, now)
    return Processed(monitor, recorded.woke)


_MARK = Compiled(lambda delivery_id, now, outcome: (
    Delivery.update({Delivery.processed_at: now, Delivery.outcome: outcome})
    .where((Delivery.id == delivery_id) & Delivery.processed_at.is_null())))


def _mark(delivery: Delivery, now: datetime, outcome: str) -> None:
    if _MARK.rowcount(delivery.id, now, outcome) != 1:
        raise _Lost()
    arrived(delivery.link.monitor, now)  # an expected delivery came: its deadline moves on (models/expect)

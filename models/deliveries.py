"""Processing a stored delivery: the same check, judge, dedupe and wake as a polled change."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import requests

from engine.checks import evaluate
from engine.errors import ContentError
from engine.pipeline import CHANGED, FIRED, Outcome
from engine.sources import normalize
from engine.spec import check_from_record, source_from_record
from engine.wake import misfit_text
from models.db import database
from models.judging import JudgePolicy, judge_match
from models.monitors import load_for_check
from models.results import Lifecycle, Recorded, pause_and_tell, record_check, record_judge_failure, write_wake
from models.tables import ACTIVE, Delivery, Monitor, TriggerLink

#: attempts when another delivery of the same link updated the monitor first
ATTEMPTS = 5


@dataclass(frozen=True)
class Processed:
    monitor: Monitor | None = None
    woke: object = None


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


def _attempt(delivery_id, session, judge, life, max_text_bytes, now) -> Processed:
    delivery = Delivery.get_or_none(Delivery.id == delivery_id)
    if delivery is None or delivery.processed_at is not None:
        return Processed()
    monitor = load_for_check(TriggerLink.get_by_id(delivery.link_id).monitor_id)
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
    unchecked = False
    if outcome.kind == FIRED and monitor.condition:
        step = judge_match(monitor, outcome, session, judge, now)
        if step.over_budget or step.failure:
            return _judge_trouble(delivery, monitor, step, outcome, now)
        outcome, unchecked = step.outcome, step.unchecked
    with database.atomic():
        _mark(delivery, now, outcome.kind)
        recorded = record_check(monitor, monitor.claim_seq, outcome, now, life, unchecked, source="trigger")
        if not recorded.written:
            raise _Lost()
    return Processed(monitor, recorded.woke)


def _misfit(delivery: Delivery, monitor: Monitor, problem: str, now: datetime) -> Processed:
    """A call without what the check reads: the agent hears it once; later ones stay silent."""
    with database.atomic():
        _mark(delivery, now, "misfit")
        woke = write_wake(monitor, "trigger", "misfit", misfit_text(monitor.description, problem), {})
    return Processed(monitor, woke)


def _judge_trouble(delivery: Delivery, monitor: Monitor, step, outcome: Outcome, now: datetime) -> Processed:
    """A judge failure leaves the delivery for the sweep to bring back; a spent budget pauses the monitor."""
    if step.failure:
        if not record_judge_failure(monitor, monitor.claim_seq, step.failure, now).written:
            raise _Lost()
        return Processed(load_for_check(monitor.id))
    with database.atomic():
        _mark(delivery, now, "paused")
        reason = f"Its judge model has used up its token budget; the latest match was: {outcome.verdict.found}"
        recorded: Recorded = pause_and_tell(monitor, monitor.claim_seq, reason, now)
    return Processed(monitor, recorded.woke)


def _mark(delivery: Delivery, now: datetime, outcome: str) -> None:
    updated = (Delivery.update(processed_at=now, outcome=outcome)
               .where((Delivery.id == delivery.id) & Delivery.processed_at.is_null()).execute())
    if updated != 1:
        raise _Lost()

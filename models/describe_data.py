"""What a monitor's row needs from other tables to read right (engine/describe.py): a trigger link's hits, an
approval's state, and when an event source's last event came. Polled monitors need nothing: no query is made."""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from datetime import datetime

import peewee

from engine.describe import approval_word
from models.approvals import request_state
from models.runs import watcher_states
from models.tables import ApprovalRequest, CommandRun, Delivery, Document, Monitor, RunRecord, TriggerLink


@dataclass(frozen=True)
class Facts:
    #: a webhook's hits so far
    hits: int | None = None
    #: an approval's state in words: open, approved, rejected, expired …
    approval: str | None = None
    #: an event source's last event: a delivery, the decision, a write of the document, a printed line, the time
    last_event_at: datetime | None = None
    #: a stream's watcher: running, starting, stopping, not running, awaiting approval (models/runs.py)
    watcher: str | None = None


NONE = Facts()


def monitor_facts(monitors: list[Monitor], now: datetime) -> dict[str, Facts]:
    """Facts by monitor id, for the monitors whose rows need them; one query per kind present."""
    kinds: dict[str, list[Monitor]] = {}
    for monitor in monitors:
        source = monitor.source or {}
        kind = "stream" if source.get("type") == "command" and source.get("mode") == "stream" else source.get("type")
        kinds.setdefault(kind, []).append(monitor)
    facts = {m.id: Facts(last_event_at=m.last_changed_at) for m in kinds.get("time", ())}
    for kind, load in (("webhook", _webhooks), ("approval", _approvals), ("stream", _streams)):
        if kinds.get(kind):
            facts.update(load(kinds[kind], now))
    documents = kinds.get("document", []) + kinds.get("ingest", [])
    if documents:
        facts.update(_documents(documents))
    return facts


def facts_for(monitor: Monitor, now: datetime) -> Facts:
    """One monitor's facts (the SSE row and the HTMX swap render one row)."""
    return monitor_facts([monitor], now).get(monitor.id, NONE)


def _webhooks(monitors: list[Monitor], now: datetime) -> dict[str, Facts]:
    last = peewee.fn.MAX(Delivery.received_at).alias("last")
    rows = (TriggerLink.select(TriggerLink.monitor, TriggerLink.hits, last)
            .join(Delivery, peewee.JOIN.LEFT_OUTER, on=(Delivery.link == TriggerLink.id))
            .where(TriggerLink.monitor.in_([m.id for m in monitors]))
            .group_by(TriggerLink.monitor, TriggerLink.hits).tuples())
    return {monitor_id: Facts(hits=hits, last_event_at=_as_datetime(at)) for monitor_id, hits, at in rows}


def _approvals(monitors: list[Monitor], now: datetime) -> dict[str, Facts]:
    by_id = {m.id: m for m in monitors}
    rows = (ApprovalRequest.select(ApprovalRequest.monitor, ApprovalRequest.decision, ApprovalRequest.decided_at)
            .where(ApprovalRequest.monitor.in_(list(by_id))).tuples())
    return {monitor_id: Facts(approval=approval_word(request_state(decision, by_id[monitor_id], now), decision),
                              last_event_at=decided_at)
            for monitor_id, decision, decided_at in rows}


def _streams(monitors: list[Monitor], now: datetime) -> dict[str, Facts]:
    last = peewee.fn.MAX(RunRecord.received_at)
    rows = (CommandRun.select(CommandRun.monitor, last).join(RunRecord, on=(RunRecord.run == CommandRun.id))
            .where(CommandRun.monitor.in_([m.id for m in monitors]) & (RunRecord.kind == "lines"))
            .group_by(CommandRun.monitor).tuples())
    last_at = {monitor_id: _as_datetime(at) for monitor_id, at in rows}
    return {monitor_id: Facts(last_event_at=last_at.get(monitor_id), watcher=watcher)
            for monitor_id, watcher in watcher_states(monitors).items()}


def _documents(monitors: list[Monitor]) -> dict[str, Facts]:
    """The last write of each watched document (an ingest watch's is an ingest_jobs document)."""
    watched = [(m.id, (m.user_id, m.source.get("item_type"), m.source.get("item_id"))) for m in monitors]
    match = functools.reduce(operator.or_, ((Document.user == user) & (Document.item_type == item_type)
                                            & (Document.item_id == item_id)
                                            for user, item_type, item_id in {key for _, key in watched}))
    rows = Document.select(Document.user, Document.item_type, Document.item_id, Document.updated_at).where(match)
    written = {(d.user_id, d.item_type, d.item_id): d.updated_at for d in rows}
    return {monitor_id: Facts(last_event_at=written.get(key)) for monitor_id, key in watched}


def _as_datetime(value):
    """An aggregate's value: SQLite gives MAX() of a timestamp back as text."""
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return value

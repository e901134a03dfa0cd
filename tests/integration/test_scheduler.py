"""The scheduler's claim on PostgreSQL: many schedulers at once, each due monitor checked once; expiry."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

from models import database, utcnow
from models.conversations import conversation_for
from models.claims import claim_due
from models.tables import Message, Monitor
from tasks.scheduler import tick
from tests.integration.helpers import db


def seed_monitors(user, count: int, due_in: int = -1, expires_in: int = 3600) -> list[str]:
    now = utcnow()
    with db():
        conversation = conversation_for(user, f"sched-{uuid.uuid4().hex[:6]}", "chat", "")
        rows = [dict(id=uuid.uuid4().hex, user=user.id, conversation=conversation.id, description=f"m{i}",
                     source={"type": "page", "url": "http://127.0.0.1:9/"}, check={"type": "change"},
                     interval_seconds=300, next_check_at=now + timedelta(seconds=due_in),
                     expires_at=now + timedelta(seconds=expires_in), created_at=now, updated_at=now,
                     check_state={"text": ""})
                for i in range(count)]
        Monitor.insert_many(rows).execute()
    return [row["id"] for row in rows]


def test_two_schedulers_at_once_claim_each_due_monitor_once(owner):
    ids = seed_monitors(owner[0], 300)
    seed_monitors(owner[0], 20, due_in=600)  # not yet due
    claimed: list[list[str]] = [[], [], []]
    start = threading.Barrier(3)

    def scheduler(slot: int) -> None:
        with database.connection_context():
            start.wait()
            while True:
                batch = claim_due(utcnow(), 25)
                if not batch:
                    return
                claimed[slot].extend(monitor_id for monitor_id, _ in batch)

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    everything = claimed[0] + claimed[1] + claimed[2]
    assert sorted(everything) == sorted(ids), "every due monitor claimed, none twice, none early"
    assert sum(1 for part in claimed if part) >= 2, "both schedulers should have taken a share"


def test_claim_skips_paused_expired_and_leases(owner):
    due = seed_monitors(owner[0], 3)
    with db():
        Monitor.update(status="paused").where(Monitor.id == due[0]).execute()
        Monitor.update(expires_at=utcnow() - timedelta(seconds=1)).where(Monitor.id == due[1]).execute()
        first = claim_due(utcnow(), 10)
        assert [monitor_id for monitor_id, _ in first] == [due[2]]
        assert claim_due(utcnow(), 10) == []
        lease = Monitor.get_by_id(due[2]).next_check_at
    assert lease >= utcnow() + timedelta(seconds=300 * 0.9 - 5), "due again one (jittered) interval later"


def test_expiry_without_firing_tells_the_conversation_once(owner, broker):
    [monitor_id] = seed_monitors(owner[0], 1, due_in=600, expires_in=60)
    later = utcnow() + timedelta(seconds=120)
    with db():
        tick(later, 100)
        tick(later, 100)
        monitor = Monitor.get_by_id(monitor_id)
        messages = list(Message.select().where(Message.conversation == monitor.conversation_id))
    assert monitor.status == "expired"
    [message] = messages
    assert message.metadata["wake"]["source"] == "monitor_expired"
    assert "expired without firing" in message.content


def test_claims_that_could_not_be_queued_are_due_again_and_not_counted(owner, settings, broker, drain):
    """Redis down at enqueue: the claimed monitors are not left waiting a whole interval."""
    from dataclasses import replace

    import pytest

    from tasks.broker import UNAVAILABLE, setup_broker
    from tests.processes import free_port

    ids = seed_monitors(owner[0], 3)
    setup_broker(replace(settings, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"))  # nothing listens there
    with db(), pytest.raises(UNAVAILABLE):
        tick(utcnow(), 100)
    with db():
        rows = list(Monitor.select().where(Monitor.id.in_(ids)))
    assert [row.check_count for row in rows] == [0, 0, 0] and all(row.next_check_at <= utcnow() for row in rows)
    setup_broker(settings, broker=broker)  # the queue is back
    with db():
        assert tick(utcnow(), 100) == 3
    drain()
    with db():
        assert [row.check_count for row in Monitor.select().where(Monitor.id.in_(ids))] == [1, 1, 1]


def test_a_batch_is_checked_in_the_order_it_was_claimed_and_a_stale_claim_is_left_out(owner):
    """The claim sorts monitors by url; the worker's read keeps that order, so monitors of one url are checked one
    after another (they share its fetch and its body's digest), whatever order the database hands rows back in."""
    from models.claims import load_claimed

    ids = seed_monitors(owner[0], 30)
    with db():
        claimed = claim_due(utcnow(), 30)
        order = list(reversed(claimed))  # an order the database would not pick by itself
        stale = order[3]
        Monitor.update(claim_seq=Monitor.claim_seq + 1).where(Monitor.id == stale[0]).execute()
        loaded = load_claimed(order)
    assert sorted(monitor_id for monitor_id, _ in claimed) == sorted(ids)
    assert [monitor.id for monitor in loaded] == [monitor_id for monitor_id, _ in order if monitor_id != stale[0]]

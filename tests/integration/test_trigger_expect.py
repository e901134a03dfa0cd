"""Expected deliveries on PostgreSQL + Redis: a trigger link that misses its window wakes once per window through
the real scheduler tick, the next delivery says it is back, two schedulers wake once, a pause stops the clock and
a resume restarts it, and a bad expect creates nothing."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from peewee import fn

from engine.expect import deadline, parse_expect
from models import database, utcnow
from models.coalesce import flush_due
from models.expect import miss_due
from models.push_tables import WakeEndpoint, WakePush
from models.tables import Conversation, Delivery, HeldWake, Message, Monitor, MonitorRun, TriggerLink, Wake
from tasks.scheduler import tick
from tests.integration.helpers import db, login, monitor_row, tool, wakes
from tests.integration.test_triggers import path_of

HOURLY = {"every": "1h", "grace": "10m"}


def expecting(client, token, expect: dict, **arguments) -> dict:
    args = {"description": "the hourly export", "source": {"type": "webhook", "expect": expect}, "max_wakes": 10,
            **arguments}
    body = tool(client, token, "monitor_create", args).json()
    assert body["ok"], body
    return body["result"]


def tick_at(now) -> None:
    with db():
        tick(now, 500)


def sources(monitor_id: str) -> list[str]:
    return [wake.metadata["wake"]["source"] for wake in wakes(monitor_id)]


def missing_row(client, monitor_id: str) -> str:
    """The monitor's row on Settings → Monitors."""
    page = client.get("/settings/monitors").text
    start = page.index(f'id="monitor-{monitor_id}"')
    return page[start:page.index("</tr>", start)]


def test_link_misses_its_window_wakes_once_per_window_then_says_it_is_back(client, owner, drain):
    created = expecting(client, owner[1], HOURLY)
    monitor_id, start = created["monitor_id"], monitor_row(created["monitor_id"]).created_at
    assert monitor_row(monitor_id).expect_due_at == start + timedelta(minutes=70)
    tick_at(start + timedelta(minutes=69))
    assert wakes(monitor_id) == []  # inside its grace
    tick_at(start + timedelta(minutes=70, seconds=1))
    tick_at(start + timedelta(minutes=70, seconds=2))  # the next tick, and a replay of the same moment
    tick_at(start + timedelta(minutes=70, seconds=1))
    [missed] = wakes(monitor_id)
    assert missed.metadata["wake"]["source"] == "trigger_missed"
    assert "'the hourly export' had no delivery by" in missed.content
    assert "expected every 1h, grace 10m" in missed.content
    assert monitor_row(monitor_id).expect_due_at == start + timedelta(minutes=130)  # the following window
    tick_at(start + timedelta(minutes=130, seconds=1))
    assert sources(monitor_id) == ["trigger_missed", "trigger_missed"]  # that window wakes once too
    row = monitor_row(monitor_id)
    assert row.expect_missed_since == start + timedelta(hours=1) and row.expect_missed_count == 2
    login(client)
    assert "deliveries missing since" in missing_row(client, monitor_id)  # Settings → Monitors says so too

    assert client.post(path_of(created["url"]), json={"rows": 1200}).status_code == 202
    drain()
    arrived = monitor_row(monitor_id).expect_back_at
    assert arrived is not None
    tick_at(utcnow())
    tick_at(utcnow())
    assert sources(monitor_id) == ["trigger_missed", "trigger_missed", "trigger", "trigger_back"]
    back = wakes(monitor_id)[-1]
    assert "is back: a delivery arrived at" in back.content and "after missing 2 windows" in back.content
    row = monitor_row(monitor_id)
    assert row.expect_missed_since is None and row.expect_back_at is None
    assert row.expect_due_at == deadline(parse_expect(HOURLY), arrived)  # the delivery moved the deadline on
    assert "deliveries missing since" not in missing_row(client, monitor_id)


def test_every_delivery_moves_the_deadline_and_no_back_notice_without_a_miss(client, owner, drain):
    created = expecting(client, owner[1], HOURLY)
    before = monitor_row(created["monitor_id"]).expect_due_at
    client.post(path_of(created["url"]), json={"n": 1})
    drain()
    row = monitor_row(created["monitor_id"])
    assert row.expect_due_at > before and row.expect_back_at is None
    tick_at(utcnow())
    assert sources(created["monitor_id"]) == ["trigger"]


def test_cron_link_in_its_zone_and_the_monitor_page(client, owner):
    created = expecting(client, owner[1], {"cron": "30 2 * * *", "grace": "30m", "tz": "Europe/Paris"})
    monitor_id = created["monitor_id"]
    due = monitor_row(monitor_id).expect_due_at
    login(client)
    page = client.get(f"/monitors/{monitor_id}").text
    assert "Next delivery expected by" in page and "02:30 (Europe/Paris), grace 30m" in page
    tick_at(due - timedelta(seconds=1))
    assert wakes(monitor_id) == []
    tick_at(due)
    [missed] = wakes(monitor_id)
    assert "02:30 (Europe/Paris); expected every day at 02:30, grace 30m" in missed.content
    assert missed.metadata["expected_at"] == (due - timedelta(minutes=30)).isoformat() + "Z"
    page = client.get(f"/monitors/{monitor_id}/evidence").text
    assert "missed since" in page and "Delivery missed" in page
    assert monitor_row(monitor_id).expect_due_at == due + timedelta(days=1)


def test_two_schedulers_at_once_wake_each_missed_window_once(client, owner):
    ids = [expecting(client, owner[1], HOURLY)["monitor_id"] for _ in range(6)]
    now = monitor_row(ids[-1]).created_at + timedelta(minutes=71)
    start = threading.Barrier(2)
    told: list[list] = [[], []]

    def scheduler(slot: int) -> None:
        with database.connection_context():
            start.wait()
            told[slot] = miss_due(now)

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(m.id for m, _ in told[0] + told[1]) == sorted(ids)  # each monitor told by one scheduler
    assert all(sources(monitor_id) == ["trigger_missed"] for monitor_id in ids)
    rows = [monitor_row(monitor_id) for monitor_id in ids]
    assert all(row.wakes_used == 1 and row.expect_missed_count == 1 for row in rows)  # counted once, too


def copies(monitor_id: str, count: int) -> list[str]:
    """`count` copies of the monitor's row (same conversation, deadline and claim), inserted in one statement; the
    template's id first."""
    with db():
        row = Monitor.get_by_id(monitor_id).__data__
        ids = [uuid.uuid4().hex for _ in range(count)]
        Monitor.insert_many([{**row, "id": new_id} for new_id in ids]).execute()
    return [monitor_id, *ids]


def test_a_burst_of_misses_in_batches_wakes_each_once_with_two_schedulers_racing(client, owner):
    """300 deadlines passing together, written in batches by two schedulers at once (each batch one statement on
    PostgreSQL): every monitor is told by one of them, has one wake, one message with its push, one event, and
    counts one wake."""
    ids = copies(expecting(client, owner[1], HOURLY)["monitor_id"], 299)
    with db():
        WakeEndpoint.create(user=owner[0].id, url="https://example.com/hook", secret_encrypted="-")
    now = monitor_row(ids[0]).expect_due_at + timedelta(seconds=1)
    start = threading.Barrier(2)
    told: list[list] = [[], []]

    def scheduler(slot: int) -> None:
        with database.connection_context():
            start.wait()
            told[slot] = miss_due(now, batch=(40, 250)[slot])

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    told_ids = [m.id for m, _ in told[0] + told[1]]
    assert sorted(told_ids) == sorted(ids)  # each told once, by one scheduler
    assert all(message is not None for _, message in told[0] + told[1])
    with db():
        per_monitor = dict(Wake.select(Wake.monitor, fn.COUNT(Wake.id)).group_by(Wake.monitor).tuples())
        assert per_monitor == {monitor_id: 1 for monitor_id in ids}
        assert Wake.select().where(Wake.message.is_null()).count() == 0
        assert Message.select().where(Message.role == "wake").count() == 300
        assert WakePush.select().count() == 300
        events = dict(MonitorRun.select(MonitorRun.monitor, fn.COUNT(MonitorRun.id))
                      .where(MonitorRun.kind == "missed").group_by(MonitorRun.monitor).tuples())
        assert events == {monitor_id: 1 for monitor_id in ids}
        rows = list(Monitor.select().where(Monitor.id.in_(ids)))
    assert all(r.wakes_used == 1 and r.expect_missed_count == 1 and r.expect_due_at > now for r in rows)
    assert len({r.claim_seq for r in rows}) == 1  # each claimed once
    with db():
        assert miss_due(now + timedelta(seconds=1)) == []  # nothing left, nothing twice


def test_a_batch_of_misses_in_a_coalescing_conversation_is_held_then_told_as_one(client, owner):
    ids = copies(expecting(client, owner[1], HOURLY)["monitor_id"], 4)
    now = monitor_row(ids[0]).expect_due_at + timedelta(seconds=1)
    with db():
        Conversation.update(coalesce_seconds=60).execute()
        told = miss_due(now)
        assert sorted(m.id for m, _ in told) == sorted(ids) and all(message is None for _, message in told)
        assert HeldWake.select().count() == 5 and Wake.select().where(Wake.message.is_null(False)).count() == 0
        [window] = flush_due(utcnow() + timedelta(seconds=61))
    assert window.message.content.count("had no delivery by") == 5


def test_a_miss_past_the_hourly_cap_pauses_its_monitor_and_the_others_of_its_batch_wake(client, owner):
    ids = copies(expecting(client, owner[1], HOURLY)["monitor_id"], 2)
    now = monitor_row(ids[0]).expect_due_at + timedelta(seconds=1)
    with db():
        for n in range(10):
            Wake.create(monitor=ids[0], dedupe_key=f"earlier:{n}", created_at=now - timedelta(minutes=10))
        told = miss_due(now)
    assert sorted(m.id for m, _ in told) == sorted(ids)
    assert monitor_row(ids[0]).status == "paused" and sources(ids[0]) == ["monitor_paused"]
    assert all(sources(monitor_id) == ["trigger_missed"] for monitor_id in ids[1:])


def test_a_burst_of_misses_is_told_a_part_per_tick_and_the_rest_at_once_after(client, owner):
    """A tick's time for misses ran out (here at once): one batch (here of one) is told, the scheduler is told
    more are left, and the next pass tells the rest; none twice."""
    ids = [expecting(client, owner[1], HOURLY)["monitor_id"] for _ in range(3)]
    now = monitor_row(ids[-1]).created_at + timedelta(minutes=71)
    with db():
        first = miss_due(now, until=time.monotonic(), batch=1)
        assert len(first) == 1 and first.more is True
        rest = miss_due(now)
    assert rest.more is False and sorted(m.id for m, _ in first + rest) == sorted(ids)
    assert all(sources(monitor_id) == ["trigger_missed"] for monitor_id in ids)


def test_a_delivery_still_in_the_queue_is_not_a_miss(client, owner):
    created = expecting(client, owner[1], HOURLY)
    row = monitor_row(created["monitor_id"])
    with db():
        link = TriggerLink.get(TriggerLink.monitor == row.id)
        Delivery.create(link=link.id, dedupe_key="id:late", body="{}",
                        received_at=row.expect_due_at - timedelta(minutes=1))
    tick_at(row.expect_due_at + timedelta(seconds=5))
    assert wakes(row.id) == []


def test_paused_monitor_never_wakes_for_silence_and_resume_restarts_the_clock(client, owner):
    created = expecting(client, owner[1], HOURLY)
    monitor_id = created["monitor_id"]
    auth = {"Authorization": f"Bearer {owner[1]}"}
    assert client.post(f"/api/monitors/{monitor_id}/pause", headers=auth).status_code == 200
    tick_at(utcnow() + timedelta(hours=5))
    assert wakes(monitor_id) == []
    resumed_at = utcnow()
    assert client.post(f"/api/monitors/{monitor_id}/resume", headers=auth).status_code == 200
    due = monitor_row(monitor_id).expect_due_at
    assert resumed_at + timedelta(minutes=70) <= due <= utcnow() + timedelta(minutes=70)
    tick_at(due - timedelta(seconds=1))
    assert wakes(monitor_id) == []
    tick_at(due)
    assert sources(monitor_id) == ["trigger_missed"]


def test_missed_window_uses_a_wake_and_the_last_one_ends_the_monitor(client, owner):
    created = expecting(client, owner[1], HOURLY, max_wakes=1)
    tick_at(monitor_row(created["monitor_id"]).expect_due_at)
    [missed] = wakes(created["monitor_id"])
    assert "last wake; it has ended" in missed.content
    row = monitor_row(created["monitor_id"])
    assert row.status == "done" and row.wakes_used == 1
    tick_at(row.expect_due_at + timedelta(hours=3))
    assert len(wakes(created["monitor_id"])) == 1


def test_monitor_list_shows_the_expect_as_given(client, owner):
    given = {"cron": "0 9 * * 1-5", "tz": "America/New_York"}
    expecting(client, owner[1], given)
    [listed] = tool(client, owner[1], "monitor_list").json()["result"]["monitors"]
    assert listed["source"]["expect"] == given


@pytest.mark.parametrize("expect, fix", [
    ({"every": "sometimes"}, "source.expect.every must be a duration of at least 1m"),
    ({"every": "20s"}, "source.expect.every must be a duration of at least 1m"),
    ({"cron": "every night"}, "5-field cron expression"),
    ({"every": "1h", "cron": "0 * * * *"}, "exactly one of every and cron"),
    ({"every": "1h", "grace": "3h"}, "grace (3h) is longer than the time between two expected deliveries (1h)"),
    ({"cron": "30 2 * * *", "tz": "Europe/Pariss"}, "source.expect.tz 'Europe/Pariss' is not a known IANA time zone"),
])
def test_bad_expect_is_one_sentence_and_nothing_is_created(client, owner, expect, fix):
    body = tool(client, owner[1], "monitor_create", {"description": "x", "source": {"type": "webhook",
                                                                                    "expect": expect}}).json()
    assert body["ok"] is False and fix in body["error"], body
    with db():
        assert Monitor.select().count() == 0 and TriggerLink.select().count() == 0


def test_the_owners_pages_hear_each_miss_of_a_tick_and_the_watching_mark_only_when_one_ends(client, owner):
    """A tick's misses are published together: monitor.updated and message.created for each, conversation.updated
    only after the miss that ended its monitor."""
    import hashlib

    import redis

    from adapters.events import decoded
    from tests.conftest import TEST_DATABASE_URL, TEST_REDIS_URL

    ids = [expecting(client, owner[1], HOURLY)["monitor_id"] for _ in range(2)]
    last = expecting(client, owner[1], HOURLY, max_wakes=1)["monitor_id"]
    listener = redis.Redis.from_url(TEST_REDIS_URL).pubsub(ignore_subscribe_messages=True)
    listener.psubscribe(f"vigil:{hashlib.sha256(TEST_DATABASE_URL.encode()).hexdigest()[:12]}:*")
    listener.get_message(timeout=1)  # the subscription's confirmation
    tick_at(monitor_row(last).expect_due_at)
    seen = []
    while (message := listener.get_message(timeout=0.5)) is not None:
        seen.extend(decoded(message["data"]))
    listener.close()
    per_monitor: dict[str, list[str]] = {}
    current = None
    for name, data in seen:
        current = data["monitor_id"] if name == "monitor.updated" else current
        per_monitor.setdefault(current, []).append(name)
    assert per_monitor == {**{monitor_id: ["monitor.updated", "message.created"] for monitor_id in ids},
                           last: ["monitor.updated", "conversation.updated", "message.created"]}
    assert [data["watching"] for name, data in seen if name == "conversation.updated"] == [True]  # two still are

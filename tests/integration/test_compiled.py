"""Queries built once (models/compiled.py) give the answers the peewee query gives, on both databases,
with each call's own parameters."""

from __future__ import annotations

from datetime import timedelta

import peewee
import pytest

from models import database, utcnow
from models.compiled import Compiled
from models.db import bind
from models.migrate import migrate
from models.monitors import event_payload, load_for_check
from models.results import wakes_in_last_hour
from models.tables import Conversation, Monitor, User, Wake
from tests.conftest import TEST_DATABASE_URL
from tests.integration.helpers import db


@pytest.fixture(params=["postgresql", "sqlite"])
def either_database(request, postgres, tmp_path):
    if request.param == "sqlite":
        bind(f"sqlite:///{tmp_path}/vigil.db")
        with db():
            migrate()
    yield request.param
    if request.param == "sqlite":
        database.close()
        bind(TEST_DATABASE_URL)


def a_monitor(conversation: str, description: str) -> Monitor:
    user = User.get_or_none(User.email == "owner@example.com") or User.create(email="owner@example.com",
                                                                               password_hash="x")
    chat = Conversation.create(user=user, external_id=conversation)
    now = utcnow()
    return Monitor.create(id=description.replace(" ", "-"), user=user, conversation=chat, description=description,
                          source={"type": "webhook"}, check={"type": "every_call"}, interval_seconds=60,
                          next_check_at=now, expires_at=now + timedelta(days=1), check_state={"seen": [1, 2]})


def test_a_monitor_loads_with_its_conversation_and_each_calls_own_id(either_database):
    with db():
        first, second = a_monitor("chat-a", "first one"), a_monitor("chat-b", "second one")
        loaded = [load_for_check(first.id), load_for_check(second.id), load_for_check(first.id)]
        missing = load_for_check("no-such-monitor")
    assert [m.description for m in loaded] == ["first one", "second one", "first one"]
    assert [m.conversation.external_id for m in loaded] == ["chat-a", "chat-b", "chat-a"]
    assert loaded[1].check_state == {"seen": [1, 2]} and loaded[1].source == {"type": "webhook"}
    assert loaded[0].next_check_at == first.next_check_at
    assert missing is None


def test_the_hourly_wake_count_leaves_out_notices_and_older_wakes(either_database):
    now = utcnow()
    with db():
        monitor, other = a_monitor("chat-a", "counted"), a_monitor("chat-b", "not counted")
        for key, age in (("every_call:1:a", 5), ("every_call:2:b", 30), ("expired", 1), ("paused:4", 2),
                         ("every_call:0:old", 61)):
            Wake.create(monitor=monitor, dedupe_key=key, created_at=now - timedelta(minutes=age))
        Wake.create(monitor=other, dedupe_key="every_call:1:c", created_at=now)
        assert wakes_in_last_hour(monitor.id, now) == 2
        assert wakes_in_last_hour(other.id, now) == 1


def test_a_prepared_query_maps_the_rows_first_does_on_every_call(either_database):
    """Prepared keeps the cursor's column resolution after the first call: later calls still map each row into
    the same models, joins included, with their own values."""
    from models.compiled import Prepared

    build = lambda monitor_id: (Monitor.select(Monitor, Conversation.id, Conversation.external_id)  # noqa: E731
                                .join(Conversation).where(Monitor.id == monitor_id))
    plain, prepared = Compiled(build), Prepared("vigil_test_monitor_with_conversation", build)
    with db():
        first, second = a_monitor("chat-a", "first one"), a_monitor("chat-b", "second one")
        rows = [prepared.rows(first.id), prepared.rows(second.id), prepared.rows(first.id), prepared.rows("none")]
        expected = [plain.first(first.id), plain.first(second.id), plain.first(first.id)]
    assert [row.__data__ for [row] in rows[:3]] == [row.__data__ for row in expected]
    assert [row.conversation.external_id for [row] in rows[:3]] == ["chat-a", "chat-b", "chat-a"]
    assert rows[1][0].check_state == {"seen": [1, 2]} and rows[3] == []


def test_a_query_with_a_value_of_its_own_is_refused(either_database):
    """Such a value would be frozen into the text, silently the same on every call."""
    compiled = Compiled(lambda monitor_id: Monitor.select().where((Monitor.id == monitor_id)
                                                                  & (Monitor.status == "active")))
    with db(), pytest.raises(ValueError, match="only its parameters"):
        compiled.first("any")
    assert isinstance(database.obj, peewee.SqliteDatabase if either_database == "sqlite"
                      else peewee.PostgresqlDatabase)


def test_a_fired_check_is_recorded_once_per_claim_with_its_wake_and_message(either_database):
    """The claimed UPDATE (built once per shape) counts up, stores the state, and refuses a stale claim; the
    caller's copy of the monitor gets the same changes, so the events built from it match the row."""
    from engine.checks.base import Verdict
    from engine.pipeline import ERROR, FIRED, Outcome
    from models.results import record_check
    from models.tables import Message, MonitorRun

    now = utcnow()
    outcome = Outcome(FIRED, raw_hash="r" * 64, content_hash="c" * 64,
                      verdict=Verdict(fired=True, summary="s", found="the deploy finished", fact="f1",
                                      state={"seen": ["a", "b"]}))
    with db():
        monitor = a_monitor("chat-a", "fires")
        Monitor.update(max_wakes=5).where(Monitor.id == monitor.id).execute()
        monitor = load_for_check(monitor.id)
        claim = monitor.claim_seq
        first = record_check(monitor, claim, outcome, now)
        stale = record_check(monitor, claim, outcome, now)  # a duplicate of the same claim
        after = load_for_check(monitor.id)
        errored = record_check(load_for_check(monitor.id), after.claim_seq, Outcome(ERROR, error="It broke."), now)
        final = load_for_check(monitor.id)
        [message] = Message.select()
        runs = [run.kind for run in MonitorRun.select().order_by(MonitorRun.id)]
        [wake] = Wake.select()
    assert first.written and first.woke is not None and not stale.written and errored.written
    assert (after.fire_count, after.wakes_used, after.claim_seq) == (1, 1, claim + 1)
    assert monitor.__data__ == after.__data__
    assert event_payload(monitor) == event_payload(after)
    assert after.check_state == {"seen": ["a", "b"]} and after.content_hash == "c" * 64
    assert (final.failure_count, final.last_error, final.claim_seq) == (1, "It broke.", claim + 2)
    assert message.id == first.woke.id == wake.message_id and "the deploy finished" in message.content
    assert message.metadata["wake"]["ref_id"] == monitor.id and runs == ["fired", "error"]


def test_events_are_numbered_per_monitor_and_only_the_newest_kept_stay(either_database):
    """The prune deletes by each monitor's own event number (m0022): standalone events and the ones written
    with a claimed update share it, another monitor's are left alone, and the caller's copy counts them too."""
    from importlib import import_module

    import models.events as events
    from engine.checks.base import Verdict
    from engine.pipeline import CHANGED, Outcome
    from models.results import record_check
    from models.tables import MonitorRun

    kept = events.EVENTS_KEPT
    events.keep_events(3)
    try:
        with db():
            monitor, other = a_monitor("chat-a", "numbered"), a_monitor("chat-b", "left alone")
            events.record_event(other, "changed", "its own", utcnow())
            for n in range(4):
                events.record_event(monitor, "changed", f"standalone {n}", utcnow())
            outcome = Outcome(CHANGED, content_hash="h2", text="v2", verdict=Verdict(False, "changed", state={"v": 2}))
            assert record_check(monitor, monitor.claim_seq, outcome, utcnow()).written
            assert Monitor.get_by_id(monitor.id).events_written == monitor.events_written == 5
            runs = list(MonitorRun.select().where(MonitorRun.monitor == monitor.id).order_by(MonitorRun.id))
            assert [run.seq for run in runs] == [3, 4, 5]
            assert [run.detail for run in runs][:2] == ["standalone 2", "standalone 3"]
            assert MonitorRun.select().where(MonitorRun.monitor == other.id).count() == 1
            # m0022's numbering of events written before it: the same numbers, from 1 for each monitor
            MonitorRun.update(seq=None).execute()
            Monitor.update(events_written=0).execute()
            import_module("models.migrations.m0022_numbered_events").number_existing(database.obj)
            assert [run.seq for run in MonitorRun.select().where(MonitorRun.monitor == monitor.id)
                    .order_by(MonitorRun.id)] == [1, 2, 3]
            assert [m.events_written for m in Monitor.select().order_by(Monitor.id)] == [1, 3]
    finally:
        events.keep_events(kept)


def test_a_fire_whose_wake_was_written_already_or_is_held_still_records_its_check(either_database):
    """The fire's update, event and wake share one statement on PostgreSQL: a wake key written before (a repeat)
    still records the check and its event, with no second message; a conversation that coalesces gets its wake
    held, not a message; a lost claim writes none of the three."""
    from engine.checks.base import Verdict
    from engine.pipeline import FIRED, Outcome
    from models.results import record_check
    from models.tables import HeldWake, Message, MonitorRun

    now = utcnow()
    outcome = Outcome(FIRED, raw_hash="r" * 64, content_hash="c" * 64,
                      verdict=Verdict(fired=True, summary="s", found="it is back", fact="f1", state={"v": 1}))
    with db():
        repeat, held = a_monitor("chat-a", "repeat"), a_monitor("chat-b", "held")
        Monitor.update(max_wakes=5).execute()
        Wake.create(monitor=repeat, dedupe_key="every_call:1:f1", created_at=now)
        Conversation.update(coalesce_seconds=60).where(Conversation.external_id == "chat-b").execute()
        repeated = record_check(load_for_check(repeat.id), repeat.claim_seq, outcome, now)
        lost = record_check(load_for_check(held.id), held.claim_seq + 7, outcome, now)
        assert MonitorRun.select().where(MonitorRun.monitor == held.id).count() == 0
        holding = record_check(load_for_check(held.id), held.claim_seq, outcome, now)
        after = {m.id: m for m in Monitor.select()}
        messages = Message.select().count()
        wakes = sorted((w.monitor_id, w.dedupe_key, w.message_id) for w in Wake.select())
        runs = sorted((r.monitor_id, r.kind) for r in MonitorRun.select())
        [kept] = HeldWake.select()
    assert repeated.written and repeated.woke is None and not lost.written and holding.written
    assert holding.woke is None and messages == 0 and "it is back" in kept.content
    assert wakes == [("held", "every_call:1:f1", None), ("repeat", "every_call:1:f1", None)]
    assert runs == [("held", "fired"), ("repeat", "fired")]
    assert after["repeat"].fire_count == after["held"].fire_count == 1
    assert after["held"].events_written == after["repeat"].events_written == 1


def test_a_missed_window_wakes_once_and_its_copy_matches_the_row_then_it_is_back(either_database):
    """The miss's statements are built once (models/expect.py); the monitor each pass hands on for its event is
    the copy it read with the write applied, not read back, so it must match the row field for field."""
    from models.expect import arrived, miss_due
    from models.tables import Delivery, TriggerLink

    now = utcnow()
    with db():
        monitor = a_monitor("chat-a", "nightly export")
        due = now - timedelta(minutes=5)
        Monitor.update(source={"type": "webhook", "expect": {"every": "1h", "grace": "10m"}}, max_wakes=5,
                       expect_due_at=due).where(Monitor.id == monitor.id).execute()
        link = TriggerLink.create(monitor=monitor, token_digest="d" * 64, token_encrypted="x", signature="none",
                                  max_hits=10, expires_at=now + timedelta(days=1))
        in_flight = Delivery.create(link=link, dedupe_key="k1", body="{}", received_at=due - timedelta(seconds=1))
        waited = miss_due(now)  # a delivery that came in time is still in the queue: not a miss
        Delivery.update(processed_at=now).where(Delivery.id == in_flight.id).execute()
        [(told, message)] = miss_due(now)
        again = miss_due(now)  # the same deadline: claimed already, nothing more
        row = load_for_check(monitor.id)
        [wake] = Wake.select()
    assert waited == [] and message is not None and again == [] and wake.dedupe_key.startswith("expect:missed:")
    assert row.wakes_used == 1 and row.fire_count == 1 and row.expect_missed_count >= 1
    assert row.expect_due_at > now and row.expect_missed_since is not None
    assert {k: v for k, v in told.__data__.items() if k != "updated_at"} == \
        {k: v for k, v in row.__data__.items() if k != "updated_at"}
    assert event_payload(told) == event_payload(row)
    later = now + timedelta(minutes=1)
    with db():
        arrived(load_for_check(monitor.id), later)  # a delivery: its deadline moves on, and it is back
        [(back, notice)] = miss_due(later)
        row = load_for_check(monitor.id)
    assert notice is not None and "back" in notice.content.lower()
    assert back.expect_back_at is None and back.expect_missed_since is None and back.expect_missed_count == 0
    assert (row.expect_back_at, row.expect_missed_since, row.expect_missed_count) == (None, None, 0)


def test_a_miss_is_not_written_when_the_deadline_moved_after_it_was_read(either_database):
    """The claim's guard: a delivery processed between the scheduler's read and its write moved the deadline on,
    so the stale copy writes nothing (no wake, no event, the row as the delivery left it)."""
    from models.expect import _due, _miss
    from models.results import Lifecycle
    from models.tables import MonitorRun

    now = utcnow()
    with db():
        monitor = a_monitor("chat-a", "hourly export")
        Monitor.update(source={"type": "webhook", "expect": {"every": "1h", "grace": "10m"}}, max_wakes=5,
                       expect_due_at=now - timedelta(minutes=5)).where(Monitor.id == monitor.id).execute()
        [stale] = _due(now, 10)
        moved = now + timedelta(minutes=70)
        Monitor.update(expect_due_at=moved).where(Monitor.id == monitor.id).execute()  # a delivery came meanwhile
        recorded = _miss(stale, now, Lifecycle())
        row = load_for_check(monitor.id)
        events = MonitorRun.select().count()
        wakes = Wake.select().count()
    assert not recorded.written and wakes == 0 and events == 0
    assert row.expect_due_at == moved and row.wakes_used == 0 and row.claim_seq == stale.claim_seq


def test_claimed_monitors_read_their_own_texts_when_the_first_of_a_pair_is_not_current(either_database):
    """The claim read sends a source and check once for the monitors holding them alike (models/claims)."""
    from models.claims import load_claimed

    with db():
        first, second, third = (a_monitor(chat, name) for chat, name in (("chat-a", "a first"), ("chat-b", "b same"),
                                                                          ("chat-c", "c other")))
        fourth = a_monitor("chat-d", "d digest")
        Monitor.update(check={"type": "every_call", "note": "other"}).where(Monitor.id == third.id).execute()
        Monitor.update(raw_hash="ab" * 32).where(Monitor.id.in_([first.id, second.id])).execute()
        Monitor.update(raw_hash="cd" * 32).where(Monitor.id == fourth.id).execute()
        claimed = load_claimed([(third.id, 0), (fourth.id, 0), (second.id, 0), (first.id, 7)])  # first's: stale
    assert [(m.id, m.conversation_external_id) for m in claimed] == [(third.id, "chat-c"), (fourth.id, "chat-d"),
                                                                      (second.id, "chat-b")]
    assert claimed[2].source == {"type": "webhook"} and claimed[2].check == {"type": "every_call"}
    assert claimed[0].check == {"type": "every_call", "note": "other"}
    assert [m.raw_hash for m in claimed] == ["", "cd" * 32, "ab" * 32]
    assert claimed[2].state() == {"seen": [1, 2]} and claimed[2].last_checked_at is None

"""The sleeping scheduler (issue 32): it passes only when something is due, sleeps until then (at most its cap),
and a write that makes something due sooner (a monitor created, resumed) wakes it early, through Redis in
production and in-process when embedded. Waits are bounded; nothing asserts on elapsed time: the schedulers here
sleep an hour when not woken, so a missed wake-up fails the bounded wait."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from adapters.wakeup import LocalAlarm, make_alarm
from engine.wake_plan import boundary_at_or_after
from models import database, utcnow
from models.due import due_times, install
from models.monitors import change_status
from models.tables import Monitor, User
from tasks import runtime, scheduler
from tasks.scheduler import Loop, _epoch, run
from tests.integration.helpers import db, tool, wait_for
from tests.integration.test_scheduler import seed_monitors

HOUR = 3600.0


class FakeClock:
    """Epoch seconds that move only when the loop sleeps: a window of minutes in no time."""

    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


class ClockAlarm:
    """An alarm nobody rings: a wait moves the fake clock on by its timeout."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.waits = clock, 0

    def wait(self, timeout: float) -> list:
        self.waits += 1
        self.clock.t += max(timeout, 0.0)
        return []


@pytest.fixture()
def unworked_broker(settings):
    """The actors on an in-memory broker nobody consumes: the claims are queued, no check runs. (A check run by a
    worker writes with the real clock, which this test's fake clock is minutes ahead of.)"""
    from dramatiq.brokers.stub import StubBroker

    from tasks.broker import setup_broker

    stub = StubBroker()
    stub.emit_after("process_boot")
    setup_broker(settings, broker=stub)
    yield stub
    stub.close()


def test_with_nothing_due_the_scheduler_sleeps_until_the_next_due_moment(owner, unworked_broker, monkeypatch):
    """Over five minutes of its clock, with one monitor due a hundred seconds in: one pass for it (at the tick it is
    due on), and reads of the due times at its cap (a minute) otherwise, where ticking each second took 300."""
    [monitor_id] = seed_monitors(owner[0], 1, due_in=100)
    monkeypatch.setattr(scheduler, "_next_prune", 0.0)  # an earlier test's loop in this process may have pruned
    with db():
        due = _epoch(Monitor.get_by_id(monitor_id).next_check_at)
    clock = FakeClock(_epoch(utcnow()))
    start = clock.t
    loop = Loop(1.0, 500, 30, 60.0, ClockAlarm(clock), clock=clock)
    stop = threading.Event()
    while clock.t < start + 300:  # the monitor is due again ~300 s after its claim
        at = loop.step()
        if at is not None:
            loop.sleep_until(at, stop)
    with db():
        monitor = Monitor.get_by_id(monitor_id)
    assert monitor.claim_seq == 1, "claimed once, at its due time"
    assert _epoch(monitor.last_checked_at) == pytest.approx(boundary_at_or_after(1.0, due), abs=1e-3), \
        "claimed at the first tick at or after its due moment"
    assert loop.passes == 2, "one pass for the monitor, one for the sweep and prune at start; none other"
    assert loop.reads <= 300 / 60 + 5, f"{loop.reads} reads of the due times in 5 minutes: it did not sleep"


def _sleeping_scheduler(alarm):
    """The real loop in a thread, capped at an hour: only a ring wakes it before then. (loop holder, stop)."""
    stop = threading.Event()
    holder = {}

    def main() -> None:
        with database.connection_context():
            holder["loop"] = run(0.2, 500, stop, 30, max_sleep=HOUR, alarm=alarm)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    return thread, stop


def _asleep(alarm_waits) -> None:
    wait_for(lambda: alarm_waits() >= 2, 20, "the scheduler did not start sleeping")


class CountingAlarm:
    """A real alarm, its waits counted (to know the scheduler has gone to sleep)."""

    def __init__(self, alarm) -> None:
        self.alarm, self.waits = alarm, 0

    def ring(self, when) -> None:
        self.alarm.ring(when)

    def wait(self, timeout: float) -> list:
        self.waits += 1
        return self.alarm.wait(timeout)

    def close(self) -> None:
        self.alarm.close()


@pytest.mark.parametrize("mode", ["redis", "embedded"])
def test_a_resume_and_a_create_wake_the_sleeping_scheduler(client, owner, settings, mode):
    user = owner[0]
    if mode == "redis":  # the writer publishes (this process's runtime); the scheduler reads its own subscription
        alarm = CountingAlarm(make_alarm(settings.REDIS_URL, settings.DATABASE_URL))
    else:  # one process: the writer rings the scheduler thread's own alarm
        local = LocalAlarm()
        alarm = CountingAlarm(local)
        install(local.ring)
    [paused] = seed_monitors(user, 1, due_in=HOUR * 24)
    with db():
        Monitor.update(status="paused").where(Monitor.id == paused).execute()
    thread, stop = _sleeping_scheduler(alarm)
    try:
        _asleep(lambda: alarm.waits)
        with db():
            change_status(User.get_by_id(user.id), paused, "resume")  # due now
        wait_for(lambda: _claims(paused) >= 1, 20, "a resumed monitor was not claimed: the scheduler slept on")

        # a time watch due in a few seconds, created through the tool: claimed at its time
        fire_at = (utcnow() + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        created = tool(client, owner[1], "monitor_create", {"description": "stand-up starts",
                                                            "source": {"type": "time", "fire_at": fire_at}}).json()
        assert created["ok"] is True, created
        watch = created["result"]["monitor_id"]
        wait_for(lambda: _claims(watch) >= 1, 20, "a created time watch was not claimed: the scheduler slept on")
    finally:
        stop.set()
        thread.join(10)
        alarm.close()
        install(runtime.current().alarm.ring)


def _claims(monitor_id: str) -> int:
    with db():
        return Monitor.get_by_id(monitor_id).claim_seq


def test_the_due_read_is_one_statement_of_index_reads(owner):
    """EXPLAIN of the due times: an index serves every part (none reads its whole table when told not to)."""
    seed_monitors(owner[0], 50)
    with db():
        from models.due import _SQL

        database.execute_sql("SET enable_seqscan = off")  # 50 rows: the planner would rather read the table
        try:
            plan = "\n".join(row[0] for row in database.execute_sql("EXPLAIN " + _SQL).fetchall())
        finally:
            database.execute_sql("SET enable_seqscan = on")
        assert "Seq Scan" not in plan, plan
        assert "monitor_due" in plan, plan
        assert due_times().checks is not None

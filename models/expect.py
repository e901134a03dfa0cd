"""Expected deliveries (issue 18): a trigger link whose deliveries stop coming wakes its conversation once per
missed window, and the next delivery says it is back.

Each delivery moves the monitor's deadline (`arrived`, one UPDATE in the delivery's transaction). The scheduler's
tick calls `miss_due`, which claims the monitors past their deadline by compare-and-set on that deadline and
their claim number, so two schedulers (or a replayed tick) wake once, and the unique wake key, taken from the
missed expected time, guards it again. It also writes the "back" notices the deliveries left for it, so they
are published like every other wake. Engine/expect.py holds the rules; this module only loads and stores.
"""

from __future__ import annotations

import functools
import time
from datetime import datetime

from peewee import SQL, Case, fn

from engine.expect import (
    Expect, Missed, back_text, deadline, local_time, missed, missed_text, parse_expect, terms,
)
from models.compiled import Compiled, run_prepared
from models.db import database, iso
from models.due import sooner
from models.events import record_event
from models.results import (
    ONE_MORE, Lifecycle, Recorded, caps_columns, caps_params, caps_reached, daily_cap_reason, end_in_error,
    pause_and_tell, store_fire, write_wake,
)
from models.tables import ACTIVE, DONE, Conversation, Monitor

#: monitors claimed at most per tick, for each of the two passes
LIMIT = 500

# One statement for every delivery of a link with an expect: the new deadline, and, when the row (not this
# worker's copy) says deliveries were missing, the time one came back, for the scheduler to announce.
_ARRIVED = Compiled(lambda due, now, monitor_id: Monitor.update({
    Monitor.expect_due_at: due,
    Monitor.expect_back_at: fn.COALESCE(Monitor.expect_back_at,
                                        Case(None, ((Monitor.expect_missed_since.is_null(False), now),))),
}).where(Monitor.id == monitor_id))


def arrived(monitor: Monitor, now: datetime) -> None:
    """A delivery of `monitor`'s link was processed at `now`: its deadline moves on. Free for links without an
    expect (the stored source says so), and for monitors that are not active (a resume restarts the clock)."""
    raw = (monitor.source or {}).get("expect")
    if raw is None or monitor.status != ACTIVE:
        return
    due = deadline(parse_expect(raw), now)
    _ARRIVED.rowcount(due, now, monitor.id)
    monitor.expect_due_at = due
    if monitor.expect_missed_since is not None:  # back after a miss: the scheduler announces it
        sooner(now)


def _with_conversation():
    return Monitor.select(Monitor, Conversation.id, Conversation.external_id).join(Conversation)


def _due(now: datetime, limit: int) -> list[Monitor]:
    query = (_with_conversation().where((Monitor.status == ACTIVE) & (Monitor.expect_due_at <= now))
             .order_by(Monitor.expect_due_at).limit(limit))
    return list(query)


def _back(limit: int) -> list[Monitor]:
    return list(_with_conversation().where(Monitor.expect_back_at.is_null(False)).limit(limit))


class Told(list):
    """Each monitor told (as it is now) with the wake written; `more`: the time given ran out with misses left."""
    more = False


def miss_due(now: datetime, life: Lifecycle = Lifecycle(), limit: int = LIMIT, until: float | None = None) -> Told:
    """Announce the deliveries that came back, then wake each active monitor whose deadline passed, once per
    missed window, for the caller to publish. `until` (time.monotonic()): stop there, one miss at least; a burst
    of misses (about 3 ms of CPU each, scheduler and PostgreSQL) must not hold up the scheduler's other work for
    seconds.

    Each monitor told is the copy read here with what was written applied to it (as a check's write applies to
    its copy), not read back: the compare-and-set that wrote it proves the row was that copy."""
    told = Told()
    for monitor in _back(limit):
        message = _announce_back(monitor)
        if message is not None:
            told.append((monitor, message))
    for monitor in _due(now, limit):
        if until is not None and told and time.monotonic() >= until:
            told.more = True
            break
        recorded = _miss(monitor, now, life)
        if recorded.written:
            told.append((monitor, recorded.woke))
    return told


def _announce_back(monitor: Monitor):
    """The notice that deliveries came back, once per run of misses (its key is when the run began)."""
    since, count, back_at = monitor.expect_missed_since, monitor.expect_missed_count, monitor.expect_back_at
    with database.atomic():
        if _CLEAR_BACK.rowcount(monitor.id, back_at) != 1:
            return None
        monitor.expect_back_at, monitor.expect_missed_since, monitor.expect_missed_count = None, None, 0
        if since is None:
            return None
        expect = parse_expect(monitor.source["expect"])
        text = back_text(monitor.description, expect, back_at, since, max(count, 1))
        record_event(monitor, "back", "", back_at, {"reason": text})
        return write_wake(monitor, "trigger_back", f"expect:back:{iso(since)}", text,
                          {"missed_since": iso(since), "missed_windows": count, "arrived_at": iso(back_at)})


def _miss(monitor: Monitor, now: datetime, life: Lifecycle) -> Recorded:
    """One missed window (or several, when the tick ran late): a wake that counts like a fire, within the
    monitor's max_wakes and the hourly cap (past it, a pause); a trigger link is seed 000's, so seed 001's daily
    cap is not its guard (caps_reached never says it is over it)."""
    over_day, over_hour, waiting = _caps_and_waiting(monitor, now, life)
    if waiting:
        return Recorded(False)  # a delivery came in time and is still on its way through the queue
    expect = parse_expect(monitor.source["expect"])
    miss = missed(expect, monitor.expect_due_at, now)
    if over_day or over_hour:
        with database.atomic():  # the pause or the end, its event and its notice together
            if over_day:
                return end_in_error(monitor, monitor.claim_seq, daily_cap_reason(life, _finding(expect, miss)), now)
            reason = (f"It would have woken you more than {life.max_wakes_per_hour} times in an hour; "
                      f"the latest finding was: {_finding(expect, miss)}")
            return pause_and_tell(monitor, monitor.claim_seq, reason, now)
    last = monitor.wakes_used + 1 >= monitor.max_wakes
    text = missed_text(monitor.description, expect, miss, now, last=last)
    extra = {"expected_at": iso(miss.expected), "missed_windows": miss.windows, "next_expected_by": iso(miss.next_due)}
    # no transaction around the two round trips: the caps read holds no lock in one either, and the write is one
    # statement on PostgreSQL (store_fire gives SQLite's two steps a transaction of their own)
    return store_fire(monitor, monitor.claim_seq, _window_fields(monitor, miss, last, now),
                      ("missed", _finding(expect, miss), now, {"reason": text}), "trigger_missed",
                      f"expect:missed:{iso(miss.expected)}", text, extra,
                      guard={Monitor.expect_due_at: monitor.expect_due_at})


# built once (peewee built it anew on every call)
_CLEAR_BACK = Compiled(lambda monitor_id, back_at: Monitor.update({
    Monitor.expect_back_at: SQL("NULL"), Monitor.expect_missed_since: SQL("NULL"),
    Monitor.expect_missed_count: SQL("0"),
}).where((Monitor.id == monitor_id) & (Monitor.expect_back_at == back_at)))


def _window_fields(monitor: Monitor, miss: Missed, last: bool, now: datetime) -> dict:
    """What a missed window writes, under the compare-and-set on the claim and the deadline (store_fire's guard),
    so only one scheduler moves this deadline on; the row is the caller's copy while it holds, so the values
    are worked out from the copy."""
    return {Monitor.expect_due_at: miss.next_due,
            Monitor.expect_missed_since: monitor.expect_missed_since or miss.expected,
            Monitor.expect_missed_count: monitor.expect_missed_count + miss.windows,
            Monitor.wakes_used: ONE_MORE, Monitor.fire_count: ONE_MORE, Monitor.status: DONE if last else ACTIVE,
            Monitor.updated_at: now}


#: whether a delivery received by the deadline is still unprocessed, beside fire_caps' two counts
_WAITING = ("EXISTS (SELECT 1 FROM deliveries d JOIN trigger_links l ON l.id = d.link_id WHERE l.monitor_id = {p} "
            "AND d.processed_at IS NULL AND d.received_at <= {p})")


def _caps_and_waiting(monitor: Monitor, now: datetime, life: Lifecycle) -> tuple[bool, bool, bool]:
    """fire_caps' answer (over the daily cap, over the hourly one), and whether a delivery received by the
    deadline has not been processed yet: one statement, one round trip."""
    day, hour, waiting = run_prepared("vigil_miss_caps", _caps_and_waiting_sql(database.param),
                                      (*caps_params(monitor, now, life), monitor.id, monitor.expect_due_at)).fetchone()
    return (*caps_reached(day, hour, life, monitor), bool(waiting))


@functools.cache
def _caps_and_waiting_sql(param: str) -> str:
    """Its text, once per kind of database (the placeholder is the only thing that differs)."""
    return f"SELECT {caps_columns()}, {_WAITING.format(p=param)}"


def _finding(expect: Expect, miss: Missed) -> str:
    """ "no delivery by 2026-03-28 02:30 (Europe/Paris); expected every day at 02:30, grace 30m"."""
    return f"no delivery by {local_time(expect, miss.expected)} ({expect.tz}); {terms(expect)}"

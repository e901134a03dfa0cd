"""The scheduler: a loop that only claims due monitors and enqueues their checks, and serves the other due
work of a tick (expiries, closed coalescing windows, missed deliveries, pushes to retry, devices gone quiet).

It sleeps until its next due time (issue 32): after a pass it reads the earliest due moment of each kind of
work in one statement (models/due.py) and sleeps until the wall-clock tick boundary at or after the earliest
(time watches are due on whole seconds), at most SCHEDULER_MAX_SLEEP_SECONDS. A write that makes something due
sooner rings its alarm (adapters/wakeup.py). Missed ticks are skipped, not replayed; sleeps are timeouts
(monotonic), and each pass is given its `now`.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from models import connection
from models.claims import claim_due
from models.coalesce import flush_due
from models.due import Due, due_times
from engine.pipeline import ERROR, Outcome
from engine.wake_plan import rung_times, wake_at
from models.commands import expire_runs, unchecked_results
from models.devices import mark_offline
from models.expect import miss_due
from models.runs import end_forgotten_stops
from models.monitors import expire_due, load_for_check
from models.results import record_check
from models.tables import ACTIVE
from models.triggers import unprocessed
from models.wake_endpoints import prune_attempts
from tasks.broker import UNAVAILABLE
from tasks.checks import send_claims
from tasks.deliveries import process_delivery
from tasks.commands import check_command_result
from tasks.events import MonitorEvents, publish_coalesced, publish_device, publish_monitor
from tasks.pushes import sweep_pushes
from tasks.runtime import current
from adapters.logs import first_line

log = logging.getLogger(__name__)

#: a push is left this long to the actor queued with its wake before the sweep queues it (a retry's time, or a
#: message lost between the wake and the push)
PUSH_GRACE = timedelta(seconds=2)


#: the kinds of a tick's work (models/due.Due's fields, and the sweep and prune the loop times itself)
EVERYTHING = frozenset(("checks", "expiries", "expects", "backs", "held", "pushes", "runs", "stops", "devices"))


def tick(now: datetime, batch_size: int, kinds: frozenset = EVERYTHING) -> int:
    """One pass: end expired monitors, deliver closed coalescing windows, queue due wake pushes, claim due
    monitors and enqueue a check for each, then wake for missed deliveries; of those, the `kinds` due (the
    sleeping loop's), all of them by default. Returns how many monitors were claimed."""
    global misses_left
    if "expiries" in kinds:
        for monitor, message in expire_due(now):
            publish_monitor(monitor, message)
    if "held" in kinds:
        publish_coalesced(flush_due(now))  # wake coalescing: the windows that closed, one message each
    if kinds & {"runs", "stops", "devices"}:
        devices_tick(now)
    if "pushes" in kinds:
        _sweep_pushes(now)
    claimed = []
    if "checks" in kinds:
        claimed = claim_due(now, batch_size)
        send_claims(claimed, now)  # the queue down: what was not queued is released, and the tick fails
    misses_left = False
    if kinds & {"expects", "backs"}:
        _tell_missed(now)
    return len(claimed)


#: how long one tick spends on missed deliveries, after the due checks are queued; the rest go on at once
MISSES_SECONDS = 0.5
#: whether the last tick left misses for the next, which then runs at once (like a full batch of checks)
misses_left = False


def _tell_missed(now: datetime) -> None:
    """Trigger links whose deliveries stopped coming: their wakes, within MISSES_SECONDS of the tick, published in
    one round trip. Each was active before (a miss is written only on an active row; a back notice leaves the
    status as it was), so the conversation's watching mark is read only for a monitor a miss ended or paused."""
    global misses_left
    told = miss_due(now, current().lifecycle, until=time.monotonic() + MISSES_SECONDS)
    batch = MonitorEvents()
    for monitor, message in told:
        batch.add(monitor, message, status_before=ACTIVE)
    batch.publish()
    misses_left = told.more


def devices_tick(now: datetime) -> None:
    """Polled commands no device answered in time are unreachable checks; quiet devices go offline."""
    runtime = current()
    for run in expire_runs(now):
        monitor = load_for_check(run.monitor_id)
        if monitor is None or monitor.status != ACTIVE:
            continue
        outcome = Outcome(ERROR, error="Its device did not send the command's result in time.", unreachable=True)
        recorded = record_check(monitor, monitor.claim_seq, outcome, now, runtime.lifecycle)
        if recorded.written:
            publish_monitor(monitor, recorded.woke, status_before=ACTIVE)
    for device in mark_offline(now, runtime.presence):
        publish_device(device)
    end_forgotten_stops(now)


def sweep(now: datetime, older_than_seconds: int) -> int:
    """Queue again the stored deliveries and command results nobody processed (their message was lost)."""
    stale = unprocessed(now - timedelta(seconds=older_than_seconds))
    for delivery_id in stale:
        process_delivery.send(delivery_id)
    results = unchecked_results(now - timedelta(seconds=older_than_seconds))
    for run_id in results:
        check_command_result.send(run_id)
    _prune(now)
    return len(stale) + len(results)


_last_push_sweep: datetime | None = None


def _sweep_pushes(now: datetime) -> None:
    """Every WAKE_PUSH_SWEEP_SECONDS of the tick's own time, not every tick: a push due and still unclaimed (busy
    workers) would otherwise get another message on every tick. A clock that went back sweeps at once."""
    global _last_push_sweep
    last = _last_push_sweep
    if last is None or now < last or (now - last).total_seconds() >= current().settings.WAKE_PUSH_SWEEP_SECONDS:
        _last_push_sweep = now
        sweep_pushes(now - PUSH_GRACE)


#: ended pushes and their attempts are deleted a week after the wake, checked this often
PRUNE_EVERY_SECONDS = 3600
_next_prune = 0.0


def _prune(now: datetime) -> None:
    global _next_prune
    if time.monotonic() >= _next_prune:
        _next_prune = time.monotonic() + PRUNE_EVERY_SECONDS
        prune_attempts(now)




#: while asleep, the loop looks at `stop` this often (a signal's handler sets it; the blocking read does not end)
STOP_POLL_SECONDS = 1.0
#: a stop order not started by its runner is ended this long after it was sent (models/runs.end_forgotten_stops)
FORGOTTEN_STOP = timedelta(seconds=120)
_EPOCH = datetime(1970, 1, 1)


def _epoch(when: datetime | None) -> float | None:
    return None if when is None else (when - _EPOCH).total_seconds()


class Loop:
    """The sleeping scheduler's state between passes: when it last swept, and the moments rung to look at."""

    def __init__(self, tick_seconds: float, batch_size: int, sweep_seconds: int, max_sleep: float, alarm,
                 clock=time.time) -> None:
        self.tick_seconds, self.batch_size, self.sweep_seconds = tick_seconds, batch_size, sweep_seconds
        self.max_sleep, self.alarm, self.clock = max_sleep, alarm, clock
        self.next_sweep = clock()  # epoch seconds: the sweep's own pace (each swept item is queued again)
        self.rung: list[float] = []
        #: passes that served something, and reads of the due times: what the tests and benches count
        self.passes = self.reads = 0

    def due_at(self, due: Due, now: float) -> dict[str, float | None]:
        """Each kind's moment to be served, epoch seconds: the stored due times, with the delays and paces the
        passes add to them (a push's grace and sweep pace, a device's offline window, the delivery sweep's age)."""
        settings = current().settings
        offline = current().presence.offline_seconds
        pushes = _epoch(due.pushes)
        if pushes is not None:
            last = _epoch(_last_push_sweep)
            pushes = max(pushes + PUSH_GRACE.total_seconds(),
                         pushes if last is None else last + settings.WAKE_PUSH_SWEEP_SECONDS)
        swept = [t for t in (_epoch(due.deliveries), _epoch(due.results)) if t is not None]
        sweep = max(min(swept) + self.sweep_seconds, self.next_sweep) if swept else None
        stops, devices = _epoch(due.stops), _epoch(due.devices)
        return {"checks": _epoch(due.checks), "expiries": _epoch(due.expiries), "expects": _epoch(due.expects),
                "backs": _epoch(due.backs), "held": _epoch(due.held), "pushes": pushes, "runs": _epoch(due.runs),
                "stops": None if stops is None else stops + FORGOTTEN_STOP.total_seconds(),
                "devices": None if devices is None else devices + offline, "sweep": sweep,
                "prune": now + max(_next_prune - time.monotonic(), 0.0)}

    def step(self) -> float | None:
        """One pass: read the due times, serve the kinds due; the moment to pass next, or None for at once (a
        full batch, misses left)."""
        now = self.clock()
        self.rung = [when for when in self.rung if when > now]
        try:
            with connection():
                due = due_times()
                self.reads += 1
                at = self.due_at(due, now)
                kinds = frozenset(kind for kind, when in at.items() if when is not None and when <= now)
                if not kinds:
                    return wake_at(now, list(at.values()), self.tick_seconds, self.max_sleep, self.rung)
                self.passes += 1
                when = _as_utc(now)
                claimed = tick(when, self.batch_size, kinds & EVERYTHING)
                if kinds & {"sweep", "prune"}:
                    self.next_sweep = now + self.sweep_seconds
                    sweep(when, self.sweep_seconds)
                if claimed >= self.batch_size or misses_left:
                    return None
        except UNAVAILABLE as exc:  # a database or Redis outage: say so in one line, try again next tick
            log.warning("scheduler tick skipped, database or queue unreachable: %s", first_line(exc))
        except Exception:  # anything else: the traceback, and the next tick all the same
            log.exception("scheduler tick failed")
        # served (or failed): look again at the next tick, which finds what is left or sleeps
        return wake_at(now, [now], self.tick_seconds, self.max_sleep, self.rung)

    def sleep_until(self, at: float, stop: threading.Event) -> None:
        """Sleep until `at` (epoch seconds) or a ring of something due before it, or `stop`."""
        while not stop.is_set():
            left = at - self.clock()
            if left <= 0:
                return
            heard = [_epoch(when) for when in self.alarm.wait(min(left, STOP_POLL_SECONDS))]
            if heard:
                now = self.clock()
                self.rung += rung_times(now, heard, self.tick_seconds)
                at = min(at, wake_at(now, [], self.tick_seconds, self.max_sleep, self.rung))


def _as_utc(epoch: float) -> datetime:
    return _EPOCH + timedelta(seconds=epoch)


def run(tick_seconds: float, batch_size: int, stop: threading.Event, sweep_seconds: int = 30,
        max_sleep: float | None = None, alarm=None) -> Loop:
    """Pass until `stop` is set: each pass serves what is due, then the loop sleeps until the next due moment's
    tick (woken early by a ring); a full batch goes again at once (missed ticks are skipped, not replayed).
    Returns the loop, for its counts."""
    runtime = current()
    if max_sleep is None:
        max_sleep = runtime.settings.SCHEDULER_MAX_SLEEP_SECONDS
    loop = Loop(tick_seconds, batch_size, sweep_seconds, max_sleep, alarm or runtime.alarm)
    loop.alarm.wait(0)  # subscribed before the first read: a ring from then on is heard
    while not stop.is_set():
        at = loop.step()
        if at is not None:
            loop.sleep_until(at, stop)
    return loop

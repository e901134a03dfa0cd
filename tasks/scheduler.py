"""The scheduler: a loop that only claims due monitors and enqueues their checks.

It ticks just after each wall-clock tick boundary (time watches are due on whole seconds) and skips missed
ticks rather than replaying them.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from models import connection, utcnow
from models.claims import claim_due
from models.coalesce import flush_due
from engine.pipeline import ERROR, Outcome
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
from tasks.events import publish_coalesced, publish_device, publish_monitor
from tasks.pushes import sweep_pushes
from tasks.runtime import current
from adapters.logs import first_line

log = logging.getLogger(__name__)

#: a push is left this long to the actor queued with its wake before the sweep queues it (a retry's time, or a
#: message lost between the wake and the push)
PUSH_GRACE = timedelta(seconds=2)


def tick(now: datetime, batch_size: int) -> int:
    """One pass: end expired monitors, deliver closed coalescing windows, queue due wake pushes, claim due
    monitors and enqueue a check for each, then wake for missed deliveries. Returns how many monitors."""
    for monitor, message in expire_due(now):
        publish_monitor(monitor, message)
    publish_coalesced(flush_due(now))  # wake coalescing: the windows that closed, one message each
    devices_tick(now)
    _sweep_pushes(now)
    claimed = claim_due(now, batch_size)
    send_claims(claimed, now)  # the queue down: what was not queued is released, and the tick fails
    _tell_missed(now)
    return len(claimed)


#: how long one tick spends on missed deliveries, after the due checks are queued; the rest go on at once
MISSES_SECONDS = 0.5
#: whether the last tick left misses for the next, which then runs at once (like a full batch of checks)
misses_left = False


def _tell_missed(now: datetime) -> None:
    """Trigger links whose deliveries stopped coming: their wakes, within MISSES_SECONDS of the tick."""
    global misses_left
    told = miss_due(now, current().lifecycle, until=time.monotonic() + MISSES_SECONDS)
    for monitor, message in told:
        publish_monitor(monitor, message)
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


#: how long after a wall-clock tick boundary the tick runs: a time watch due at 12:00:05 is claimed at 12:00:05.005
ALIGN_SLACK_SECONDS = 0.005


def wait_for_boundary(tick_seconds: float, now: float) -> float:
    """Seconds until just after the next multiple of tick_seconds on the wall clock. Time watches are due on whole
    seconds; ticking at a phase of the scheduler's own start would add up to a whole tick to every one of them."""
    return tick_seconds - (now % tick_seconds) + ALIGN_SLACK_SECONDS


def run(tick_seconds: float, batch_size: int, stop: threading.Event, sweep_seconds: int = 30) -> None:
    """Tick until `stop` is set, just after each wall-clock tick boundary; a full batch goes again at once (missed
    ticks are skipped, not replayed). Sweeps deliveries every sweep_seconds."""
    next_sweep = time.monotonic()
    while not stop.is_set():
        try:
            with connection():
                claimed = tick(utcnow(), batch_size)
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + sweep_seconds
                    sweep(utcnow(), sweep_seconds)
        except UNAVAILABLE as exc:  # a database or Redis outage: say so in one line, try again next tick
            log.warning("scheduler tick skipped, database or queue unreachable: %s", first_line(exc))
            claimed = 0
        except Exception:  # anything else: the traceback, and the next tick all the same
            log.exception("scheduler tick failed")
            claimed = 0
        if claimed >= batch_size or misses_left:
            continue
        stop.wait(wait_for_boundary(tick_seconds, time.time()))

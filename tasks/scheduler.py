"""The scheduler: a loop that only claims due monitors and enqueues their checks.

It keeps time with a monotonic clock and skips missed ticks rather than replaying them.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from models import connection, utcnow
from models.claims import claim_due, release
from models.monitors import expire_due
from models.triggers import unprocessed
from tasks.broker import UNAVAILABLE
from tasks.checks import BATCH_SIZE, check_monitors
from tasks.deliveries import process_delivery
from tasks.events import publish_monitor
from vigil.logs import first_line

log = logging.getLogger(__name__)


def tick(now: datetime, batch_size: int) -> int:
    """One pass: end expired monitors, claim due ones, enqueue a check for each. Returns how many."""
    for monitor, message in expire_due(now):
        publish_monitor(monitor, message)
    claimed = claim_due(now, batch_size)
    for start in range(0, len(claimed), BATCH_SIZE):
        try:
            check_monitors.send([list(claim) for claim in claimed[start:start + BATCH_SIZE]])
        except UNAVAILABLE:  # the queue is down: what was not queued is due again, not skipped an interval
            release(claimed[start:], now)
            raise
    return len(claimed)


def sweep(now: datetime, older_than_seconds: int) -> int:
    """Queue again the stored deliveries nobody processed (their message was lost); returns how many."""
    stale = unprocessed(now - timedelta(seconds=older_than_seconds))
    for delivery_id in stale:
        process_delivery.send(delivery_id)
    return len(stale)


def run(tick_seconds: float, batch_size: int, stop: threading.Event, sweep_seconds: int = 30) -> None:
    """Tick until `stop` is set; a full batch goes again at once. Sweeps deliveries every sweep_seconds."""
    next_tick = next_sweep = time.monotonic()
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
        if claimed >= batch_size:
            continue
        next_tick += tick_seconds
        now = time.monotonic()
        if next_tick < now:
            next_tick = now + tick_seconds
        stop.wait(next_tick - now)

"""The scheduler: a loop that only claims due monitors and enqueues their checks.

It keeps time with a monotonic clock and skips missed ticks rather than replaying them.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime

from models import connection, utcnow
from models.claims import claim_due
from models.monitors import expire_due
from tasks.checks import BATCH_SIZE, check_monitors
from tasks.events import publish_message, publish_monitor

log = logging.getLogger(__name__)


def tick(now: datetime, batch_size: int) -> int:
    """One pass: end expired monitors, claim due ones, enqueue a check for each. Returns how many."""
    for monitor, message in expire_due(now):
        publish_monitor(monitor)
        if message is not None:
            publish_message(monitor.user_id, monitor.conversation.external_id, message)
    claimed = claim_due(now, batch_size)
    for start in range(0, len(claimed), BATCH_SIZE):
        check_monitors.send([list(claim) for claim in claimed[start:start + BATCH_SIZE]])
    return len(claimed)


def run(tick_seconds: float, batch_size: int, stop: threading.Event) -> None:
    """Tick until `stop` is set; a full batch goes again at once."""
    next_tick = time.monotonic()
    while not stop.is_set():
        try:
            with connection():
                claimed = tick(utcnow(), batch_size)
        except Exception:  # a database or broker outage: log, wait a tick, try again
            log.exception("scheduler tick failed")
            claimed = 0
        if claimed >= batch_size:
            continue
        next_tick += tick_seconds
        now = time.monotonic()
        if next_tick < now:
            next_tick = now + tick_seconds
        stop.wait(next_tick - now)

"""When a monitor checks next: its interval, jittered, never on the hour or half hour.

Monitors that may share one fetch (the same url, engine/shared_fetch.py) are steered onto one slot of their own:
their jitter is chosen, within the same bounds, to move each check toward the url's grid (every interval, at a
phase the url's hash picks), so after a few checks they all fall due in the same tick, are claimed together and
checked in one batch, one after another: one GET, and a quiet outcome the others of the batch take when their
inputs are the same (tasks/checks.same_inputs). Different urls get different phases, so they stay spread over the
interval as random jitter spreads them.
"""

from __future__ import annotations

import hashlib
import random
from datetime import datetime, timedelta, timezone

#: Jitter spreads checks over ±10% of the interval, at most this many seconds either way.
JITTER_FRACTION = 0.1
MAX_JITTER_SECONDS = 120
#: Minutes of the hour a check never lands on: everyone else's cron jobs run then.
BUSY_MINUTES = (0, 30)
#: Intervals shorter than this check several times a minute anyway; moving them would only leave gaps.
BUSY_MINUTE_RULE_FROM_SECONDS = 60


def next_check_at(now: datetime, interval_seconds: int, rng: random.Random | None = None,
                  slot: str | None = None, never_early: bool = False) -> datetime:
    """`now` plus the interval, jittered, moved off minute :00 and :30. With `slot` (a url whose fetch monitors
    share), the jitter is the one nearest to `slot`'s grid instead of a random one. `never_early` (a tool watch,
    seed 001: never polled faster than its interval) keeps only jitter that delays."""
    spread = min(interval_seconds * JITTER_FRACTION, MAX_JITTER_SECONDS)
    jitter = toward_slot(now, interval_seconds, spread, slot) if slot else (rng or random).uniform(-spread, spread)
    if never_early:
        jitter = abs(jitter)
    due = max(now + timedelta(seconds=interval_seconds + jitter), now + timedelta(seconds=1))
    return off_busy_minutes(due) if interval_seconds >= BUSY_MINUTE_RULE_FROM_SECONDS else due


def toward_slot(now: datetime, interval_seconds: int, spread: float, slot: str) -> float:
    """The jitter, within ±spread, that brings now + interval nearest to a point of `slot`'s grid: on it when one
    is within reach (every check after the first few), else as far toward it as the spread allows."""
    target = epoch_seconds(now) + interval_seconds
    away = (slot_phase(slot, interval_seconds) - target) % interval_seconds  # to the next grid point, in [0, interval)
    if away > interval_seconds / 2:
        away -= interval_seconds  # the grid point before is nearer
    return max(-spread, min(spread, away))


def slot_phase(slot: str, interval_seconds: int) -> float:
    """Where in each interval `slot`'s checks fall, in seconds from a multiple of the interval (epoch time), to the
    millisecond: the same on every process and machine."""
    digest = hashlib.blake2b(slot.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (max(interval_seconds, 1) * 1000) / 1000


def off_busy_minutes(when: datetime) -> datetime:
    """`when`, or a minute later when it falls in a busy minute."""
    if when.minute in BUSY_MINUTES:
        return when + timedelta(minutes=1)
    return when


def epoch_seconds(moment: datetime) -> float:
    """Seconds since the epoch; a naive datetime is UTC, as the tables store times."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()

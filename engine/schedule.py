"""When a monitor checks next: its interval, jittered, never on the hour or half hour."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

#: Jitter spreads checks over ±10% of the interval, at most this many seconds either way.
JITTER_FRACTION = 0.1
MAX_JITTER_SECONDS = 120
#: Minutes of the hour a check never lands on: everyone else's cron jobs run then.
BUSY_MINUTES = (0, 30)
#: Intervals shorter than this check several times a minute anyway; moving them would only leave gaps.
BUSY_MINUTE_RULE_FROM_SECONDS = 60


def next_check_at(now: datetime, interval_seconds: int, rng: random.Random | None = None) -> datetime:
    """`now` plus the interval, jittered, moved off minute :00 and :30."""
    rng = rng or random
    spread = min(interval_seconds * JITTER_FRACTION, MAX_JITTER_SECONDS)
    due = max(now + timedelta(seconds=interval_seconds + rng.uniform(-spread, spread)), now + timedelta(seconds=1))
    return off_busy_minutes(due) if interval_seconds >= BUSY_MINUTE_RULE_FROM_SECONDS else due


def off_busy_minutes(when: datetime) -> datetime:
    """`when`, or a minute later when it falls in a busy minute."""
    if when.minute in BUSY_MINUTES:
        return when + timedelta(minutes=1)
    return when

"""When the scheduler next has work, and how a write that brings that moment closer tells it.

The scheduler sleeps until the earliest due moment of everything a tick serves (issue 32) instead of ticking every
second. `due_times` reads all those moments in one statement of indexed MIN()s; `sooner(when)` is what a write
calls when it makes something due earlier than the scheduler may have planned (a monitor created or resumed, a
coalescing window opened, a push retry set, a device come online…). models/ knows no Redis: the process installs
the hook that carries the news (tasks/runtime.configure: adapters/wakeup.py, Redis pub/sub in production, an
in-process alarm when embedded). A news lost (Redis down, no hook) costs lateness only: the scheduler sleeps at
most SCHEDULER_MAX_SLEEP_SECONDS, and reads these moments again at every wake.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime

from models.db import database

log = logging.getLogger(__name__)

_hook: Callable[[datetime], None] | None = None


def install(hook: Callable[[datetime], None] | None) -> None:
    """The process's way to tell its scheduler(s); None: nobody to tell (a CLI command, a test without one)."""
    global _hook
    _hook = hook


def sooner(when: datetime | None) -> None:
    """Something is due at `when` (naive UTC), perhaps before the scheduler's planned wake: tell it. Never raises:
    the write that calls it has succeeded, and the scheduler's cap bounds what a lost news costs."""
    if when is None or _hook is None:
        return
    try:
        _hook(when)
    except Exception as exc:  # the hooks log their own failures; this is the last guard
        log.warning("scheduler not told of a due time: %s", exc)


@dataclass(frozen=True)
class Due:
    """The earliest moment of each kind of the scheduler's work (naive UTC), None where there is none. Each is read
    by the index that serves the pass it stands for (models/migrations/m0026_sleeping_scheduler.py)."""
    checks: datetime | None = None      # claim_due: active polled monitors' next check
    expiries: datetime | None = None    # expire_due: monitors not ended, by their expiry
    expects: datetime | None = None     # miss_due: trigger links' deadlines
    backs: datetime | None = None       # miss_due: deliveries back after a miss, to announce
    held: datetime | None = None        # flush_due: coalescing windows closing
    pushes: datetime | None = None      # sweep_pushes: retries (before PUSH_GRACE)
    runs: datetime | None = None        # expire_runs: polled commands' deadlines
    stops: datetime | None = None       # end_forgotten_stops: stop orders sent (before their 120 s)
    devices: datetime | None = None     # mark_offline: last seen of online devices (before the offline window)
    deliveries: datetime | None = None  # sweep: unprocessed deliveries received (before the sweep's age)
    results: datetime | None = None     # sweep: unchecked command results finished (before the sweep's age)


_NOT_ENDED = "('active', 'paused', 'awaiting_approval')"
_UNFINISHED = "('pending', 'running', 'stopping')"
#: one scalar subquery per kind, each a MIN() one index answers from its first entry (EXPLAIN in
#: tests/integration/test_scheduler_sleeps.py); the monitor expiries per status, as (status, expires_at) orders
#: each status on its own
_PARTS = {
    "checks": "SELECT min(next_check_at) FROM monitors WHERE status = 'active' AND polled",
    "expiries": "SELECT min(t) FROM (" + " UNION ALL ".join(
        f"SELECT min(expires_at) AS t FROM monitors WHERE status = '{status}'"
        for status in ("active", "paused", "awaiting_approval")) + ") e",
    "expects": "SELECT min(expect_due_at) FROM monitors WHERE status = 'active' AND expect_due_at IS NOT NULL",
    "backs": "SELECT min(expect_back_at) FROM monitors WHERE expect_back_at IS NOT NULL",
    "held": "SELECT min(due_at) FROM held_wakes",
    "pushes": "SELECT min(next_attempt_at) FROM wake_pushes WHERE status = 'pending'",
    "runs": f"SELECT min(deadline_at) FROM command_runs WHERE status IN {_UNFINISHED} AND kind = 'poll'",
    "stops": f"SELECT min(sent_at) FROM command_runs WHERE status IN {_UNFINISHED} AND status = 'stopping' "
             "AND started_at IS NULL",
    "devices": "SELECT min(last_seen_at) FROM devices WHERE online",
    "deliveries": "SELECT min(received_at) FROM deliveries WHERE processed_at IS NULL",
    "results": "SELECT min(finished_at) FROM command_runs WHERE processed_at IS NULL AND kind = 'poll' "
               "AND status = 'done'",
}
_SQL = "SELECT " + ", ".join(f"({_PARTS[f.name]})" for f in fields(Due))


def due_times() -> Due:
    """Every kind's earliest due moment, in one statement (once a wake: not worth preparing)."""
    row = database.execute_sql(_SQL).fetchone()
    return Due(*(_as_time(value) for value in row))


def _as_time(value) -> datetime | None:
    """SQLite hands timestamps back as text, PostgreSQL as datetimes."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value

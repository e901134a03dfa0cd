"""A command monitor's runs as the rest of the models see them: statuses, and stop orders when the monitor
stops (paused, cancelled, expired, revoked). Imports only the tables, so any model module may use it."""

from __future__ import annotations

from datetime import datetime, timedelta

from models.db import utcnow
from models.tables import CommandRun

#: a run's statuses before it ends: not started yet, running, a stop order out
PENDING, RUNNING, STOPPING = "pending", "running", "stopping"
UNFINISHED = (PENDING, RUNNING, STOPPING)


def stop_runs(monitor_id: str) -> list[int]:
    """Send stop orders for the monitor's unfinished runs; returns the devices to wake up. A run no runner was
    ever handed ends here and now: no device knows it, so none would answer a stop order."""
    runs = list(CommandRun.select(CommandRun.id, CommandRun.device, CommandRun.sent_at).where(
        (CommandRun.monitor == monitor_id) & CommandRun.status.in_((PENDING, RUNNING))))
    unsent = [r.id for r in runs if r.sent_at is None]
    if unsent:
        CommandRun.update(status="done", end_reason="stopped", finished_at=utcnow()) \
            .where(CommandRun.id.in_(unsent) & CommandRun.sent_at.is_null()).execute()
    sent = [r for r in runs if r.sent_at is not None]
    if sent:
        CommandRun.update(status=STOPPING).where(CommandRun.id.in_([r.id for r in sent])
                                                 & CommandRun.status.in_((PENDING, RUNNING))).execute()
    return sorted({run.device_id for run in sent})


def end_forgotten_stops(now: datetime, after_seconds: int = 120) -> int:
    """Stop orders for runs handed out but never started (the runner died first and forgot them): ended."""
    return (CommandRun.update(status="done", end_reason="stopped", finished_at=now)
            .where((CommandRun.status == STOPPING) & CommandRun.started_at.is_null()
                   & (CommandRun.sent_at < now - timedelta(seconds=after_seconds))).execute())

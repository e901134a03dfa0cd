"""A command monitor's runs as the rest of the models see them: statuses, and stop orders when the monitor
stops (paused, cancelled, expired, revoked). Imports only the tables, so any model module may use it."""

from __future__ import annotations

from datetime import datetime, timedelta

from models.db import utcnow
from models.tables import ACTIVE, AWAITING, CommandRun

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


#: a stream's watcher as its runs show it: a run started (and not asked to stop), a run not started yet, a stop
#: order out, no unfinished run (or, before the owner's approval, none yet)
RUNNING_WATCHER, STARTING_WATCHER, STOPPING_WATCHER, NO_WATCHER = "running", "starting", "stopping", "not running"
AWAITING_WATCHER = "awaiting approval"
#: the watcher a monitor's runs show, liveliest first
_BY_RUN = {RUNNING: RUNNING_WATCHER, PENDING: STARTING_WATCHER, STOPPING: STOPPING_WATCHER}


def is_stream(monitor) -> bool:
    """Whether the monitor is a stream watcher (a command source in stream mode)."""
    return (monitor.source or {}).get("type") == "command" and monitor.source.get("mode") == "stream"


def watcher_states(monitors: list) -> dict[str, str]:
    """Each monitor's watcher (one query): its liveliest unfinished run's, NO_WATCHER without one, AWAITING_WATCHER
    while the owner has not approved the command. An active monitor's running or starting watcher is one whose
    process runs or is about to: the watchers seed 002's `list` shows."""
    ids = [monitor.id for monitor in monitors]
    rows = (CommandRun.select(CommandRun.monitor, CommandRun.status)
            .where(CommandRun.monitor.in_(ids) & CommandRun.status.in_(UNFINISHED)).tuples()) if ids else []
    rank = list(_BY_RUN)
    best: dict[str, str] = {}
    for monitor_id, status in rows:
        if monitor_id not in best or rank.index(status) < rank.index(best[monitor_id]):
            best[monitor_id] = status
    return {m.id: AWAITING_WATCHER if m.status == AWAITING else _BY_RUN.get(best.get(m.id), NO_WATCHER)
            for m in monitors}


def watcher_live(monitor, state: str) -> bool:
    """Whether the watcher's process runs or is about to start (on the owner's approval, or its runner's poll)."""
    return state == AWAITING_WATCHER or (monitor.status == ACTIVE and state in (RUNNING_WATCHER, STARTING_WATCHER))

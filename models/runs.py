"""A command monitor's runs as the rest of the models see them: statuses, and stop orders when the monitor
stops (paused, cancelled, expired, revoked). Imports only the tables, so any model module may use it."""

from __future__ import annotations

from models.tables import CommandRun

#: a run's statuses before it ends: not started yet, running, a stop order out
PENDING, RUNNING, STOPPING = "pending", "running", "stopping"
UNFINISHED = (PENDING, RUNNING, STOPPING)


def stop_runs(monitor_id: str) -> list[int]:
    """Send stop orders for the monitor's unfinished runs; returns the devices to wake up."""
    runs = list(CommandRun.select(CommandRun.id, CommandRun.device).where(
        (CommandRun.monitor == monitor_id) & CommandRun.status.in_((PENDING, RUNNING))))
    if runs:
        CommandRun.update(status=STOPPING).where(CommandRun.id.in_([r.id for r in runs])
                                                 & CommandRun.status.in_((PENDING, RUNNING))).execute()
    return sorted({run.device_id for run in runs})

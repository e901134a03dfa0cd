"""What a dry run's forecast reads from the database (issue 18): how often the account's earlier monitors of the
same source saw it change, and how many fires the conversation had in the last 24 hours. The arithmetic is
engine/forecast.py's; this only loads its inputs."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timedelta

from peewee import fn

from engine.forecast import HISTORY_DAYS, History, Watched, forecast, history, observed_seconds
from engine.spec import MonitorSpec
from engine.sources import DAILY_CAP_SOURCES, SourceSpec
from models.results import fires_in_last_day
from models.tables import Monitor, MonitorRun

#: the source fields that say what is read (not what a create resolved, such as a device's or a tool's id)
SAME_SOURCE = ("type", "url", "selector", "items_path", "key_path", "path", "metric", "labels", "device", "command",
               "cwd", "mode", "tool", "arguments", "agent_id", "connection", "item_type", "item_id")
#: the events of a check that read changed content (a quiet check writes none)
CHANGE_KINDS = ("changed", "fired")


def forecast_for(user_id: int, conversation_id: int | None, spec: MonitorSpec, daily_cap: int, now: datetime,
                 ends_at: datetime | None = None) -> dict:
    """The dry run's forecast; a conversation not stored yet (None) has had no fires. Only seed 001's watches have
    the daily cap: another monitor's wakes_left is its max_wakes whole (a cap of max_wakes, none fired)."""
    capped = spec.source.type in DAILY_CAP_SOURCES
    fired = fires_in_last_day(conversation_id, now) if capped and conversation_id is not None else 0
    past = source_history(user_id, spec.source, now) if spec.condition else None  # no judge: no rate to tell
    return forecast(spec, now, past, fired, daily_cap if capped else spec.max_wakes, ends_at)


def source_history(user_id: int, source: SourceSpec, now: datetime) -> History | None:
    """The changes the account's monitors of this source saw over the last HISTORY_DAYS, or None."""
    since = now - timedelta(days=HISTORY_DAYS)
    wanted = same_source(asdict(source))
    watchers = [m for m in Monitor.select(Monitor.id, Monitor.source, Monitor.created_at, Monitor.last_checked_at)
                .where((Monitor.user == user_id) & (Monitor.last_checked_at >= since))
                if same_source(m.source or {}) == wanted]
    if not watchers:
        return None
    changes = dict(MonitorRun.select(MonitorRun.monitor, fn.COUNT(MonitorRun.id))
                   .where(MonitorRun.monitor.in_([m.id for m in watchers]) & MonitorRun.kind.in_(CHANGE_KINDS)
                          & (MonitorRun.created_at >= since))
                   .group_by(MonitorRun.monitor).tuples())
    return history([Watched(observed_seconds(m.created_at, m.last_checked_at, now), changes.get(m.id, 0))
                    for m in watchers])


def same_source(record: dict) -> str:
    """What two monitors must share to watch the same thing (mappings compared whatever their key order)."""
    return json.dumps([record.get(name) for name in SAME_SOURCE], sort_keys=True, default=str)

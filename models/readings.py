"""What a monitor read, for the pictures on its page: a numeric monitor's readings over its kept events, and a
page monitor's latest change. Read from the stored events only (monitor_runs, kept MONITOR_EVENTS_KEPT per
monitor); no fetch. A quiet check writes no row, but it read the same value as the reading before it, so the kept
events are every value the monitor saw within them."""

from __future__ import annotations

from datetime import datetime

from engine.chart import READING_KINDS, Chart, build_chart, readings_of
from engine.explain import MAX_SIDE_CHARS
from engine.word_diff import WordDiff, diff_of_change
from models import events
from models.tables import MonitorRun

#: the events looked through for the latest stored change (a change is most often the newest event)
_LATEST_LOOKED_AT = 20


def is_numeric(monitor) -> bool:
    """A threshold monitor, or one whose stored state is a number (what change_data records before → after of)."""
    value = (monitor.check_state or {}).get("value")
    return (monitor.check or {}).get("type") == "threshold" or (
        isinstance(value, (int, float)) and not isinstance(value, bool))


def monitor_chart(monitor, now: datetime) -> Chart | None:
    """The chart of a numeric monitor's kept readings, the threshold drawn; None for another monitor or none yet."""
    if not is_numeric(monitor):
        return None
    rows = (MonitorRun.select(MonitorRun.kind, MonitorRun.created_at, MonitorRun.data)
            .where((MonitorRun.monitor == monitor.id) & MonitorRun.kind.in_(READING_KINDS))
            .order_by(MonitorRun.id.desc()).limit(events.EVENTS_KEPT))
    kept = [{"kind": r.kind, "at": r.created_at, "data": r.data or {}} for r in reversed(list(rows))]
    check = monitor.check or {}
    threshold = check.get("value") if check.get("type") == "threshold" else None
    return build_chart(readings_of(kept, (monitor.check_state or {}).get("value")), now,
                       threshold if isinstance(threshold, (int, float)) else None, check.get("op", ""),
                       until=monitor.last_checked_at, what=monitor.description)


def is_text_change(monitor) -> bool:
    """A change check: its events keep the lines that came and went (the only check that stores text)."""
    return (monitor.check or {}).get("type") == "change"


def latest_change(monitor) -> tuple[dict, WordDiff | None] | None:
    """The newest stored text change ({"at", "kind"}) and its word diff; None when the monitor has kept none."""
    if not is_text_change(monitor):
        return None
    rows = (MonitorRun.select(MonitorRun.kind, MonitorRun.created_at, MonitorRun.data)
            .where((MonitorRun.monitor == monitor.id) & MonitorRun.kind.in_(("changed", "fired")))
            .order_by(MonitorRun.id.desc()).limit(_LATEST_LOOKED_AT))
    for row in rows:
        line_diff = (row.data or {}).get("diff")
        if isinstance(line_diff, str):
            return {"at": row.created_at, "kind": row.kind}, diff_of_change(line_diff, MAX_SIDE_CHARS)
    return None

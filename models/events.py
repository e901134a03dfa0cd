"""A monitor's history, as its page and GET /api/monitors/{id}/events show it: the stored events (monitor_runs)
and its wakes, newest first, with the quiet checks between them counted, never written."""

from __future__ import annotations

import json
from datetime import datetime

from peewee import PostgresqlDatabase

from engine.explain import counts_as_check, fold, why_not
from models.compiled import Compiled, run_prepared
from models.db import database, iso
from models.tables import MonitorRun, Wake

#: events kept per monitor (MONITOR_EVENTS_KEPT; tasks/runtime.configure sets it from the settings)
EVENTS_KEPT = 200


def keep_events(count: int) -> None:
    global EVENTS_KEPT
    EVENTS_KEPT = count

#: a monitor's events are numbered (monitor_runs.seq, from monitors.events_written, m0022), so the prune deletes
#: the ones beyond EVENTS_KEPT by number: one row down an index, where finding the EVENTS_KEPT-th newest by id read
#: all of them on every event (~0.3 ms of PostgreSQL's time per event at 200 kept)
_COUNT_ONE = "UPDATE monitors SET events_written = events_written + 1 WHERE id = {p}"
_NEW = Compiled(lambda monitor_id, kind, detail, created_at, check_count, data, seq: MonitorRun.insert({
    MonitorRun.monitor: monitor_id, MonitorRun.kind: kind, MonitorRun.detail: detail,
    MonitorRun.created_at: created_at, MonitorRun.check_count: check_count, MonitorRun.data: data,
    MonitorRun.seq: seq}))
_PRUNE_SQL = "DELETE FROM monitor_runs WHERE monitor_id = {p} AND seq <= {p}"
#: PostgreSQL: the number, the insert and the prune in one round trip (the DELETE does not see the row its WITH
#: inserts: one snapshot, and it is not among the ones it deletes)
_NEW_AND_PRUNE_SQL = (
    "WITH counted AS (" + _COUNT_ONE.format(p="%s") + " RETURNING id, events_written), "
    "new AS (INSERT INTO monitor_runs (monitor_id, kind, detail, created_at, check_count, data, seq) "
    "SELECT id, %s, %s, CAST(%s AS timestamp), CAST(%s AS integer), %s, events_written FROM counted) "
    "DELETE FROM monitor_runs WHERE monitor_id = (SELECT id FROM counted) "
    "AND seq <= (SELECT events_written FROM counted) - CAST(%s AS integer)")


def record_event(monitor, kind: str, detail: str, now: datetime, data: dict | None = None) -> None:
    """One event, in the caller's transaction; the monitor's oldest beyond EVENTS_KEPT go. Never on a quiet
    check."""
    row = _row(monitor, kind, detail, now, data)
    counted(monitor)
    if isinstance(database.obj, PostgresqlDatabase):
        run_prepared("vigil_record_event", _NEW_AND_PRUNE_SQL, (monitor.id, *row, EVENTS_KEPT))
        return
    p = database.param
    database.execute_sql(_COUNT_ONE.format(p=p), (monitor.id,))
    seq = database.execute_sql(f"SELECT events_written FROM monitors WHERE id = {p}", (monitor.id,)).fetchone()[0]
    _NEW.rowcount(monitor.id, *row, seq)
    database.execute_sql(_PRUNE_SQL.format(p=p), (monitor.id, seq - EVENTS_KEPT))


def counted(monitor) -> None:
    """The caller's copy of the monitor counts the event it wrote too, as the row does."""
    monitor.events_written = (monitor.events_written or 0) + 1


#: what with_event adds to its UPDATE's SET: the event's number
COUNTS_ITS_EVENT = '"events_written" = "events_written" + 1'


def with_event(update_sql: str, ctes: str = "", results: str = "") -> str:
    """PostgreSQL: `update_sql` (an UPDATE of one monitor, models/results, whose SET has COUNTS_ITS_EVENT) and the
    event record_event writes after it, with the prune, as one statement; the event is written only if the UPDATE
    changed the row, and the first value the statement returns is how many rows it changed. Its parameters: the
    UPDATE's, then event_params. `ctes`: more CTEs after the event's (they may select from `upd`, the updated
    row), and `results`: more values the statement returns after the count, with their parameters after
    event_params."""
    more = f", {ctes}" if ctes else ""
    also = f", {results}" if results else ""
    return (f"WITH upd AS ({update_sql} RETURNING id, events_written), run AS (INSERT INTO monitor_runs (monitor_id, "
            "kind, detail, created_at, check_count, data, seq) SELECT id, %s, %s, CAST(%s AS timestamp), "
            "CAST(%s AS integer), %s, events_written FROM upd), pruned AS (DELETE FROM monitor_runs WHERE monitor_id "
            f"= (SELECT id FROM upd) AND seq <= (SELECT events_written FROM upd) - CAST(%s AS integer)){more} "
            f"SELECT (SELECT COUNT(*) FROM upd){also}")


def event_params(monitor, kind: str, detail: str, now: datetime, data: dict | None = None) -> tuple:
    """The parameters with_event's statement takes after its UPDATE's."""
    return (*_row(monitor, kind, detail, now, data), EVENTS_KEPT)


def _row(monitor, kind: str, detail: str, now: datetime, data: dict | None) -> tuple:
    encoded = None if data is None else json.dumps(data, ensure_ascii=False)
    return kind, detail[:4000], now, monitor.check_count, encoded


def history(monitor, before: int | None = None, limit: int = 50) -> dict:
    """A page of the timeline, newest first: events and wakes merged, the quiet checks above each event folded
    into a span, and the answer to "why didn't it fire?". `before`: the `next_before` of the last page."""
    query = MonitorRun.select().where(MonitorRun.monitor == monitor.id)
    if before is not None:
        query = query.where(MonitorRun.id < before)
    runs = list(query.order_by(MonitorRun.id.desc()).limit(limit + 1))
    more, runs = len(runs) > limit, runs[:limit]
    events = [_event(run) for run in runs]
    if before is None:
        top_count, top_at, upper = monitor.check_count, monitor.last_checked_at, None
    else:  # the span above this page's newest event reaches up to the last page's oldest one
        above = MonitorRun.get_or_none((MonitorRun.id == before) & (MonitorRun.monitor == monitor.id))
        top_count = above.check_count - counts_as_check(_event(above)) if above else 0
        top_at = above.created_at if above else None
        upper = top_at  # the wakes from the last page's oldest event on were on that page
    items = fold(events, top_count, top_at)
    return {"items": _merged(items, _wakes(monitor, runs, upper, more)),
            "why_not": why_not(events) if before is None else None,
            "next_before": str(runs[-1].id) if more else None}


def _event(run: MonitorRun) -> dict:
    return {"id": run.id, "kind": run.kind, "at": run.created_at, "check_count": run.check_count,
            "detail": run.detail, "data": run.data or {}}


def _wakes(monitor, runs: list[MonitorRun], upper: datetime | None, more: bool) -> list[dict]:
    """The wakes within this page's time range: from its oldest event (when more pages follow) up to the last
    page's oldest event (all newer ones on the first page)."""
    query = Wake.select().where(Wake.monitor == monitor.id)
    if runs and more:
        query = query.where(Wake.created_at >= runs[-1].created_at)
    if upper is not None:
        query = query.where(Wake.created_at < upper)
    return [{"kind": "wake", "at": wake.created_at, "message_id": wake.message_id}
            for wake in query.order_by(Wake.id.desc()).limit(200)]


def _merged(items: list[dict], wakes: list[dict]) -> list[dict]:
    """Wakes placed among the items by time, newest first (a wake comes just after the fire that wrote it)."""
    merged, pending = [], list(wakes)
    for item in items:
        when = item["to"] if item["kind"] == "quiet" else item["at"]
        while pending and pending[0]["at"] >= when:
            merged.append(pending.pop(0))
        merged.append(item)
    return merged + pending


def item_json(item: dict) -> dict:
    out = {key: value for key, value in item.items() if key not in ("at", "from", "to")}
    for key in ("at", "from", "to"):
        if key in item:
            out[key] = iso(item[key]) if item[key] is not None else None
    return out


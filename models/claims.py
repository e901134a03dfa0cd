"""Claiming due monitors for checking, and reading back what a check of a claim needs."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime

import peewee

from engine.schedule import next_check_at
from engine.shared_fetch import claim_order, fetch_key
from models.db import database
from models.tables import ACTIVE, Monitor

def claim_due(now: datetime, limit: int) -> list[tuple[str, int]]:
    """Claim due monitors: each gets a new claim number, its next due time and the check counted.

    Locked rows are skipped, so any number of schedulers can claim at once without overlap. The claim
    is the only write an unchanged (quiet) check makes; a lost message leaves the monitor to be
    claimed again at that next due time.
    """
    with database.atomic(*_immediate()):
        query = (Monitor.select(Monitor.id, Monitor.claim_seq, Monitor.interval_seconds, Monitor.source)
                 .where((Monitor.status == ACTIVE) & Monitor.polled & (Monitor.next_check_at <= now)
                        & (Monitor.expires_at > now))
                 # monitors due at the same moment by source: a limit then splits no url's monitors but the last
                 # one's (they share one fetch and a quiet outcome, tasks/checks.same_inputs); a tie is common, as
                 # one url's monitors fall due on its slot (engine/schedule.toward_slot) and a backlog is all due
                 .order_by(Monitor.next_check_at, Monitor.source).limit(limit))
        if database.for_update:
            query = query.for_update(skip_locked=True)
        rows = list(query.tuples())
        sources = {row[0]: _as_dict(row[3]) for row in rows}
        keys = {monitor_id: fetch_key(source) for monitor_id, source in sources.items()}
        if rows:  # monitors of one url are steered onto its slot, so they are claimed together (engine/schedule)
            _mark_claimed(now, [(row[0], next_check_at(now, row[2], slot=keys[row[0]] or None,
                                                       never_early=sources[row[0]].get("type") == "tool"))
                                for row in rows])
    rows.sort(key=lambda row: claim_order(sources[row[0]]))  # one url's monitors in one batch: one shared fetch
    return [Claim(row[0], row[1] + 1, keys[row[0]], bool(sources[row[0]].get("render"))) for row in rows]


def claim_now(monitor_id: str, now: datetime) -> Claim | None:
    """Claim one active polled monitor for a check at once ("Check now"), as the scheduler would: a new claim
    number, the check counted, and its next due time an interval from now. None when it is not active and polled
    any more (paused, ended meanwhile)."""
    with database.atomic(*_immediate()):
        query = (Monitor.select(Monitor.interval_seconds, Monitor.source)
                 .where((Monitor.id == monitor_id) & (Monitor.status == ACTIVE) & Monitor.polled))
        row = (query.for_update() if database.for_update else query).tuples().first()
        if row is None:
            return None
        source = _as_dict(row[1])
        key = fetch_key(source)
        _mark_claimed(now, [(monitor_id, next_check_at(now, row[0], slot=key or None,
                                                       never_early=source.get("type") == "tool"))])
        seq = Monitor.select(Monitor.claim_seq).where(Monitor.id == monitor_id).scalar()
    return Claim(monitor_id, seq, key, bool(source.get("render")))


class Claim(tuple):
    """A claim as (monitor id, claim number), the pair a check message carries; `key` is the url whose fetch it
    may share with the claims next to it, or "" (engine/shared_fetch.fetch_key), so tasks/checks.batches can size
    messages by the fetches they hold; `rendered`, a page rendered in a browser, whose check goes to the browser
    queue (tasks/checks.send_claims)."""

    def __new__(cls, monitor_id: str, seq: int, key: str = "", rendered: bool = False):
        claim = super().__new__(cls, (monitor_id, seq))
        claim.key = key
        claim.rendered = rendered
        return claim


def _as_dict(source) -> dict:
    """A JSON column as selected in a tuple: text (SQLite, and PostgreSQL's text column) or already parsed."""
    return source if isinstance(source, dict) else json.loads(source or "{}")


def _mark_claimed(now: datetime, next_times: list[tuple[str, datetime]]) -> None:
    """One UPDATE for the whole batch, each row with its own jittered next due time."""
    p = database.param
    values = ", ".join([f"({p}, {p})"] * len(next_times))
    params = [now] + [value for pair in next_times for value in pair]
    database.execute_sql(
        "UPDATE monitors SET claim_seq = claim_seq + 1, check_count = check_count + 1, "
        f"prev_checked_at = last_checked_at, last_checked_at = {p}, next_check_at = v.column2 "
        f"FROM (VALUES {values}) AS v "
        "WHERE monitors.id = v.column1", params)


def oldest_due(now: datetime) -> datetime | None:
    """When the most overdue claimable monitor fell due (the scheduler's lag), or None: one read of the
    (status, next_check_at) index, the claim's own conditions."""
    return (Monitor.select(Monitor.next_check_at)
            .where((Monitor.status == ACTIVE) & Monitor.polled & (Monitor.next_check_at <= now)
                   & (Monitor.expires_at > now))
            .order_by(Monitor.next_check_at).limit(1).scalar())


def release(claims: list[tuple[str, int]], now: datetime) -> None:
    """Undo claims whose check could not be queued (Redis down): due again at once, and not counted.

    Only claims still current are released; prev_checked_at keeps the claim's value.
    """
    p = database.param
    for monitor_id, seq in claims:
        database.execute_sql(
            f"UPDATE monitors SET check_count = check_count - 1, last_checked_at = prev_checked_at, "
            f"next_check_at = {p} WHERE id = {p} AND claim_seq = {p}", (now, monitor_id, seq))


@dataclass
class Claimed:
    """What a check needs of a claimed monitor, read without building a model row."""
    id: str
    claim_seq: int
    user_id: int
    conversation_external_id: str
    status: str
    #: source and check as stored: parsed only when asked for (a quiet check of a page needs neither dict), and
    #: the key under which tasks/checks keeps their specs
    source_text: str
    check_text: str
    raw_hash: str
    content_hash: str
    #: the check's state as stored, when it is at most STATE_INLINE_CHARS; a larger one (a change check keeps the
    #: page's text) is read only when state() is asked for, which a quiet check never does
    state_json: str | None
    last_error: str
    failure_count: int
    check_count: int
    last_checked_at: datetime | None
    wakes_left: int
    unreachable_since: datetime | None
    prev_checked_at: datetime | None
    last_changed_at: datetime | None
    interval_seconds: int = 900
    etag: str = ""
    last_modified: str = ""
    #: whether the monitor has a state at all (a baseline was taken), inline or not
    has_state: bool = False

    @functools.cached_property
    def source(self) -> dict:
        return json.loads(self.source_text)

    @functools.cached_property
    def check(self) -> dict:
        return json.loads(self.check_text)

    def state(self) -> dict | None:
        if not self.has_state:
            return None
        return json.loads(self.state_json if self.state_json is not None else self._stored_state)

    @functools.cached_property
    def _stored_state(self) -> str:
        return database.execute_sql(f"SELECT check_state FROM monitors WHERE id = {database.param}",
                                    (self.id,)).fetchone()[0] or "null"


#: a state longer than this stays out of the claim read (Claimed.state_json): a quiet check does not read it, and
#: a change check's (the page's text, kilobytes) was most of the bytes the read moved
STATE_INLINE_CHARS = 1024


#: The claim read. A source and check as stored are kilobytes that many claimed monitors may hold alike, with the
#: same digests of the page (monitors of one page, tasks/checks.same_inputs): the first row of each such group (the
#: lowest id) carries them, the others only that monitor's id, and share its strings. That was about a third of
#: what such a row cost to read, and their hashes and comparisons in a batch are then each done once.
_SHARED = "CASE WHEN first_value(m.id) OVER same = m.id THEN {} END"
_CLAIMED_SQL = (
    "SELECT m.id, m.claim_seq, m.user_id, c.external_id, m.status, "
    + ", ".join(_SHARED.format(column) for column in ("m.source", 'm."check"', "m.raw_hash", "m.content_hash"))
    + f", CASE WHEN length(m.check_state) <= {STATE_INLINE_CHARS} THEN m.check_state END, "
    "m.last_error, m.failure_count, m.check_count, m.last_checked_at, "
    "m.max_wakes - m.wakes_used, m.unreachable_since, m.prev_checked_at, m.last_changed_at, m.interval_seconds, "
    "m.etag, m.last_modified, m.check_state IS NOT NULL, first_value(m.id) OVER same "
    "FROM monitors m JOIN conversations c ON c.id = m.conversation_id "
    "WHERE m.status = 'active' AND {ids} "
    'WINDOW same AS (PARTITION BY m.source, m."check", m.raw_hash, m.content_hash ORDER BY m.id)')


def load_claimed(claims: list[tuple[str, int]]) -> list[Claimed]:
    """The claimed monitors whose claims are still current and active, in one query, in the order of `claims`
    (the scheduler's, by url: monitors of one url are checked one after another, so they share its fetch and the
    digest of its body)."""
    wanted = dict(claims)
    if not wanted:
        return []
    on_postgres = isinstance(database.obj, peewee.PostgresqlDatabase)
    if on_postgres:
        # the ids as one parameter: psycopg2 quotes each parameter on its own, ~1 µs apiece (ids hold no comma)
        sql, params = _CLAIMED_SQL.format(ids="m.id = ANY(string_to_array(%s, ','))"), [",".join(wanted)]
    else:
        sql, params = _CLAIMED_SQL.format(ids=f"m.id IN ({', '.join([database.param] * len(wanted))})"), list(wanted)
    rows = database.execute_sql(sql, params).fetchall()
    shared = {row[0]: row[5:9] for row in rows if row[5] is not None}  # by the id of its group's first row
    found = {}
    for row in rows:
        if row[1] == wanted[row[0]]:
            if not on_postgres:  # SQLite hands timestamps back as text; PostgreSQL's rows hold datetimes already
                row = [*row[:13], *[as_time(value) for value in row[13:18]], *row[18:]]  # row[14]: a number
            found[row[0]] = Claimed(*row[:5], *shared[row[22]], *row[9:14], max(row[14], 0), *row[15:21],
                                    bool(row[21]))
    return [found[monitor_id] for monitor_id in wanted if monitor_id in found]


def as_time(value) -> datetime | None:
    """SQLite hands timestamps back as text, PostgreSQL as datetimes (a number is left alone)."""
    return value if value is None or not isinstance(value, str) else datetime.fromisoformat(value)


def _immediate() -> tuple:
    return ("IMMEDIATE",) if isinstance(database.obj, peewee.SqliteDatabase) else ()

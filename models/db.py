"""The database, bound late from a URL; connections are opened around each unit of work."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import peewee
from playhouse.db_url import parse
from playhouse.pool import MaxConnectionsExceeded, PooledPostgresqlDatabase, PooledSqliteDatabase
from psycopg2.extensions import TRANSACTION_STATUS_UNKNOWN

#: The one database handle every model uses; `bind(url)` points it at a real database.
database = peewee.DatabaseProxy()

#: how long a unit of work waits for SQLite's write lock (this process's writers queue on a lock of their own
#: first; this covers another process, such as a CLI command, holding the file's lock)
SQLITE_WRITE_WAIT_SECONDS = 30.0
_SQLITE_PRAGMAS = {"journal_mode": "wal", "busy_timeout": int(SQLITE_WRITE_WAIT_SECONDS * 1000), "foreign_keys": 1,
                   "synchronous": "normal"}


def bind(url: str, max_connections: int = 32) -> peewee.Database:
    """Connect the proxy to `url` (sqlite:///… or postgresql://…); nothing is opened yet. `max_connections`
    bounds PostgreSQL's pool (DATABASE_MAX_CONNECTIONS)."""
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        db = EmbeddedSqlite(url[len("sqlite:///"):], pragmas=_SQLITE_PRAGMAS, autoconnect=False,
                            check_same_thread=False)
    else:
        # connect_timeout: a host that drops packets fails a connect in 10 s instead of hanging it (a URL's
        # ?connect_timeout= wins)
        db = PooledPostgres(**{"connect_timeout": 10, **parse(_plain_postgres(url))}, autoconnect=False,
                            max_connections=max_connections, stale_timeout=300, timeout=10)
    database.initialize(db)
    return db


class EmbeddedSqlite(PooledSqliteDatabase):
    """Embedded mode's database: SQLite, written by one transaction at a time, and every writer waits its turn.

    SQLite has one writer per file. A deferred transaction (plain BEGIN) that reads and then writes cannot wait
    for the write lock: when another connection wrote meanwhile it fails at once with "database is locked",
    whatever the busy timeout. So every transaction here begins IMMEDIATE (it takes the write lock at BEGIN,
    where SQLite's busy handler does wait), and this process's transactions first queue on a lock of their own,
    so its threads (web requests, the in-process worker, the scheduler) take turns in order instead of polling
    the file's lock. A transaction must therefore hold no slow work (a fetch, a judge call, a regex over a body,
    CEL): that is done before BEGIN, and the write checks that what it read is still current.

    Connections are pooled, as PostgreSQL's are: opening one (and setting its pragmas, and SQLite reading the
    schema on its first statement) cost about 0.5 ms of CPU, as much as a runner's whole POST of records did.
    One per thread at most is in use; a connection handed back inside a transaction is rolled back by the pool.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, lock_type="IMMEDIATE", max_connections=None, **kwargs)
        self._writer = threading.Lock()
        self._holds = threading.local()  # whether this thread's transaction holds `_writer`

    def begin(self, lock_type=None):
        now = getattr(self._holds, "without_waiting", False)
        if now and not self._writer.acquire(blocking=False):
            raise peewee.OperationalError("database is locked: another writer's turn (not waited for)")
        if not now and not self._writer.acquire(timeout=SQLITE_WRITE_WAIT_SECONDS):
            raise peewee.OperationalError(f"database is locked: no turn to write in {SQLITE_WRITE_WAIT_SECONDS:.0f} s")
        self._holds.writer = True
        try:
            if now:  # nor for another process holding the file: SQLite's busy handler would wait (the timeout is
                # put back when the transaction ends, before the pooled connection serves anyone else)
                self._holds.busy_cut = self._state.conn
                self._state.conn.execute("PRAGMA busy_timeout = 0")
            super().begin(lock_type)
        except BaseException:
            self._let_go()
            raise

    def commit(self):
        try:
            super().commit()
        finally:
            self._let_go()

    def rollback(self):
        try:
            super().rollback()
        finally:
            self._let_go()

    def _close(self, conn, close_conn=False):
        self._let_go()  # a connection closed mid-transaction (its thread failed) leaves no writer waiting on it
        super()._close(conn, close_conn)

    @contextmanager
    def without_waiting(self):
        """This thread's units of work inside: a transaction that would wait for the write lock (this process's
        turn, or another process holding the file) fails at once with "database is locked" instead. For work on
        the web's event loop, which must never block (app/runner_records.py); the caller then hands it to a
        thread, where it waits its turn as usual. Open the connection inside."""
        self._holds.without_waiting = True
        try:
            yield
        finally:
            self._holds.without_waiting = False

    def _let_go(self) -> None:
        conn = getattr(self._holds, "busy_cut", None)
        if conn is not None:
            self._holds.busy_cut = None
            try:
                conn.execute(f"PRAGMA busy_timeout = {_SQLITE_PRAGMAS['busy_timeout']}")
            except sqlite3.Error:  # a connection that broke is not handed out again
                pass
        if getattr(self._holds, "writer", False):
            self._holds.writer = False
            self._writer.release()


def locked(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's "database is locked" (or busy): the same unit of work can simply run again."""
    text = str(exc)
    return isinstance(exc, peewee.OperationalError) and ("database is locked" in text or "database is busy" in text)


def retry_locked(work, *args, deadline_seconds: float = 120.0):
    """`work(*args)`, run again (with a short pause) while SQLite answers "database is locked", up to the deadline.
    For units of work that are idempotent (a runner's numbered records, a result): the caller never sees the lock."""
    give_up = time.monotonic() + deadline_seconds
    pause = 0.05
    while True:
        try:
            return work(*args)
        except peewee.OperationalError as exc:
            if not locked(exc) or time.monotonic() + pause > give_up:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


class PooledPostgres(PooledPostgresqlDatabase):
    """Connections are opened around each unit of work, so they come from a pool. The pool's health
    check is a round trip per checkout; a connection back from work moments ago skips it."""

    #: a connection idle longer than this is pinged before it is handed out again
    PING_AFTER_IDLE_SECONDS = 5.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._checked_in: dict[int, float] = {}

    # A transaction's BEGIN, and the statements of it whose answer nobody reads (`later`), go to the server with
    # the next statement, in one round trip: psycopg2 sends "BEGIN; EXECUTE …" as one query and hands back the
    # last statement's answer. A runner's POST of records was seven round trips (BEGIN, four statements, COMMIT)
    # and is three; each is a wait and a wake of the web's thread, which at a stream's pace (a POST every 200 ms,
    # caches cold in between) cost more CPU than the statement itself (issue 27). A statement sent later fails
    # where it is sent, inside the same transaction, which then rolls back as a whole, as before.

    def begin(self, isolation_level=None):
        if isolation_level is not None or self._isolation_level:
            return super().begin(isolation_level)
        self._state.pending = [("BEGIN", ())]

    def later(self, sql: str, params: tuple) -> None:
        """Run `sql` (with at least one parameter) in this transaction, sent with the next statement or the
        COMMIT; outside a transaction it runs now."""
        pending = getattr(self._state, "pending", None)
        if pending is None or not params:  # not in a transaction begun here
            self.execute_sql(sql, params)
            return
        pending.append((sql, params))

    def execute_sql(self, sql, params=None):
        try:
            return self._execute_with_pending(sql, params)
        except peewee.DatabaseError as exc:
            _prepared_gone(self._state.conn, exc)
            raise

    def _execute_with_pending(self, sql, params):
        pending = getattr(self._state, "pending", None)
        if pending:
            self._state.pending = []  # in the transaction from now on: what comes later waits again
            if params or all(not p for _, p in pending):  # literal %s are only safe where parameters are
                return super().execute_sql(*_joined([*pending, (sql, params or ())]))
            super().execute_sql(*_joined(pending))
        return super().execute_sql(sql, params)

    def commit(self):
        pending = getattr(self._state, "pending", None)
        self._state.pending = None
        if pending == [("BEGIN", ())]:  # nothing ran: nothing to commit
            return None
        if pending:
            return self.execute_sql(*_joined([*pending, ("COMMIT", ())]))
        return super().commit()

    def rollback(self):
        pending = getattr(self._state, "pending", None)
        self._state.pending = None
        if pending and pending[0][0] == "BEGIN":  # never sent: the server has nothing to roll back
            return None
        return super().rollback()

    def _close(self, conn, close_conn=False):
        self._state.pending = None
        broken = _broken(conn)
        self._checked_in[id(conn)] = time.monotonic()
        super()._close(conn, close_conn)
        if broken:
            # The server went away under this connection (a restart, a failover), so it went away under the idle
            # ones too, and those used moments ago would be handed out without a ping: drop them all now.
            self.close_idle()

    def _close_raw(self, conn):
        self._checked_in.pop(id(conn), None)
        super()._close_raw(conn)

    def _is_closed(self, conn):
        if time.monotonic() - self._checked_in.get(id(conn), 0.0) < self.PING_AFTER_IDLE_SECONDS:
            return bool(conn.closed)
        return super()._is_closed(conn)


def _joined(statements: list[tuple[str, tuple]]) -> tuple[str, tuple]:
    """Statements as one query for psycopg2: their texts joined, their parameters in order."""
    return "; ".join(text for text, _ in statements), tuple(value for _, params in statements for value in params)


#: called with a connection whose prepared statements the server no longer has (models/prepared.py registers)
ON_PREPARED_GONE: list = []


def _prepared_gone(conn, exc: BaseException) -> None:
    """A statement sent `later` failed where it was sent, away from models/prepared.execute, which would have seen
    that the server lost its prepared statements (a pooler moved the connection): it is told here instead."""
    if getattr(getattr(exc, "orig", None), "pgcode", None) == "26000":
        for forget in ON_PREPARED_GONE:
            forget(conn)


def _broken(conn) -> bool:
    """The driver saw the connection die (psycopg2 marks it closed, or its state unknown)."""
    try:
        return bool(conn.closed) or conn.get_transaction_status() == TRANSACTION_STATUS_UNKNOWN
    except Exception:  # noqa: BLE001 — a connection that cannot even say so is broken too
        return True


#: what a database that is down, restarting or out of connections raises: nothing is wrong with the request,
#: it can be tried again shortly (web answers 503, actors retry, the scheduler tries next tick)
UNAVAILABLE = (peewee.OperationalError, peewee.InterfaceError, MaxConnectionsExceeded)


def _plain_postgres(url: str) -> str:
    return "postgresql://" + url[len("postgres://"):] if url.startswith("postgres://") else url


@contextmanager
def connection():
    """Open this thread's connection for one unit of work, and close it after."""
    opened = database.connect(reuse_if_open=True)
    try:
        yield database
    finally:
        if opened:
            database.close()


def write_transaction():
    """A transaction that reads, then writes. On SQLite it takes the write lock at BEGIN (IMMEDIATE): a deferred
    one that reads first cannot wait for the lock when it comes to write, and fails at once with "database is
    locked" while the in-process worker writes. PostgreSQL locks rows as it goes."""
    return database.atomic("IMMEDIATE") if isinstance(database.obj, peewee.SqliteDatabase) else database.atomic()


def utcnow() -> datetime:
    """Now, as the naive UTC datetime the tables store."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def iso(value: datetime | None) -> str | None:
    if not value:
        return None
    if value.tzinfo is None:  # the tables' naive UTC (every quiet check's event formats one)
        return value.isoformat() + "Z"
    return value.replace(tzinfo=timezone.utc).isoformat().replace("+00:00", "Z")


class JSONField(peewee.TextField):
    """JSON stored as text, the same on SQLite and PostgreSQL."""

    def db_value(self, value):
        return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)

    def python_value(self, value):
        return None if value is None else json.loads(value)


class BaseModel(peewee.Model):
    class Meta:
        database = database
        legacy_table_names = False

"""Server-side prepared statements for the few queries on a hot path, on PostgreSQL.

psycopg2 sends each statement as text, so PostgreSQL plans it every time. For a delivery's one statement
(a CTE over three tables) planning cost more than running it. Each pooled connection prepares the
statement the first time it runs it, and executes the prepared plan from then on.

Behind a pooler that moves statements between server connections (PgBouncer in transaction mode), a
prepared statement can be missing or already there; the statement then simply runs as plain text.
"""

from __future__ import annotations

import functools
import re
import weakref

import peewee

from models.db import ON_PREPARED_GONE, database

#: pgcodes of "no such prepared statement" and "it exists already"
_POOLER_CODES = {"26000", "42P05"}
_EXISTS = "42P05"
_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
ON_PREPARED_GONE.append(lambda conn: _prepared.pop(conn, None))


def execute(name: str, sql: str, params: tuple, later: bool = False):
    """Run `sql` (psycopg2 %s placeholders) with `params`, as the prepared statement `name`; a cursor. `later`:
    its answer is not wanted, so inside a transaction it goes with the next statement (models/db.PooledPostgres)
    and this returns None."""
    conn = database.connection()
    runs = _prepared.get(conn)
    if runs is None:
        runs = _prepared[conn] = {}
    try:
        done = runs.get(name)
        if done is None or replan(done):
            if done is not None:
                database.execute_sql(f"DEALLOCATE {name}")
            database.execute_sql(f"PREPARE {name} AS {_numbered(sql)}")
        runs[name] = (done or 0) + 1
        if later and params:
            return database.later(_execute_sql(name, len(params)), params)
        return database.execute_sql(_execute_sql(name, len(params)), params)
    except peewee.DatabaseError as exc:
        code = getattr(getattr(exc, "orig", None), "pgcode", None)
        if code not in _POOLER_CODES:
            raise
        if code == _EXISTS:
            runs[name] = 1  # prepared already on this server connection: executed from its next use on
        else:
            runs.clear()  # DISCARD ALL or DEALLOCATE ALL drops them all: each is prepared again on its next use
        return database.execute_sql(sql, params)


#: a statement is prepared again at its 64th, 128th, 256th … run on a connection, and from 65,536 on at every
#: 65,536th: PostgreSQL keeps the generic plan it made from the tables as they were then, and the plans of a
#: fresh install, made while its tables held a few rows, read whole tables once they had grown (the web's
#: delivery statement scanned every page of `monitors` on each delivery; a batch's read, every delivery)
REPLAN_FROM, REPLAN_EVERY = 64, 65_536


def replan(runs: int) -> bool:
    """Whether a statement run `runs` times on this connection is prepared again before its next run."""
    if runs >= REPLAN_EVERY:
        return runs % REPLAN_EVERY == 0
    return runs >= REPLAN_FROM and runs & (runs - 1) == 0


@functools.cache
def _execute_sql(name: str, count: int) -> str:
    return f"EXECUTE {name} ({', '.join(['%s'] * count)})"


def _numbered(sql: str) -> str:
    """%s placeholders as PREPARE's $1, $2, …"""
    count = iter(range(1, sql.count("%s") + 1))
    return re.sub(r"%s", lambda _: f"${next(count)}", sql)

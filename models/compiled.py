"""Queries whose SQL text is built once, for the worker's hot paths.

peewee builds a query's SQL anew every time it runs. For a monitor (thirty-odd columns) joined to its
conversation that took about 0.8 ms of CPU, more than PostgreSQL spent running it, and a trigger delivery
ran several such queries. A `Compiled` query is built once per kind of database with placeholder
parameters; each call runs that same text with its own values, and its rows come back as the model
instances (joins included) the peewee query would have made.

Parameters go to the driver as they are, as peewee passes them: ints, strings and datetimes. A query whose
parameters need a field's conversion (JSON, say) does not belong here. Rows are mapped by the query's own
cursor wrapper (`_get_cursor_wrapper`, internal to peewee): tests/integration/test_compiled.py checks the
models it makes on both databases.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import peewee

from models import prepared
from models.db import database


class Compiled:
    """`build(*params)` returns the query; it is called once per database kind, with placeholder nodes."""

    def __init__(self, build: Callable[..., peewee.Query]) -> None:
        self._build = build
        self._arity = build.__code__.co_argcount
        self._built: dict[type, tuple[peewee.Query, str, list[int]]] = {}
        self._lock = threading.Lock()

    def first(self, *params):
        """The first row (a model instance), or None."""
        query, cursor = self._execute(params)
        for row in query._get_cursor_wrapper(cursor).iterator():  # peewee's own row-to-model mapping
            return row
        return None

    def scalar(self, *params):
        """The first column of the first row: a count, say."""
        row = self._execute(params)[1].fetchone()
        return None if row is None else row[0]

    def rowcount(self, *params) -> int:
        """Run an UPDATE or DELETE; the number of rows it changed."""
        return self._execute(params)[1].rowcount

    def inserted_id(self, *params):
        """Run an INSERT; the id it returned (RETURNING, on PostgreSQL), or None for a row a conflict skipped.
        Without RETURNING (SQLite) the cursor's last row id."""
        cursor = self._execute(params)[1]
        if cursor.description is None:
            return cursor.lastrowid
        row = cursor.fetchone()
        return None if row is None else row[0]

    def _execute(self, params: tuple):
        query, sql, order = self._query()
        return query, database.execute_sql(sql, [params[i] for i in order])

    def _query(self) -> tuple[peewee.Query, str, list[int]]:
        kind = type(database.obj)  # SQLite and PostgreSQL mark parameters differently
        built = self._built.get(kind)
        if built is None:
            with self._lock:
                built = self._built.get(kind) or self._compile(kind)
        return built

    def _compile(self, kind: type) -> tuple[peewee.Query, str, list[int]]:
        marks = [f"\x00compiled parameter {i}\x00" for i in range(self._arity)]
        query = self._build(*[peewee.Value(mark, converter=False) for mark in marks])
        sql, values = query.sql()
        if not all(value in marks for value in values):
            raise ValueError(f"a compiled query takes only its parameters as values: {sql}")
        built = self._built[kind] = (query, sql, [marks.index(value) for value in values])
        return built


class Prepared(Compiled):
    """A Compiled query that PostgreSQL also plans only once per connection (models/prepared.py), for the
    worker's per-delivery statements: planning a join of four tables cost PostgreSQL more than running it.
    Its rows are mapped with the column resolution kept too (`rows`). SQLite runs the text as it is."""

    def __init__(self, name: str, build: Callable[..., peewee.Query]) -> None:
        super().__init__(build)
        self._name = name
        self._resolved: dict[type, dict] = {}

    def first(self, *params):
        """The first row, mapped as `rows` maps them (the column resolution kept): the runner's records look up a
        device, a run and its monitor by key on every POST."""
        rows = self.rows(*params)
        return rows[0] if rows else None

    def rows(self, *params) -> list:
        """Every row, as the model instances (joins included) `first` makes. peewee resolves the cursor's columns
        against the query's models on every call (~40% of the mapping's CPU for a monitor with its joins); the
        text never changes, so neither does the resolution, and it is kept per kind of database."""
        query, cursor = self._execute(params)
        wrapper = query._get_cursor_wrapper(cursor)
        resolved = self._resolved.get(type(database.obj))
        if resolved is None:
            before = set(vars(wrapper))
            wrapper.initialize()
            resolved = self._resolved[type(database.obj)] = {key: value for key, value in vars(wrapper).items()
                                                             if key not in before}
        else:
            vars(wrapper).update(resolved)
        return [wrapper.process_row(row) for row in cursor.fetchall()]

    def later(self, *params) -> None:
        """Run a write whose answer is not wanted: on PostgreSQL, inside a transaction, it is sent with the
        transaction's next statement (one round trip fewer); elsewhere now."""
        _, sql, order = self._query()
        run_prepared(self._name, sql, tuple(params[i] for i in order), later=True)

    def _execute(self, params: tuple):
        query, sql, order = self._query()
        return query, run_prepared(self._name, sql, tuple(params[i] for i in order))


def run_prepared(name: str, sql: str, params: tuple, later: bool = False):
    """Run `sql` as the prepared statement `name` on PostgreSQL, as plain text elsewhere; the cursor (None for a
    statement sent `later`, models/prepared.execute)."""
    if isinstance(database.obj, peewee.PostgresqlDatabase):
        return prepared.execute(name, sql, params, later)
    return database.execute_sql(sql, params)


def with_id(insert: peewee.Insert) -> peewee.Insert:
    """An INSERT that hands back its new row's id, where the database can say it in the statement."""
    return insert.returning(insert.model.id) if database.returning_clause else insert

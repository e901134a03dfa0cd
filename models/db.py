"""The database, bound late from a URL; connections are opened around each unit of work."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import peewee
from playhouse.db_url import connect

#: The one database handle every model uses; `bind(url)` points it at a real database.
database = peewee.DatabaseProxy()

_SQLITE_PRAGMAS = {"journal_mode": "wal", "busy_timeout": 10000, "foreign_keys": 1,
                   "synchronous": "normal"}


def bind(url: str) -> peewee.Database:
    """Connect the proxy to `url` (sqlite:///… or postgresql://…); nothing is opened yet."""
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        db = connect(url, pragmas=_SQLITE_PRAGMAS, autoconnect=False, check_same_thread=False)
    else:
        db = connect(_pooled(url), autoconnect=False, max_connections=32,
                     stale_timeout=300, timeout=10)
    database.initialize(db)
    return db


def _pooled(url: str) -> str:
    """Connections are opened around each unit of work, so PostgreSQL ones come from a pool."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+pool://" + url[len(scheme):]
    return url


@contextmanager
def connection():
    """Open this thread's connection for one unit of work, and close it after."""
    opened = database.connect(reuse_if_open=True)
    try:
        yield database
    finally:
        if opened:
            database.close()


def utcnow() -> datetime:
    """Now, as the naive UTC datetime the tables store."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def iso(value: datetime | None) -> str | None:
    return value.replace(tzinfo=timezone.utc).isoformat().replace("+00:00", "Z") if value else None


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

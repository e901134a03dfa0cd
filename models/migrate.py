"""Applies the numbered migrations in order, once each; safe to run again and from many machines."""

from __future__ import annotations

import importlib
import pkgutil

import peewee

from models import migrations
from models.db import database, utcnow

#: Any constant works; it keeps two `vigil migrate` runs on PostgreSQL from racing.
_PG_LOCK_KEY = 0x76696769


def available() -> list[str]:
    names = [m.name for m in pkgutil.iter_modules(migrations.__path__) if m.name[:1] == "m"]
    return sorted(names)


def migrate() -> list[str]:
    """Apply what is missing; returns the names applied now."""
    applied_now = []
    with database.atomic():
        _lock()
        _ensure_ledger()
        done = {row[0] for row in database.execute_sql("SELECT name FROM schema_migrations")}
        for name in available():
            if name in done:
                continue
            importlib.import_module(f"models.migrations.{name}").up(database.obj)
            database.execute_sql("INSERT INTO schema_migrations (name, applied_at) VALUES (%s, %s)"
                                 .replace("%s", database.param), (name, utcnow()))
            applied_now.append(name)
    return applied_now


def pending() -> list[str]:
    _ensure_ledger()
    done = {row[0] for row in database.execute_sql("SELECT name FROM schema_migrations")}
    return [name for name in available() if name not in done]


def _ensure_ledger() -> None:
    database.execute_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name VARCHAR(100) PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")


def _lock() -> None:
    if isinstance(database.obj, peewee.PostgresqlDatabase):
        database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_PG_LOCK_KEY,))

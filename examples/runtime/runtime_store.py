"""The reference runtime's state: conversations and received wakes in one SQLite file, and private files."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path


class Store:
    """Conversations and received wakes in one SQLite file; one connection, one lock.

    A wake is stored (its webhook-id the primary key: the dedupe set) before the webhook is answered, and marked
    done in the same transaction that saves the turn it started, so a crash in between runs that turn again on
    the next start, and a redelivery never runs a second one.
    """

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript("""
            CREATE TABLE IF NOT EXISTS conversations (
                id TEXT PRIMARY KEY, messages TEXT NOT NULL, updated_at TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS wakes (
                webhook_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, message TEXT NOT NULL,
                received_at TEXT NOT NULL, done_at TEXT);
        """)
        os.chmod(path, 0o600)

    def messages(self, conversation_id: str) -> list[dict] | None:
        with self._lock:
            row = self._db.execute("SELECT messages FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return None if row is None else json.loads(row[0])

    def save(self, conversation_id: str, messages: list[dict], done_wake: str | None = None) -> None:
        now = _now()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT INTO conversations (id, messages, updated_at) VALUES (?, ?, ?) "
                                 "ON CONFLICT (id) DO UPDATE SET messages = excluded.messages, "
                                 "updated_at = excluded.updated_at", (conversation_id, json.dumps(messages), now))
                if done_wake is not None:
                    self._db.execute("UPDATE wakes SET done_at = ? WHERE webhook_id = ?", (now, done_wake))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def add_wake(self, webhook_id: str, conversation_id: str, message: dict) -> bool:
        """False when this webhook-id was received before (a redelivery)."""
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO wakes (webhook_id, conversation_id, message, received_at) VALUES (?, ?, ?, ?)",
                (webhook_id, conversation_id, json.dumps(message), _now()))
        return cursor.rowcount == 1

    def pending_wakes(self, conversation_id: str | None = None) -> list[tuple[str, str, dict]]:
        """(webhook_id, conversation_id, message) of wakes whose turn has not run, oldest first."""
        query = "SELECT webhook_id, conversation_id, message FROM wakes WHERE done_at IS NULL"
        args: tuple = ()
        if conversation_id is not None:
            query, args = query + " AND conversation_id = ?", (conversation_id,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY rowid", args).fetchall()
        return [(webhook_id, cid, json.loads(message)) for webhook_id, cid, message in rows]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def write_private(path: Path, data: dict) -> None:
    """Written whole (a temporary file renamed over it), readable by this user only."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)

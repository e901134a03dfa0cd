"""The on-disk spool (SQLite, WAL): the runs this runner started and their records not yet acknowledged.

A record and the run's read offset are written in one transaction, so a runner killed at any point resumes with
neither a lost nor a doubled line. Every method is one short transaction; one connection is shared by the
runner's threads under a lock.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

#: pending records past which a stream's new lines are dropped (and counted, for a `dropped N lines` notice)
PENDING_CAP = 20_000

#: run statuses: claimed but the command not started yet; its command running; its last record (the `exit`
#: record, or a polled run's result) spooled but not acknowledged; finished
STARTING, RUNNING, ENDED, DONE = "starting", "running", "ended", "done"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    pid INTEGER,
    pgid INTEGER,
    identity TEXT,
    output TEXT,
    read_offset INTEGER NOT NULL DEFAULT 0,
    next_seq INTEGER NOT NULL DEFAULT 1,
    lines INTEGER NOT NULL DEFAULT 0,
    dropped INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"""

#: the run columns `append` may change alongside its records
_CHANGEABLE = frozenset({"status", "pid", "pgid", "identity", "read_offset", "lines", "dropped", "result"})


@dataclass(frozen=True)
class Run:
    """One row of `runs`."""

    run_id: str
    kind: str
    status: str
    pid: Optional[int]
    pgid: Optional[int]
    identity: Optional[str]
    output: Optional[str]
    read_offset: int
    next_seq: int
    lines: int
    dropped: int
    result: Optional[str]
    created: float


_RUN_COLUMNS = ", ".join(Run.__dataclass_fields__)


class Spool:
    """The spool database at `path` (created if missing)."""

    def __init__(self, path: str, cap: int = PENDING_CAP):
        self.cap = cap
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the connection; later calls raise sqlite3.ProgrammingError."""
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def claim(self, run_id: str, kind: str, now: float, output: Optional[str] = None) -> bool:
        """Record a run about to start; False if this run_id was seen before (a repeated assignment)."""
        with self._transaction() as db:
            cursor = db.execute("INSERT OR IGNORE INTO runs (run_id, kind, status, output, created) "
                                "VALUES (?, ?, ?, ?, ?)", (run_id, kind, STARTING, output, now))
            return cursor.rowcount == 1

    def append(self, run_id: str, records: list, **changes) -> int:
        """Number and store `records` and apply `changes` to the run in one transaction; the last seq used."""
        # a finished (or abandoned) run takes nothing: returns 0
        unknown = set(changes) - _CHANGEABLE
        if unknown:
            raise ValueError(f"not a run column: {', '.join(sorted(unknown))}")
        with self._transaction() as db:
            row = db.execute("SELECT next_seq, status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None or row[1] == DONE:
                return 0
            seq = row[0]
            for record in records:
                db.execute("INSERT INTO records (run_id, seq, body) VALUES (?, ?, ?)",
                           (run_id, seq, json.dumps(record, ensure_ascii=False)))
                seq += 1
            changes["next_seq"] = seq
            assignments = ", ".join(f"{column} = ?" for column in changes)
            db.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", (*changes.values(), run_id))
            return seq - 1

    def pending(self, run_id: str, limit: int = 500) -> list:
        """The run's unacknowledged records, oldest first, as (seq, record) pairs."""
        with self._lock:
            rows = self._db.execute("SELECT seq, body FROM records WHERE run_id = ? ORDER BY seq LIMIT ?",
                                    (run_id, limit)).fetchall()
        return [(seq, json.loads(body)) for seq, body in rows]

    def ack(self, run_id: str, upto: int) -> bool:
        """Forget the run's records up to seq `upto`; True when that finished the run (its last record acked)."""
        with self._transaction() as db:
            db.execute("DELETE FROM records WHERE run_id = ? AND seq <= ?", (run_id, upto))
            cursor = db.execute("UPDATE runs SET status = ? WHERE run_id = ? AND status = ? AND result IS NULL "
                                "AND next_seq <= ?", (DONE, run_id, ENDED, upto + 1))
            return cursor.rowcount == 1

    def replace(self, run_id: str, seq: int, record: dict) -> None:
        """Swap a pending record for another (one the server refused as too large, for a notice saying so)."""
        with self._transaction() as db:
            db.execute("UPDATE records SET body = ? WHERE run_id = ? AND seq = ?",
                       (json.dumps(record, ensure_ascii=False), run_id, seq))

    def finish(self, run_id: str) -> None:
        """Mark the run done and forget its pending records (its result was posted, or the server refused it)."""
        with self._transaction() as db:
            db.execute("DELETE FROM records WHERE run_id = ?", (run_id,))
            db.execute("UPDATE runs SET status = ? WHERE run_id = ?", (DONE, run_id))

    def run(self, run_id: str) -> Optional[Run]:
        """The run, or None."""
        with self._lock:
            row = self._db.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return Run(*row) if row else None

    def runs(self, *statuses: str) -> list:
        """Runs in any of `statuses`, oldest first."""
        marks = ", ".join("?" for _ in statuses)
        with self._lock:
            rows = self._db.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE status IN ({marks}) "
                                    "ORDER BY created, run_id", statuses).fetchall()
        return [Run(*row) for row in rows]

    def unsent(self) -> list:
        """Ids of runs with pending records, oldest run first."""
        with self._lock:
            rows = self._db.execute("SELECT runs.run_id FROM runs WHERE EXISTS (SELECT 1 FROM records "
                                    "WHERE records.run_id = runs.run_id) ORDER BY created, run_id").fetchall()
        return [row[0] for row in rows]

    def pending_count(self) -> int:
        """Records waiting for acknowledgement, over all runs."""
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    def full(self) -> bool:
        """Whether the spool holds `cap` pending records or more (new lines are then dropped and counted)."""
        return self.pending_count() >= self.cap

    def prune(self, before: float) -> int:
        """Forget finished runs created before `before`; how many."""
        with self._transaction() as db:
            return db.execute("DELETE FROM runs WHERE status = ? AND created < ?", (DONE, before)).rowcount

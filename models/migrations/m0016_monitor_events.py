"""The monitor page's evidence: each stored run keeps the check counter when it was written (the quiet checks
between two runs are counted from it, never written) and what the check found, in a JSON column."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("ALTER TABLE monitor_runs ADD COLUMN check_count INTEGER NOT NULL DEFAULT 0")
    db.execute_sql("ALTER TABLE monitor_runs ADD COLUMN data TEXT")

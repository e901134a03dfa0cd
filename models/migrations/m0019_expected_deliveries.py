"""Expected deliveries (issue 18): a trigger link's monitor keeps the deadline its next delivery must beat, since
when (and for how many windows) it has been missing, and when a delivery came back after a miss, so the
scheduler finds the silent ones and the ones to announce back with one indexed query each."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("ALTER TABLE monitors ADD COLUMN expect_due_at TIMESTAMP")
    db.execute_sql("ALTER TABLE monitors ADD COLUMN expect_missed_since TIMESTAMP")
    db.execute_sql("ALTER TABLE monitors ADD COLUMN expect_missed_count INTEGER NOT NULL DEFAULT 0")
    db.execute_sql("ALTER TABLE monitors ADD COLUMN expect_back_at TIMESTAMP")
    # partial: only the few monitors with an expect (or a back notice to write) are in them, on both databases;
    # by status first, so the deadlines of monitors that ended (never cleared) are not read on every tick
    db.execute_sql("CREATE INDEX monitor_expect_due_at ON monitors (status, expect_due_at) "
                   "WHERE expect_due_at IS NOT NULL")
    db.execute_sql("CREATE INDEX monitor_expect_back_at ON monitors (expect_back_at) WHERE expect_back_at IS NOT NULL")

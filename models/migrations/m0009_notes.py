"""A monitor's note (seed 001): what the agent wrote when it armed the monitor, replayed verbatim in its wakes."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("ALTER TABLE monitors ADD COLUMN note TEXT NOT NULL DEFAULT ''")

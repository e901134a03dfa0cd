"""Depth-1 chaining (seed 001): each monitor remembers the wake whose run armed it, and how deep that chain is."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("ALTER TABLE monitors ADD COLUMN parent_message_id INTEGER")
    db.execute_sql("ALTER TABLE monitors ADD COLUMN depth INTEGER NOT NULL DEFAULT 0")

"""Conditional GET: a monitor keeps the validators (ETag, Last-Modified) its source sent with the body its
raw_hash was taken from, and asks with them next time; a 304 is a quiet check with nothing read."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("ALTER TABLE monitors ADD COLUMN etag TEXT NOT NULL DEFAULT ''")
    db.execute_sql("ALTER TABLE monitors ADD COLUMN last_modified TEXT NOT NULL DEFAULT ''")

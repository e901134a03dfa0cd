"""Two indexes for the statements a delivery runs (issue 18, drain ÷ ingest): the hourly cap counts a monitor's
wakes since an hour ago, and the event prune finds a monitor's newest events by id. With an index on monitor_id
alone, each read every wake (or event) the monitor had kept. The two single-column indexes they replace were
prefixes of them (wakes also keep their unique (monitor_id, dedupe_key)), and each was one more index to write
per wake and per event."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("CREATE INDEX wake_monitor_id_created_at ON wakes (monitor_id, created_at)")
    db.execute_sql("DROP INDEX IF EXISTS wake_monitor_id")
    db.execute_sql("CREATE INDEX monitorrun_monitor_id_id ON monitor_runs (monitor_id, id)")
    db.execute_sql("DROP INDEX IF EXISTS monitorrun_monitor_id")

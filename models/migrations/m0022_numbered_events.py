"""A monitor's events are numbered (issue 18, the worker's drain): monitors.events_written counts them and each
carries its number (monitor_runs.seq), so the prune deletes those beyond MONITOR_EVENTS_KEPT by number, one row
down the (monitor_id, seq) index, instead of finding the kept-th newest by reading every event kept. Existing
events are numbered in the order they were written."""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("ALTER TABLE monitors ADD COLUMN events_written INTEGER NOT NULL DEFAULT 0")
    db.execute_sql("ALTER TABLE monitor_runs ADD COLUMN seq INTEGER")
    number_existing(db)
    db.execute_sql("CREATE INDEX monitorrun_monitor_id_seq ON monitor_runs (monitor_id, seq)")


def number_existing(db: peewee.Database) -> None:
    """Each monitor's events numbered 1, 2, … in the order they were written, and its count set to the last."""
    if isinstance(db, peewee.PostgresqlDatabase):
        db.execute_sql("UPDATE monitor_runs SET seq = numbered.n FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY "
                       "monitor_id ORDER BY id) AS n FROM monitor_runs) AS numbered WHERE monitor_runs.id = numbered.id")
    else:  # embedded: a laptop's few events; at most MONITOR_EVENTS_KEPT a monitor to count before each
        db.execute_sql("UPDATE monitor_runs SET seq = (SELECT COUNT(*) FROM monitor_runs earlier WHERE "
                       "earlier.monitor_id = monitor_runs.monitor_id AND earlier.id <= monitor_runs.id)")
    db.execute_sql("UPDATE monitors SET events_written = COALESCE((SELECT MAX(seq) FROM monitor_runs WHERE "
                   "monitor_runs.monitor_id = monitors.id), 0)")

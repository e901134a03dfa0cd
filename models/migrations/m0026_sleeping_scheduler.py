"""Indexes for a scheduler that sleeps until its next due time and stays flat at a million armed monitors (issue 32).

- monitor_due: the claim (models/claims.claim_due) and the scheduler's next-due read (models/due.py) ask for active
  polled monitors by next_check_at. On (status, next_check_at) the trigger links (never polled, their
  next_check_at is their expiry) sat in the same range: every claim stepped over those already past. Partial, so
  it holds only what the claim can take; it replaces (status, next_check_at), one index less to write per claim.
- command_run_open: the unfinished runs (a few), by status then deadline, for expire_runs, end_forgotten_stops
  and the next-due read; on (device, status) and (monitor, status) each read every run ever made.
- command_run_unchecked: finished polled results not processed yet (the sweep's), usually none.
- device_online: online devices by last seen, for mark_offline and the next-due read.
Both databases: SQLite (embedded) has partial indexes too, and uses them for the same statements.
"""

import peewee


def up(db: peewee.Database) -> None:
    db.execute_sql("CREATE INDEX monitor_due ON monitors (next_check_at) WHERE status = 'active' AND polled")
    db.execute_sql("DROP INDEX IF EXISTS monitor_status_next_check_at")
    db.execute_sql("CREATE INDEX command_run_open ON command_runs (status, deadline_at) "
                   "WHERE status IN ('pending', 'running', 'stopping')")
    db.execute_sql("CREATE INDEX command_run_unchecked ON command_runs (finished_at) "
                   "WHERE processed_at IS NULL AND kind = 'poll' AND status = 'done'")
    db.execute_sql("CREATE INDEX device_online ON devices (last_seen_at) WHERE online")

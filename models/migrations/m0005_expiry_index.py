"""An index for the scheduler's expiry pass: without it, every tick read every monitor in the table.

`expire_due` looks for live monitors past `expires_at` once a tick; on (status, next_check_at) alone that
was a sequential scan, so the scheduler's cost grew with the number of armed monitors instead of the number
that are due or expiring.
"""

import peewee
from playhouse.migrate import PostgresqlMigrator, SqliteMigrator, migrate


def up(db: peewee.Database) -> None:
    migrator = PostgresqlMigrator(db) if isinstance(db, peewee.PostgresqlDatabase) else SqliteMigrator(db)
    migrate(migrator.add_index("monitors", ("status", "expires_at"), False))

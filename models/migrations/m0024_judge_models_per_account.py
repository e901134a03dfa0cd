"""Judge models belong to an account (issue 28). The catalog was one list for the whole instance: any account saw
every entry's base URL, could re-point another account's entry at its own listener (the stored key went along)
and delete it, and a monitor could name another account's model and spend its key. Each entry now has an owner
and names are unique per account. Entries made before this go to the first account (the lowest user id), the one
that set the instance up; on an instance with no account there is nobody to give them to, so they are dropped."""

import peewee
from playhouse.migrate import PostgresqlMigrator, SqliteMigrator, migrate



def up(db: peewee.Database) -> None:
    migrator = PostgresqlMigrator(db) if isinstance(db, peewee.PostgresqlDatabase) else SqliteMigrator(db)
    # the same statement on both: SQLite adds a foreign key column when its default is NULL
    db.execute_sql("ALTER TABLE judge_models ADD COLUMN user_id INTEGER REFERENCES users (id) ON DELETE CASCADE")
    db.execute_sql("UPDATE judge_models SET user_id = (SELECT MIN(id) FROM users)")
    db.execute_sql("DELETE FROM judge_models WHERE user_id IS NULL")
    migrate(migrator.add_not_null("judge_models", "user_id"))
    db.execute_sql("DROP INDEX IF EXISTS judgemodel_name")
    db.execute_sql("CREATE UNIQUE INDEX judgemodel_user_id_name ON judge_models (user_id, name)")

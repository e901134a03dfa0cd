"""The judge (model catalog, token usage, a monitor's condition) and the failure lifecycle columns."""

import peewee
from playhouse.migrate import PostgresqlMigrator, SqliteMigrator, migrate


def up(db: peewee.Database) -> None:
    class Base(peewee.Model):
        class Meta:
            database = db

    class User(Base):
        class Meta:
            table_name = "users"

    class Monitor(Base):
        id = peewee.CharField(max_length=32, primary_key=True)

        class Meta:
            table_name = "monitors"

    class JudgeModel(Base):
        name = peewee.CharField(max_length=100, unique=True)
        base_url = peewee.CharField(max_length=500)
        api_key_encrypted = peewee.TextField()
        model = peewee.CharField(max_length=200)
        api_version = peewee.CharField(max_length=40, default="")
        created_at = peewee.DateTimeField()
        updated_at = peewee.DateTimeField()

        class Meta:
            table_name = "judge_models"

    class TokenUsage(Base):
        user = peewee.ForeignKeyField(User, on_delete="CASCADE")
        monitor = peewee.ForeignKeyField(Monitor, null=True, on_delete="SET NULL")
        source = peewee.CharField(max_length=40)
        model_name = peewee.CharField(max_length=100)
        prompt_tokens = peewee.IntegerField(default=0)
        completion_tokens = peewee.IntegerField(default=0)
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "token_usage"

    db.create_tables([JudgeModel, TokenUsage])
    migrator = PostgresqlMigrator(db) if isinstance(db, peewee.PostgresqlDatabase) else SqliteMigrator(db)
    migrate(
        migrator.add_column("monitors", "condition", peewee.TextField(default="")),
        migrator.add_column("monitors", "judge_model", peewee.CharField(max_length=100, default="")),
        migrator.add_column("monitors", "judge_failures", peewee.IntegerField(default=0)),
        migrator.add_column("monitors", "judge_tokens", peewee.IntegerField(default=0)),
        migrator.add_column("monitors", "unreachable_since", peewee.DateTimeField(null=True)),
        migrator.add_column("monitors", "prev_checked_at", peewee.DateTimeField(null=True)),
    )

"""Trigger links (webhooks), their stored deliveries, the audit log, and which monitors are polled."""

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

    class TriggerLink(Base):
        monitor = peewee.ForeignKeyField(Monitor, unique=True, on_delete="CASCADE")
        token_digest = peewee.CharField(max_length=64, unique=True)
        token_encrypted = peewee.TextField()
        signature = peewee.CharField(max_length=30)
        secret_encrypted = peewee.TextField(default="")
        max_hits = peewee.IntegerField()
        hits = peewee.IntegerField(default=0)
        expires_at = peewee.DateTimeField()
        revoked_at = peewee.DateTimeField(null=True)
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "trigger_links"

    class Delivery(Base):
        link = peewee.ForeignKeyField(TriggerLink, on_delete="CASCADE")
        dedupe_key = peewee.CharField(max_length=250)
        body = peewee.TextField()
        content_type = peewee.CharField(max_length=200, default="")
        received_at = peewee.DateTimeField()
        processed_at = peewee.DateTimeField(null=True)
        outcome = peewee.CharField(max_length=30, default="")

        class Meta:
            table_name = "deliveries"
            indexes = ((("link", "dedupe_key"), True), (("processed_at", "received_at"), False))

    class AuditEvent(Base):
        user = peewee.ForeignKeyField(User, null=True, on_delete="SET NULL")
        action = peewee.CharField(max_length=60)
        monitor = peewee.ForeignKeyField(Monitor, null=True, on_delete="SET NULL")
        detail = peewee.TextField(default="")
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "audit_events"

    db.create_tables([TriggerLink, Delivery, AuditEvent])
    migrator = PostgresqlMigrator(db) if isinstance(db, peewee.PostgresqlDatabase) else SqliteMigrator(db)
    migrate(migrator.add_column("monitors", "polled", peewee.BooleanField(default=True)))

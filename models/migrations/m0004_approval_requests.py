"""Approval links: the public page's request, its first (and only) decision."""

import peewee


def up(db: peewee.Database) -> None:
    class Base(peewee.Model):
        class Meta:
            database = db

    class Monitor(Base):
        id = peewee.CharField(max_length=32, primary_key=True)

        class Meta:
            table_name = "monitors"

    class ApprovalRequest(Base):
        monitor = peewee.ForeignKeyField(Monitor, unique=True, on_delete="CASCADE")
        token_digest = peewee.CharField(max_length=64, unique=True)
        decision = peewee.CharField(max_length=60, null=True)
        comment = peewee.TextField(default="")
        decided_at = peewee.DateTimeField(null=True)
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "approval_requests"

    db.create_tables([ApprovalRequest])

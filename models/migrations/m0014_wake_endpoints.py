"""Wake endpoints: where a runtime wants its wakes pushed, the outbox of pushes, and each attempt at one."""

import peewee


def up(db: peewee.Database) -> None:
    class Base(peewee.Model):
        class Meta:
            database = db

    class User(Base):
        class Meta:
            table_name = "users"

    class Message(Base):
        class Meta:
            table_name = "messages"

    class WakeEndpoint(Base):
        user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
        url = peewee.CharField(max_length=2000)
        description = peewee.CharField(max_length=200, default="")
        secret_encrypted = peewee.TextField()
        previous_secret_encrypted = peewee.TextField(default="")
        previous_until = peewee.DateTimeField(null=True)
        enabled = peewee.BooleanField(default=True)
        disabled_reason = peewee.TextField(default="")
        failing_since = peewee.DateTimeField(null=True)
        created_at = peewee.DateTimeField()

        class Meta:
            table_name = "wake_endpoints"
            indexes = ((("user", "enabled"), False),)

    class WakePush(Base):
        endpoint = peewee.ForeignKeyField(WakeEndpoint, on_delete="CASCADE", index=False)
        message = peewee.ForeignKeyField(Message, on_delete="CASCADE", index=False)
        status = peewee.CharField(max_length=12, default="pending")
        attempts = peewee.IntegerField(default=0)
        next_attempt_at = peewee.DateTimeField()
        created_at = peewee.DateTimeField()
        delivered_at = peewee.DateTimeField(null=True)

        class Meta:
            table_name = "wake_pushes"
            indexes = ((("endpoint", "message"), True), (("status", "next_attempt_at"), False))

    class WakeAttempt(Base):
        push = peewee.ForeignKeyField(WakePush, on_delete="CASCADE")
        endpoint = peewee.ForeignKeyField(WakeEndpoint, on_delete="CASCADE", index=False)
        attempted_at = peewee.DateTimeField()
        status_code = peewee.IntegerField(null=True)
        latency_ms = peewee.IntegerField(default=0)
        answer = peewee.CharField(max_length=300, default="")
        next_attempt_at = peewee.DateTimeField(null=True)

        class Meta:
            table_name = "wake_attempts"
            indexes = ((("endpoint", "attempted_at"), False),)

    db.create_tables([WakeEndpoint, WakePush, WakeAttempt])

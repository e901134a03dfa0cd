"""The wake-push outbox's tables: where a runtime wants wakes pushed, one row per wake and endpoint, and each
attempt. Import them from models.tables, which re-exports them (importing this module first would be circular).
"""

from __future__ import annotations

import peewee

from models.db import BaseModel, utcnow
from models.tables import Message, User


class WakeEndpoint(BaseModel):
    """Where a runtime wants its account's wakes pushed (Standard Webhooks); the signing secret encrypted, and
    during a rotation the one before it, still signed with until `previous_until`."""
    user = peewee.ForeignKeyField(User, on_delete="CASCADE", index=False)
    url = peewee.CharField(max_length=2000)
    description = peewee.CharField(max_length=200, default="")
    secret_encrypted = peewee.TextField()
    previous_secret_encrypted = peewee.TextField(default="")
    previous_until = peewee.DateTimeField(null=True)
    enabled = peewee.BooleanField(default=True)
    #: why it was disabled (410, or failing for days), for the owner
    disabled_reason = peewee.TextField(default="")
    #: when the current run of failed attempts began; None after a success
    failing_since = peewee.DateTimeField(null=True)
    created_at = peewee.DateTimeField(default=utcnow)

    class Meta:
        table_name = "wake_endpoints"
        indexes = ((("user", "enabled"), False),)


class WakePush(BaseModel):
    """The outbox: one wake to one endpoint, written in the wake's transaction, sent until it is delivered."""
    endpoint = peewee.ForeignKeyField(WakeEndpoint, on_delete="CASCADE", index=False)
    message = peewee.ForeignKeyField(Message, on_delete="CASCADE", index=False)
    status = peewee.CharField(max_length=12, default="pending")
    attempts = peewee.IntegerField(default=0)
    #: when the next attempt is due; while one is in flight, when its lease runs out
    next_attempt_at = peewee.DateTimeField()
    created_at = peewee.DateTimeField(default=utcnow)
    delivered_at = peewee.DateTimeField(null=True)

    class Meta:
        table_name = "wake_pushes"
        indexes = ((("endpoint", "message"), True), (("status", "next_attempt_at"), False))


class WakeAttempt(BaseModel):
    """One attempt at a push, as the owner sees it in Settings → Wake endpoints."""
    push = peewee.ForeignKeyField(WakePush, on_delete="CASCADE")
    endpoint = peewee.ForeignKeyField(WakeEndpoint, on_delete="CASCADE", index=False)
    attempted_at = peewee.DateTimeField(default=utcnow)
    status_code = peewee.IntegerField(null=True)
    latency_ms = peewee.IntegerField(default=0)
    answer = peewee.CharField(max_length=300, default="")
    next_attempt_at = peewee.DateTimeField(null=True)

    class Meta:
        table_name = "wake_attempts"
        indexes = ((("endpoint", "attempted_at"), False),)

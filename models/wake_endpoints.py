"""Wake endpoints and the outbox of pushes to them.

A runtime registers where its account's wakes go; every wake written (models/results.write_wake) queues one
push per enabled endpoint in the same transaction. tasks/pushes.py claims a due push, sends it with no
transaction open, and records the answer here; a sweep re-queues what a lost message left.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from peewee import fn

from engine.addresses import Own, check_url, literal_reason, own_literal_reason
from engine.crypto import Keyring
from engine.errors import BlockedURL
from engine.pushes import DELIVERED, DISABLE, GIVE_UP, Verdict
from engine.signatures import new_secret
from models.compiled import Compiled
from models.db import database, iso, write_transaction
from models.due import sooner
from models.tables import Conversation, Message, User, WakeAttempt, WakeEndpoint, WakePush

PENDING, FAILED = "pending", "failed"
#: a rotated-out secret still signs for this long, so receivers can switch over
ROTATION_OVERLAP = timedelta(hours=24)
#: an attempt in flight holds its push this long (the 15 s timeout and then some; WAKE_PUSH_LEASE_SECONDS); a
#: worker killed mid-send leaves it due again after that
LEASE = timedelta(seconds=60)
#: endpoints per account
MAX_ENDPOINTS = 10


class EndpointRefused(Exception):
    """A registration that can't be done; the message says what to fix."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def check_endpoint(url: object, description: object, allow_loopback: bool,
                   own: Own | None = None) -> tuple[str, str]:
    if not isinstance(url, str) or not url.strip():
        raise EndpointRefused("url is required: the https address your runtime receives wakes at.")
    if len(url) > 2000:
        raise EndpointRefused("url is longer than 2000 characters.")
    try:
        check_url(url.strip())
    except BlockedURL as exc:
        raise EndpointRefused(f"url can't be used: {exc.message}") from None
    itself = own_literal_reason(url.strip(), own)
    if itself:
        raise EndpointRefused(f"url can't be used: it points to {itself}")
    reason = literal_reason(url.strip(), allow_loopback)
    if reason:
        hint = (" For a runtime on the same machine as Vigil, set FETCH_ALLOW_LOOPBACK=true."
                if "loopback" in reason else "")
        raise EndpointRefused(f"url can't be used: it points to {reason}, and wakes go only to public internet "
                              f"addresses.{hint}")
    if description is None:
        description = ""
    if not isinstance(description, str) or len(description) > 200 or "\x00" in description:
        raise EndpointRefused("description must be text of at most 200 characters.")
    return url.strip(), description.strip()


def add_endpoint(user: User, url: str, description: str, keyring: Keyring, now: datetime) -> tuple[WakeEndpoint, str]:
    """The new endpoint and its secret, which is answered this once and stored only encrypted."""
    secret = new_secret("standard_webhooks")
    with write_transaction():
        if WakeEndpoint.select().where(WakeEndpoint.user == user.id).count() >= MAX_ENDPOINTS:
            raise EndpointRefused(f"This account has {MAX_ENDPOINTS} wake endpoints, the most it may have; delete "
                                  "one first.", 409)
        endpoint = WakeEndpoint.create(user=user.id, url=url, description=description,
                                       secret_encrypted=keyring.encrypt(secret), created_at=now)
    return endpoint, secret


def user_endpoints(user: User) -> list[WakeEndpoint]:
    return list(WakeEndpoint.select().where(WakeEndpoint.user == user.id).order_by(WakeEndpoint.id))


def owned_endpoint(user: User, endpoint_id: int) -> WakeEndpoint | None:
    return WakeEndpoint.get_or_none((WakeEndpoint.id == endpoint_id) & (WakeEndpoint.user == user.id))


def delete_endpoint(user: User, endpoint_id: int) -> bool:
    """Gone with its pushes and attempts; a push in flight finds its row gone and records nothing."""
    with database.atomic():
        return WakeEndpoint.delete().where((WakeEndpoint.id == endpoint_id)
                                           & (WakeEndpoint.user == user.id)).execute() == 1


def rotate_secret(endpoint: WakeEndpoint, keyring: Keyring, now: datetime) -> str:
    """A new secret; the old one keeps signing beside it for ROTATION_OVERLAP."""
    secret = new_secret("standard_webhooks")
    WakeEndpoint.update({WakeEndpoint.secret_encrypted: keyring.encrypt(secret),
                         WakeEndpoint.previous_secret_encrypted: endpoint.secret_encrypted,
                         WakeEndpoint.previous_until: now + ROTATION_OVERLAP}).where(
        WakeEndpoint.id == endpoint.id).execute()
    endpoint.previous_until = now + ROTATION_OVERLAP
    return secret


def enable_endpoint(endpoint: WakeEndpoint, now: datetime, resend: bool = False) -> list[int]:
    """Back on after the owner fixed the receiver: later wakes are pushed again. With `resend`, the pushes it
    gave up on since its last delivery are due again from their first attempt; their ids, for the caller to
    send after this commits."""
    with write_transaction():
        WakeEndpoint.update({WakeEndpoint.enabled: True, WakeEndpoint.disabled_reason: "",
                             WakeEndpoint.failing_since: None}).where(WakeEndpoint.id == endpoint.id).execute()
        return given_up_requeued(endpoint.id, now) if resend else []


def given_up_requeued(endpoint_id: int, now: datetime) -> list[int]:
    """The endpoint's failed pushes of wakes newer than the last one it took (all it still has, if it never took
    one; ended pushes are kept a week), pending again with no attempts."""
    last = (WakePush.select(fn.MAX(WakePush.message)).where((WakePush.endpoint == endpoint_id)
                                                             & (WakePush.status == "delivered")).scalar())
    query = (WakePush.endpoint == endpoint_id) & (WakePush.status == FAILED)
    if last is not None:
        query &= WakePush.message > last
    ids = [row.id for row in WakePush.select(WakePush.id).where(query).order_by(WakePush.message)]
    if ids:
        WakePush.update({WakePush.status: PENDING, WakePush.attempts: 0, WakePush.next_attempt_at: now}).where(
            WakePush.id.in_(ids) & (WakePush.status == FAILED)).execute()
    return ids


def signing_secrets(endpoint: WakeEndpoint, keyring: Keyring, now: datetime) -> list[str]:
    secrets = [keyring.decrypt(endpoint.secret_encrypted)]
    if endpoint.previous_secret_encrypted and endpoint.previous_until and endpoint.previous_until > now:
        secrets.append(keyring.decrypt(endpoint.previous_secret_encrypted))
    return secrets


def endpoint_json(endpoint: WakeEndpoint) -> dict:
    return {"id": endpoint.id, "url": endpoint.url, "description": endpoint.description,
            "enabled": endpoint.enabled, "disabled_reason": endpoint.disabled_reason,
            "failing_since": iso(endpoint.failing_since) if endpoint.failing_since else None,
            "previous_secret_until": iso(endpoint.previous_until) if endpoint.previous_until else None,
            "created_at": iso(endpoint.created_at)}


# --- the outbox -------------------------------------------------------------------------------------------

_QUEUE_SQL = ("INSERT INTO wake_pushes (endpoint_id, message_id, status, attempts, next_attempt_at, created_at) "
              "SELECT id, {p}, 'pending', 0, {p}, {p} FROM wake_endpoints WHERE user_id = {p} AND enabled")


def queue_pushes(user_id: int, message_id: int, now: datetime) -> int:
    """One push of the message per enabled endpoint of the account, in the caller's transaction (the wake's).
    How many were queued: one statement, whether or not the account has endpoints."""
    p = database.param
    return database.execute_sql(_QUEUE_SQL.format(p=p), (message_id, now, now, user_id)).rowcount


@dataclass(frozen=True)
class Claimed:
    """A push this worker may send now: what to send and where."""
    push_id: int
    attempts: int
    endpoint: WakeEndpoint
    conversation_id: str
    message: Message


_CLAIM = Compiled(lambda push_id, attempts, pending, now, until: WakePush.update(
    {WakePush.next_attempt_at: until}).where(
    (WakePush.id == push_id) & (WakePush.attempts == attempts) & (WakePush.status == pending)
    & (WakePush.next_attempt_at <= now)))


#: a push with its endpoint, its message and the message's conversation id, in one round trip
_LOAD = Compiled(lambda push_id: WakePush.select(WakePush, WakeEndpoint, Message, Conversation.id,
                                                 Conversation.external_id)
                 .join(WakeEndpoint).switch(WakePush).join(Message).join(Conversation)
                 .where(WakePush.id == push_id))


def claim_push(push_id: int, now: datetime, lease: timedelta = LEASE) -> Claimed | None:
    """The push, leased to this worker, if it is due and no one else holds it; None otherwise."""
    push = _LOAD.first(push_id)
    if push is None or push.status != PENDING or push.next_attempt_at > now:
        return None
    if _CLAIM.rowcount(push_id, push.attempts, PENDING, now, now + lease) != 1:
        return None  # another worker got there first
    sooner(now + lease)  # should this worker die with it, the scheduler's push sweep sends it again then
    if not push.endpoint.enabled:
        _finish(push_id, push.attempts, FAILED)
        return None
    return Claimed(push_id, push.attempts, push.endpoint, push.message.conversation.external_id, push.message)


def pushes_for(message_id: int) -> list[int]:
    return [row.id for row in WakePush.select(WakePush.id).where(
        (WakePush.message == message_id) & (WakePush.status == PENDING))]


def due_pushes(now: datetime, limit: int = 200) -> list[int]:
    """Pushes due and not held: retries whose time came, and first attempts whose message was lost."""
    return [row.id for row in WakePush.select(WakePush.id).where(
        (WakePush.status == PENDING) & (WakePush.next_attempt_at <= now)).order_by(WakePush.next_attempt_at)
        .limit(limit)]


def record_attempt(claimed: Claimed, status: int | None, answer: str, latency_ms: int, verdict: Verdict,
                   now: datetime) -> bool:
    """The attempt's answer: the push delivered, due again, or failed for good; the endpoint's failing run and
    whether it is disabled. False when the push was no longer ours (deleted, or taken after the lease ran out)."""
    with write_transaction():
        push_state = {DELIVERED: "delivered", GIVE_UP: FAILED, DISABLE: FAILED}.get(verdict.kind, PENDING)
        fields = {WakePush.attempts: claimed.attempts + 1, WakePush.status: push_state}
        if verdict.next_at is not None:
            fields[WakePush.next_attempt_at] = verdict.next_at
        if verdict.kind == DELIVERED:
            fields[WakePush.delivered_at] = now
        if WakePush.update(fields).where((WakePush.id == claimed.push_id) & (WakePush.attempts == claimed.attempts)
                                         & (WakePush.status == PENDING)).execute() != 1:
            return False
        WakeAttempt.insert(push=claimed.push_id, endpoint=claimed.endpoint.id, attempted_at=now,
                           status_code=status, latency_ms=latency_ms, answer=answer[:300],
                           next_attempt_at=verdict.next_at).execute()
        _endpoint_after(claimed.endpoint, verdict, now)
    if push_state == PENDING and verdict.next_at is not None:
        sooner(verdict.next_at)  # the retry: the scheduler's push sweep queues it then
    return True


def _endpoint_after(endpoint: WakeEndpoint, verdict: Verdict, now: datetime) -> None:
    if verdict.kind == DELIVERED:
        if endpoint.failing_since is not None:
            WakeEndpoint.update({WakeEndpoint.failing_since: None}).where(WakeEndpoint.id == endpoint.id).execute()
        return
    if verdict.kind == DISABLE:
        WakeEndpoint.update({WakeEndpoint.enabled: False, WakeEndpoint.disabled_reason: verdict.why}).where(
            WakeEndpoint.id == endpoint.id).execute()
        WakePush.update({WakePush.status: FAILED}).where(
            (WakePush.endpoint == endpoint.id) & (WakePush.status == PENDING)).execute()
    elif endpoint.failing_since is None:
        WakeEndpoint.update({WakeEndpoint.failing_since: now}).where(
            (WakeEndpoint.id == endpoint.id) & WakeEndpoint.failing_since.is_null()).execute()


def _finish(push_id: int, attempts: int, status: str) -> None:
    WakePush.update({WakePush.status: status}).where((WakePush.id == push_id)
                                                     & (WakePush.attempts == attempts)).execute()


def recent_attempts(endpoint: WakeEndpoint, limit: int = 20) -> list[dict]:
    rows = (WakeAttempt.select(WakeAttempt, WakePush.message, WakePush.status, WakePush.attempts)
            .join(WakePush).where(WakeAttempt.endpoint == endpoint.id)
            .order_by(WakeAttempt.id.desc()).limit(limit))
    return [{"message_id": row.push.message_id, "attempted_at": iso(row.attempted_at),
             "status_code": row.status_code, "latency_ms": row.latency_ms, "answer": row.answer,
             "next_attempt_at": iso(row.next_attempt_at) if row.next_attempt_at else None,
             "push_status": row.push.status} for row in rows]


def prune_attempts(now: datetime, older_than: timedelta = timedelta(days=7)) -> int:
    """Attempts of pushes that ended more than a week ago go; a push still pending keeps its history."""
    ended = WakePush.select(WakePush.id).where((WakePush.status != PENDING) & (WakePush.created_at < now - older_than))
    with database.atomic():
        gone = WakeAttempt.delete().where(WakeAttempt.push.in_(ended)).execute()
        WakePush.delete().where(WakePush.id.in_(ended)).execute()
    return gone

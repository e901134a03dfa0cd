"""Trigger links and their deliveries: create, find a live link, store a delivery once, reveal the secret."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import peewee

from engine.crypto import Keyring
from engine.tokens import new_token, token_digest
from models.claims import as_time
from models.db import database, utcnow
from models.tables import LIVE, AuditEvent, Delivery, Monitor, TriggerLink

TOKEN_PREFIX = "trg_"


def create_link(monitor: Monitor, signature: str, secret: str, max_hits: int, keyring: Keyring) -> str:
    """Store the link (token digest, encrypted secret); returns the token, shown once in the URL."""
    token = new_token(TOKEN_PREFIX)
    TriggerLink.create(monitor=monitor.id, token_digest=token_digest(token), token_encrypted=keyring.encrypt(token),
                       signature=signature,
                       secret_encrypted=keyring.encrypt(secret) if secret else "", max_hits=max_hits,
                       expires_at=monitor.expires_at, created_at=utcnow())
    return token


@dataclass(frozen=True)
class LiveLink:
    """What answering a delivery needs of its link."""
    id: int
    signature: str
    secret_encrypted: str


_LIVE_LINK_SQL = (
    "SELECT l.id, l.signature, l.secret_encrypted, l.max_hits, l.hits, l.expires_at, l.revoked_at, m.status "
    "FROM trigger_links l JOIN monitors m ON m.id = l.monitor_id WHERE l.token_digest = {p}")


def live_link(token: str, now: datetime) -> LiveLink | None:
    """The link if it is known, unexpired, unrevoked, not used up and its monitor is live; else None.

    Read with one fixed query: this runs on every delivery, before anything else.
    """
    if not token.startswith(TOKEN_PREFIX) or len(token) > 100:
        return None
    row = database.execute_sql(_LIVE_LINK_SQL.format(p=database.param), (token_digest(token),)).fetchone()
    if row is None:
        return None
    link_id, signature, secret, max_hits, hits, expires_at, revoked_at, status = row
    if revoked_at is not None or as_time(expires_at) <= now or hits >= max_hits or status not in LIVE:
        return None
    return LiveLink(link_id, signature, secret)


_STORE_PG = (
    "WITH d AS (INSERT INTO deliveries (link_id, dedupe_key, body, content_type, received_at, outcome) "
    "VALUES (%s, %s, %s, %s, %s, '') ON CONFLICT (link_id, dedupe_key) DO NOTHING RETURNING id), "
    "u AS (UPDATE trigger_links SET hits = hits + 1 WHERE id = %s AND EXISTS (SELECT 1 FROM d)) "
    "SELECT id FROM d")


def store_delivery(link: LiveLink, sender_id: str | None, body: str, content_type: str, now: datetime,
                   window_seconds: int) -> int | None:
    """Store a delivery once per sender id, or once per body within the window; its id, or None for a repeat."""
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    if sender_id:
        key = f"id:{sender_id}"
    else:
        bucket = int(now.timestamp()) // window_seconds
        if _seen_recently(link.id, f"body:{digest}:{bucket - 1}", now, window_seconds):
            return None
        key = f"body:{digest}:{bucket}"
    if isinstance(database.obj, peewee.PostgresqlDatabase):  # one round trip: insert and count the hit
        row = database.execute_sql(_STORE_PG, (link.id, key, body, content_type[:200], now, link.id)).fetchone()
        return row[0] if row else None
    with database.atomic():
        inserted = (Delivery.insert(link=link.id, dedupe_key=key, body=body, content_type=content_type[:200],
                                    received_at=now).on_conflict_ignore().as_rowcount().execute())
        if inserted != 1:
            return None
        TriggerLink.update(hits=TriggerLink.hits + 1).where(TriggerLink.id == link.id).execute()
    return Delivery.get((Delivery.link == link.id) & (Delivery.dedupe_key == key)).id


def _seen_recently(link_id: int, key: str, now: datetime, window_seconds: int) -> bool:
    earlier = Delivery.get_or_none((Delivery.link == link_id) & (Delivery.dedupe_key == key))
    return earlier is not None and earlier.received_at > now - timedelta(seconds=window_seconds)


def unprocessed(older_than: datetime, limit: int = 500) -> list[int]:
    """Stored deliveries nobody processed: their message was lost, so they are queued again."""
    return [row.id for row in Delivery.select(Delivery.id)
            .where(Delivery.processed_at.is_null() & (Delivery.received_at < older_than)).limit(limit)]


def revoke(monitor_id: str, now: datetime) -> None:
    TriggerLink.update(revoked_at=now).where((TriggerLink.monitor == monitor_id)
                                             & TriggerLink.revoked_at.is_null()).execute()


def reveal_secret(user_id: int, monitor_id: str, keyring: Keyring, now: datetime) -> str | None:
    """The signing secret of the user's live, signed link, audited; None when there is none."""
    link = (TriggerLink.select(TriggerLink, Monitor).join(Monitor)
            .where((TriggerLink.monitor == monitor_id) & (Monitor.user == user_id)).first())
    if link is None or not link.secret_encrypted or link.revoked_at is not None or link.expires_at <= now:
        return None
    if link.monitor.status not in LIVE:
        return None
    AuditEvent.create(user=user_id, action="monitor.secret_revealed", monitor=monitor_id, created_at=now)
    return keyring.decrypt(link.secret_encrypted)


def link_cards(monitor_ids: list[str], keyring: Keyring, base_url: str, now: datetime) -> dict[str, dict]:
    """What the owner's link cards show, by monitor id: the URL, scheme, expiry, hits, and whether it ended."""
    cards = {}
    for link in TriggerLink.select().where(TriggerLink.monitor.in_(monitor_ids)):
        ended = link.revoked_at is not None or link.expires_at <= now or link.hits >= link.max_hits
        cards[link.monitor_id] = {"url": f"{base_url}/api/triggers/{keyring.decrypt(link.token_encrypted)}",
                                  "signature": link.signature, "expires_at": link.expires_at, "hits": link.hits,
                                  "max_hits": link.max_hits, "ended": ended}
    return cards

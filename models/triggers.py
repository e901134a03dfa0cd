"""Trigger links and their deliveries: create, find a live link, store a delivery once, reveal the secret."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import peewee

from engine.crypto import Keyring
from engine.tokens import new_token, token_digest
from models import prepared
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
class Link:
    """What answering a delivery needs of its link; none of it changes while the link exists."""
    id: int
    signature: str
    secret_encrypted: str


class LinkEnded(Exception):
    """The link is expired, revoked, used up or its monitor has ended: answered like an unknown one."""


_FIND_SQL = "SELECT id, signature, secret_encrypted FROM trigger_links WHERE token_digest = {p}"
_LIVE_SQL = (
    "SELECT 1 FROM trigger_links l JOIN monitors m ON m.id = l.monitor_id WHERE l.id = {p} "
    "AND l.revoked_at IS NULL AND l.expires_at > {p} AND l.hits < l.max_hits AND m.status IN ({p}, {p})")

#: token digest -> Link, for tokens that were found. A link's id, scheme and secret never change, so the
#: cache is never stale about them; whether the link is still live is read with every delivery's write.
_found: dict[str, Link] = {}
_FOUND_CAP = 10_000


def find_link(token: str) -> Link | None:
    """The link behind `token`, live or not; None for a token that was never issued."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 100:
        return None
    digest = token_digest(token)
    link = _found.get(digest)
    if link is None:
        row = database.execute_sql(_FIND_SQL.format(p=database.param), (digest,)).fetchone()
        if row is None:
            return None
        if len(_found) >= _FOUND_CAP:
            _found.clear()
        link = _found[digest] = Link(*row)
    return link


def is_live(link_id: int, now: datetime) -> bool:
    """Unexpired, unrevoked, not used up, and its monitor is active or paused."""
    sql = _LIVE_SQL.format(p=database.param)
    return database.execute_sql(sql, (link_id, now, *LIVE)).fetchone() is not None


# One round trip on PostgreSQL: insert the delivery if the link is live, then count the hit unless that
# would go past max_hits (re-read under the row lock, so simultaneous deliveries can't overshoot it).
_STORE_PG = (
    "WITH live AS (" + _LIVE_SQL.format(p="%s").replace("SELECT 1", "SELECT l.id", 1) + "), "
    "d AS (INSERT INTO deliveries (link_id, dedupe_key, body, content_type, received_at, outcome) "
    "SELECT id, %s, %s, %s, %s, '' FROM live ON CONFLICT (link_id, dedupe_key) DO NOTHING RETURNING id), "
    "u AS (UPDATE trigger_links SET hits = hits + 1 WHERE id = %s AND hits < max_hits "
    "AND EXISTS (SELECT 1 FROM d) RETURNING id) "
    "SELECT EXISTS (SELECT 1 FROM live), (SELECT id FROM d), EXISTS (SELECT 1 FROM u)")


def store_delivery(link: Link, sender_id: str | None, body: str, content_type: str, now: datetime,
                   window_seconds: int) -> int | None:
    """Store a delivery once per sender id, or once per body within the window; its id, or None for a
    repeat. Raises LinkEnded when the link is no longer live, so nothing is stored."""
    if sender_id:
        key = f"id:{sender_id}"
    else:
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        bucket = int(now.timestamp()) // window_seconds
        if _seen_recently(link.id, f"body:{digest}:{bucket - 1}", now, window_seconds):
            return None
        key = f"body:{digest}:{bucket}"
    if isinstance(database.obj, peewee.PostgresqlDatabase):
        return _store_pg(link, key, body, content_type[:200], now)
    with database.atomic(lock_type="IMMEDIATE"):  # SQLite: one writer from the check to the count
        if not is_live(link.id, now):
            raise LinkEnded
        inserted = (Delivery.insert(link=link.id, dedupe_key=key, body=body, content_type=content_type[:200],
                                    received_at=now).on_conflict_ignore().as_rowcount().execute())
        if inserted != 1:
            return None
        TriggerLink.update(hits=TriggerLink.hits + 1).where(TriggerLink.id == link.id).execute()
    return Delivery.get((Delivery.link == link.id) & (Delivery.dedupe_key == key)).id


def _store_pg(link: Link, key: str, body: str, content_type: str, now: datetime) -> int | None:
    live, stored, counted = prepared.execute(
        "vigil_store_delivery", _STORE_PG, (link.id, now, *LIVE, key, body, content_type, now, link.id)).fetchone()
    if not live:
        raise LinkEnded
    if stored is not None and not counted:  # the last hits went to simultaneous deliveries
        Delivery.delete().where(Delivery.id == stored).execute()
        raise LinkEnded
    return stored


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
    """What the owner's link cards show, by monitor id: the URL, scheme, expiry, hits, the wakes it gives, and
    whether it ended (revoked, expired, used up, or its monitor no longer live: a POST then gets 404)."""
    cards = {}
    links = (TriggerLink.select(TriggerLink, Monitor.id, Monitor.status, Monitor.max_wakes).join(Monitor)
             .where(TriggerLink.monitor.in_(monitor_ids)))
    for link in links:
        ended = (link.revoked_at is not None or link.expires_at <= now or link.hits >= link.max_hits
                 or link.monitor.status not in LIVE)
        cards[link.monitor_id] = {"url": f"{base_url}/api/triggers/{keyring.decrypt(link.token_encrypted)}",
                                  "signature": link.signature, "expires_at": link.expires_at, "hits": link.hits,
                                  "max_hits": link.max_hits, "max_wakes": link.monitor.max_wakes, "ended": ended}
    return cards

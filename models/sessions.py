"""Browser sessions, kept server-side (issue 28): the cookie holds a random id, the sessions table only its digest.

A session ends when its browser signs out, when its account signs out everywhere or changes its password (the
other sessions), once it has not been used for its idle time, and at the latest its longest time after sign-in.
An ended session's row is gone, so its cookie, replayed, names nothing. last_seen_at moves at most once a minute:
a busy browser costs one write a minute, not one a request."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.tokens import same_secret, token_digest
from models.tables import BrowserSession, User

#: a session's last_seen_at is written at most this often
SEEN_RESOLUTION = timedelta(seconds=60)
#: the longest cookie value looked up (an id is 43 characters); a longer one names no session
ID_MAX = 100


@dataclass(frozen=True)
class Lifetime:
    """How long a session lives: unused (`idle`), and at most after its sign-in (`longest`)."""
    idle: timedelta
    longest: timedelta


def start_session(user: User, lifetime: Lifetime, now: datetime) -> tuple[BrowserSession, str]:
    """A new session of `user` and its id, for the cookie: only the id's digest is stored, so it is not kept.
    The account's ended sessions are deleted on the way, so the table holds about one row per browser."""
    BrowserSession.delete().where((BrowserSession.user == user) & _ended(lifetime, now)).execute()
    session_id = secrets.token_urlsafe(32)
    row = BrowserSession.create(user=user, digest=token_digest(session_id), csrf=secrets.token_urlsafe(32),
                                created_at=now, last_seen_at=now)
    row.user = user
    return row, session_id


def find_session(session_id: str | None, lifetime: Lifetime, now: datetime) -> BrowserSession | None:
    """The live session `session_id` names, its user loaded; None when it names none or the session has ended (its
    row is then deleted). Notes the use (see _note_use). Call outside a transaction."""
    if not session_id or len(session_id) > ID_MAX:
        return None
    digest = token_digest(session_id)
    row = BrowserSession.select(BrowserSession, User).join(User).where(BrowserSession.digest == digest).first()
    if row is None or not same_secret(row.digest, digest):
        return None
    if row.last_seen_at <= now - lifetime.idle or row.created_at <= now - lifetime.longest:
        BrowserSession.delete().where(BrowserSession.id == row.id).execute()
        return None
    _note_use(row, now)
    return row


def end_session(session_id: str | None) -> None:
    """Sign the session `session_id` names out: its cookie names nothing from now on."""
    if session_id and len(session_id) <= ID_MAX:
        BrowserSession.delete().where(BrowserSession.digest == token_digest(session_id)).execute()


def end_sessions(user: User, keep: BrowserSession | None = None) -> int:
    """End every session of `user` but `keep`; how many ended."""
    query = BrowserSession.delete().where(BrowserSession.user == user)
    if keep is not None:
        query = query.where(BrowserSession.id != keep.id)
    return query.execute()


def _ended(lifetime: Lifetime, now: datetime):
    """The sessions that have ended by `now`, as a WHERE clause."""
    idle, old = now - lifetime.idle, now - lifetime.longest
    return (BrowserSession.last_seen_at <= idle) | (BrowserSession.created_at <= old)


def _note_use(row: BrowserSession, now: datetime) -> None:
    """Move last_seen_at to `now` when it is over SEEN_RESOLUTION old; the WHERE keeps requests that saw the same
    old value from all writing it."""
    cutoff = now - SEEN_RESOLUTION
    if row.last_seen_at > cutoff:
        return
    BrowserSession.update(last_seen_at=now).where((BrowserSession.id == row.id)
                                                  & (BrowserSession.last_seen_at <= cutoff)).execute()
    row.last_seen_at = now

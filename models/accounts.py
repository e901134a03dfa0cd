"""Owner accounts and the runtime tokens agent runtimes call with."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta

import peewee

from engine.tokens import hash_password, new_token, same_secret, token_digest, verify_password
from models.db import database, iso, utcnow, write_transaction
from models.sessions import end_sessions
from models.tables import ApiToken, BrowserSession, User

TOKEN_PREFIX = "vgl_"
#: longest label of a runtime token (the column's size)
TOKEN_LABEL_MAX = 100
#: a token's last_used_at is written at most this often, so a busy token does not write on every call
TOKEN_USE_RESOLUTION = timedelta(seconds=60)


class AccountError(ValueError):
    """An account operation that cannot be done; the message says why."""


class SetupDone(AccountError):
    """First-run setup was asked for, but an account exists already."""


def create_user(email: str, password: str) -> User:
    email, password_hash = _new_account(email, password)
    try:
        return User.create(email=email, password_hash=password_hash)
    except peewee.IntegrityError:
        raise AccountError(f"a user with email {email} already exists") from None


def create_first_user(email: str, password: str) -> User:
    """The owner account of first-run setup, made only while there is no account at all: two at once make one
    (the other raises SetupDone). The password is hashed before the lock, so the lock is held for two queries."""
    email, password_hash = _new_account(email, password)
    with write_transaction():  # SQLite: the write lock from BEGIN
        if isinstance(database.obj, peewee.PostgresqlDatabase):
            # Conflicts with itself and with any insert into users (`vigil user create` too); plain reads go on.
            database.execute_sql("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE")
        if has_users():
            raise SetupDone("an account exists already; sign in instead")
        return User.create(email=email, password_hash=password_hash)


def _new_account(email: str, password: str) -> tuple[str, str]:
    """The normalized email and the password's hash, or AccountError saying which rule failed."""
    email = normalize_email(email)
    if "@" not in email or len(email) > 320 or "\x00" in email:
        raise AccountError(f"{email!r} is not an email address")
    return email, _password_hash(password)


def _password_hash(password: str) -> str:
    """The hash of a new password, or AccountError when it is too short or holds a control character (a NUL or a
    newline can't be typed at a login form, so such a password could never be used)."""
    if len(password) < 8:
        raise AccountError("the password must be at least 8 characters")
    if any(ord(char) < 32 or ord(char) == 127 for char in password):
        raise AccountError("the password can't hold control characters (NUL, tab, newline); use printable ones")
    return hash_password(password)


def change_password(user: User, password: str, keep: BrowserSession | None = None) -> int:
    """Give `user` a new password and end their browser sessions but `keep` (the one that changed it, if any), in
    one transaction; how many sessions ended. AccountError when the password breaks the rules."""
    password_hash = _password_hash(password)
    with write_transaction():
        User.update(password_hash=password_hash).where(User.id == user.id).execute()
        return end_sessions(user, keep)


def authenticate(email: str, password: str) -> User | None:
    email = normalize_email(email)
    # no account has a NUL in its email (PostgreSQL text can't hold one, and the query would fail)
    user = User.get_or_none(User.email == email) if "\x00" not in email else None
    ok = verify_password(password, user.password_hash if user else _decoy_hash())
    return user if user and ok else None


@functools.cache
def _decoy_hash() -> str:
    """A hash to compare against when the email is unknown, so both answers take as long.

    Made on first use, not at import: every process imports this module, and scrypt takes ~0.1 s.
    """
    return hash_password("decoy password that matches nothing")


def find_user(email: str) -> User | None:
    return User.get_or_none(User.email == normalize_email(email))


def create_token(email: str, label: str = "") -> str:
    """A new runtime token for the user; only its digest is stored, so show it once."""
    user = find_user(email)
    if user is None:
        raise AccountError(f"no user with email {email}; create one with `vigil user create`")
    return issue_token(user, label)[1]


def issue_token(user: User, label: str = "") -> tuple[ApiToken, str]:
    """A new runtime token of `user`: its row and the token itself, which is not stored (only its digest)."""
    if not isinstance(label, str) or len(label.strip()) > TOKEN_LABEL_MAX or "\x00" in label:
        raise AccountError(f"the label must be text of at most {TOKEN_LABEL_MAX} characters, with no NUL (\\x00)")
    token = new_token(TOKEN_PREFIX)
    row = ApiToken.create(user=user, digest=token_digest(token), label=label.strip())
    return row, token


def user_tokens(user: User) -> list[ApiToken]:
    return list(ApiToken.select().where(ApiToken.user == user).order_by(ApiToken.id))


def revoke_token(user: User, token_id: int) -> bool:
    """Delete one of `user`'s tokens; it fails its next call. False when `user` has no such token."""
    return ApiToken.delete().where((ApiToken.id == token_id) & (ApiToken.user == user)).execute() == 1


def token_json(row: ApiToken) -> dict:
    """What the owner sees of a token: never the token, which is not stored."""
    return {"id": row.id, "label": row.label, "created_at": iso(row.created_at),
            "last_used_at": iso(row.last_used_at)}


def user_for_token(token: str, now: datetime | None = None) -> User | None:
    """The user a bearer token belongs to, or None; notes the use (see _note_use). Call outside a transaction."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = token_digest(token)
    row = ApiToken.select(ApiToken, User).join(User).where(ApiToken.digest == digest).first()
    if row is None or not same_secret(row.digest, digest):
        return None
    _note_use(row, now or utcnow())
    return row.user


def _note_use(row: ApiToken, now: datetime) -> None:
    """Move last_used_at to `now` when it is over TOKEN_USE_RESOLUTION old: a busy token costs one write a
    minute, not one a call; the WHERE keeps processes that saw the same old value from all writing it."""
    cutoff = now - TOKEN_USE_RESOLUTION
    if row.last_used_at is not None and row.last_used_at > cutoff:
        return
    stale = ApiToken.last_used_at.is_null() | (ApiToken.last_used_at <= cutoff)
    ApiToken.update(last_used_at=now).where((ApiToken.id == row.id) & stale).execute()


def has_users() -> bool:
    return User.select().exists()


def normalize_email(email: str) -> str:
    return email.strip().lower()

"""Owner accounts and the runtime tokens agent runtimes call with."""

from __future__ import annotations

import functools

import peewee

from engine.tokens import hash_password, new_token, same_secret, token_digest, verify_password
from models.tables import ApiToken, User

TOKEN_PREFIX = "vgl_"


class AccountError(ValueError):
    """An account operation that cannot be done; the message says why."""


def create_user(email: str, password: str) -> User:
    email = normalize_email(email)
    if "@" not in email or len(email) > 320:
        raise AccountError(f"{email!r} is not an email address")
    if len(password) < 8:
        raise AccountError("the password must be at least 8 characters")
    try:
        return User.create(email=email, password_hash=hash_password(password))
    except peewee.IntegrityError:
        raise AccountError(f"a user with email {email} already exists") from None


def authenticate(email: str, password: str) -> User | None:
    user = User.get_or_none(User.email == normalize_email(email))
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
    token = new_token(TOKEN_PREFIX)
    ApiToken.create(user=user, digest=token_digest(token), label=label)
    return token


def user_for_token(token: str) -> User | None:
    """The user a bearer token belongs to, or None."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = token_digest(token)
    row = ApiToken.select(ApiToken, User).join(User).where(ApiToken.digest == digest).first()
    if row is None or not same_secret(row.digest, digest):
        return None
    return row.user


def has_users() -> bool:
    return User.select().exists()


def normalize_email(email: str) -> str:
    return email.strip().lower()

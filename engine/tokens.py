"""Secrets as Vigil hands them out: random tokens stored only as digests, and password hashes."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

#: scrypt cost: 2**15 * 8 * 128 bytes = 32 MiB of memory per hash.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
_SCRYPT_MAXMEM = 64 * 1024 * 1024


def new_token(prefix: str) -> str:
    """A 256-bit random token with a readable prefix (`vgl_…`)."""
    return f"{prefix}{secrets.token_urlsafe(32)}"


def token_digest(token: str) -> str:
    """What is stored and looked up instead of the token itself."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def same_secret(a: str | bytes, b: str | bytes) -> bool:
    """Constant-time comparison that also accepts non-ASCII text."""
    a = a.encode("utf-8") if isinstance(a, str) else a
    b = b.encode("utf-8") if isinstance(b, str) else b
    return hmac.compare_digest(a, b)


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return "$".join(["scrypt", str(SCRYPT_N), str(SCRYPT_R), str(SCRYPT_P), _b64(salt), _b64(digest)])


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = _scrypt(password, base64.b64decode(salt), int(n), int(r), int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                          maxmem=_SCRYPT_MAXMEM, dklen=32)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")

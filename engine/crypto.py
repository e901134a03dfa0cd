"""Secrets at rest: Fernet encryption with a keyring that allows key rotation.

The newest key encrypts; any key in the ring decrypts, so old tokens stay readable while
`rotate` re-encrypts them under the newest key. Messages never contain a key or a token.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_HKDF_INFO = b"vigil-encryption"


class DecryptError(Exception):
    """A stored secret could not be decrypted with any key in the keyring."""

    def __init__(self, message: str = "") -> None:
        message = message or "A stored secret could not be decrypted with any configured encryption key."
        super().__init__(message)
        self.message = message


def derive_key(secret_key: str) -> str:
    """One Fernet key derived from SECRET_KEY with HKDF-SHA256; the same secret gives the same key."""
    if not secret_key:
        raise ValueError("SECRET_KEY is empty, so no encryption key can be derived from it.")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO)
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode("utf-8"))).decode("ascii")


def _fernet(key: str, position: int) -> Fernet:
    try:
        return Fernet(key.encode("utf-8") if isinstance(key, str) else key)
    except (ValueError, TypeError):
        # `from None`: the original exception could carry the key in its context.
        raise ValueError(f"Encryption key number {position} in ENCRYPTION_KEYS is not a valid Fernet key "
                         "(32 url-safe base64-encoded bytes).") from None


class Keyring:
    """Encrypts with the first (newest) key and decrypts with any of them."""

    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise ValueError("The keyring needs at least one encryption key.")
        self._fernet = MultiFernet([_fernet(key, position) for position, key in enumerate(keys, start=1)])
        self.size = len(keys)

    @classmethod
    def from_settings(cls, secret_key: str, encryption_keys: str) -> "Keyring":
        """ENCRYPTION_KEYS (comma-separated, newest first) or, when empty, one key derived from SECRET_KEY."""
        keys = [part.strip() for part in (encryption_keys or "").split(",")]
        if not any(keys):
            return cls([derive_key(secret_key)])
        for position, key in enumerate(keys, start=1):
            if not key:
                raise ValueError(f"Encryption key number {position} in ENCRYPTION_KEYS is empty.")
        return cls(keys)

    def __repr__(self) -> str:
        return f"<Keyring with {self.size} key(s)>"

    def encrypt(self, text: str) -> str:
        """A Fernet token (url-safe text) for `text`, under the newest key."""
        return self._fernet.encrypt(text.encode("utf-8")).decode("ascii")

    def decrypt(self, token: str) -> str:
        """The text behind a token made by any key in the ring; DecryptError otherwise."""
        try:
            raw = self._fernet.decrypt(_token_bytes(token))
            return raw.decode("utf-8")
        except (InvalidToken, UnicodeDecodeError, TypeError, ValueError):
            raise DecryptError() from None

    def rotate(self, token: str) -> str:
        """The same secret re-encrypted under the newest key; DecryptError if no key opens it."""
        try:
            return self._fernet.rotate(_token_bytes(token)).decode("ascii")
        except (InvalidToken, TypeError, ValueError):
            raise DecryptError() from None


def _token_bytes(token: str | bytes) -> bytes:
    if isinstance(token, bytes):
        return token
    if not isinstance(token, str):
        raise TypeError("token")
    return token.encode("ascii")  # non-ASCII -> UnicodeEncodeError, a ValueError

"""Each account's judge model catalog, edited in Settings → Models. Keys are stored only encrypted.

An entry belongs to one account: listed, saved, deleted and resolved only for it (m0024). Its base URL is an
outbound address an account chose, so it goes through the SSRF guard when it is saved (check_base_url) and again
when it is called (engine/judge_transport.py); JUDGE_ALLOW_PRIVATE_URLS lets a local model server through.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from engine.addresses import check_url, literal_reason, resolve_allowed
from engine.crypto import Keyring
from engine.errors import BlockedURL, FetchError
from models.db import utcnow
from models.tables import JudgeModel

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_LOCAL_HINT = ("an account's judge model must be on a public address (the operator lets a local model server "
               "through with JUDGE_ALLOW_PRIVATE_URLS)")


class CatalogError(ValueError):
    """A catalog entry that can't be saved; the message says which field to fix."""


def entries(user_id: int) -> list[JudgeModel]:
    """The account's own entries, by name."""
    return list(JudgeModel.select().where(JudgeModel.user == user_id).order_by(JudgeModel.name))


def find_entry(user_id: int, name: str) -> JudgeModel | None:
    return JudgeModel.get_or_none((JudgeModel.user == user_id) & (JudgeModel.name == name))


def check_base_url(base_url: str, allow_private: bool) -> str:
    """The base URL as it will be stored, or CatalogError saying why it can't be. Resolves the host name, so
    call it with no database connection held; a name that does not resolve now is left to the call."""
    base_url = _base_url_syntax(base_url, allow_private)
    parts = urlsplit(base_url)
    try:
        resolve_allowed(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
                        allow_loopback=False, allow_private=allow_private)
    except BlockedURL as exc:
        raise CatalogError(f"Base URL: {exc.message} The operator lets a local model server through with "
                           "JUDGE_ALLOW_PRIVATE_URLS.") from None
    except FetchError:
        pass  # DNS failed: not an address we would refuse; the call says the model could not be reached
    return base_url


def save_entry(keyring: Keyring, user_id: int, name: str, base_url: str, model: str, api_key: str = "",
               api_version: str = "", *, allow_private: bool = False) -> JudgeModel:
    """Create the account's entry, or update it. A new entry without a key stores none (a local server); an empty
    key on update keeps the one this account stored."""
    name, base_url, model = name.strip(), _base_url_syntax(base_url, allow_private), model.strip()
    if not _NAME.fullmatch(name):
        raise CatalogError("Name: letters, digits, '.', '_' or '-', up to 100 characters.")
    if not model:
        raise CatalogError("Model: the provider's model name, such as gpt-4o-mini.")
    for field, value in (("Model", model), ("API key", api_key), ("API version", api_version)):
        if "\x00" in value:  # PostgreSQL text can't hold it, nor can the request's header
            raise CatalogError(f"{field}: remove the NUL character (\\x00).")
    existing = find_entry(user_id, name)
    fields = {"base_url": base_url, "model": model, "api_version": api_version.strip(), "updated_at": utcnow()}
    if api_key.strip():
        fields["api_key_encrypted"] = keyring.encrypt(api_key.strip())
    if existing is None:
        return JudgeModel.create(user=user_id, name=name, **{"api_key_encrypted": "", **fields})
    JudgeModel.update(fields).where(JudgeModel.id == existing.id).execute()
    return JudgeModel.get_by_id(existing.id)


def delete_entry(user_id: int, name: str) -> bool:
    """Delete the account's entry of that name; False when it has none (another account's is not its)."""
    if not _NAME.fullmatch(name):
        return False  # no entry has such a name (and a NUL in it would fail the query)
    query = JudgeModel.delete().where((JudgeModel.user == user_id) & (JudgeModel.name == name))
    return query.execute() == 1


def _base_url_syntax(base_url: str, allow_private: bool) -> str:
    """The base URL without its trailing slash, checked without DNS: an http(s) URL whose host, if written as an
    address (or localhost), is one the guard allows."""
    base_url = base_url.strip().rstrip("/")
    try:
        check_url(base_url)
    except BlockedURL:
        raise CatalogError("Base URL: an http(s) address such as https://api.openai.com/v1.") from None
    reason = literal_reason(base_url, allow_loopback=False, allow_private=allow_private)
    if reason:
        raise CatalogError(f"Base URL: {urlsplit(base_url).hostname} is {reason}; {_LOCAL_HINT}.")
    return base_url

"""The judge model catalog, edited in Settings → Models. Keys are stored only encrypted."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from engine.crypto import Keyring
from models.db import utcnow
from models.tables import JudgeModel

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


class CatalogError(ValueError):
    """A catalog entry that can't be saved; the message says which field to fix."""


def entries() -> list[JudgeModel]:
    return list(JudgeModel.select().order_by(JudgeModel.name))


def save_entry(keyring: Keyring, name: str, base_url: str, model: str, api_key: str = "",
               api_version: str = "") -> JudgeModel:
    """Create the entry, or update it; an empty key on update keeps the stored one."""
    name, base_url, model = name.strip(), base_url.strip().rstrip("/"), model.strip()
    if not _NAME.fullmatch(name):
        raise CatalogError("Name: letters, digits, '.', '_' or '-', up to 100 characters.")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CatalogError("Base URL: an http(s) address such as https://api.openai.com/v1.")
    if not model:
        raise CatalogError("Model: the provider's model name, such as gpt-4o-mini.")
    existing = JudgeModel.get_or_none(JudgeModel.name == name)
    if existing is None and not api_key.strip():
        raise CatalogError("API key: required for a new model.")
    fields = {"base_url": base_url, "model": model, "api_version": api_version.strip(), "updated_at": utcnow()}
    if api_key.strip():
        fields["api_key_encrypted"] = keyring.encrypt(api_key.strip())
    if existing is None:
        return JudgeModel.create(name=name, **fields)
    JudgeModel.update(fields).where(JudgeModel.id == existing.id).execute()
    return JudgeModel.get_by_id(existing.id)


def delete_entry(name: str) -> bool:
    return JudgeModel.delete().where(JudgeModel.name == name).execute() == 1

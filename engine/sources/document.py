"""document: one of the account's documents, kept in Vigil through /api/documents (seed 001's dynadata_doc).

Nothing is fetched: every PUT of the document queues a check of the monitors watching it, and a sweep
re-reads it now and then (models/documents.py). The check is CEL over `doc`, the stored JSON object.
"""

from __future__ import annotations

import re

from dataclasses import replace

from engine.content import Content, json_content, sha256_hex
from engine.errors import SpecError
from engine.http import FetchError
from engine.sources.base import SourceIO, SourcePolicy, SourceSpec

FIELDS = frozenset({"type", "item_type", "item_id"})
#: the platform's own published types; an account's custom types are ct:<name>
BUILTIN_TYPES = ("transcription_jobs", "transcode_jobs", "ingest_jobs")
CUSTOM_PREFIX = "ct:"
_CUSTOM_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
MAX_ITEM_ID_CHARS = 200


def parse(raw: dict, policy: SourcePolicy) -> SourceSpec:
    return SourceSpec(type="document", item_type=check_item_type(raw.get("item_type"), "source.item_type"),
                      item_id=check_item_id(raw.get("item_id"), "source.item_id"))


def check_item_type(value: object, name: str = "item_type") -> str:
    """A document type Vigil keeps; raises SpecError naming the ones allowed."""
    if isinstance(value, str) and (value in BUILTIN_TYPES or (
            value.startswith(CUSTOM_PREFIX) and _CUSTOM_NAME.fullmatch(value[len(CUSTOM_PREFIX):]))):
        return value
    raise SpecError(f"{name} must be one of {', '.join(BUILTIN_TYPES)}, or ct:<name> for a custom type "
                    f"(lower-case letters, digits, _ . -; up to 64 characters) (got {value!r}).")


def check_item_id(value: object, name: str = "item_id") -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{name} is required: the document's id, as the platform stored it.")
    if len(value) > MAX_ITEM_ID_CHARS or not value.isprintable() or value != value.strip():
        raise SpecError(f"{name} must be printable text without surrounding spaces, at most "
                        f"{MAX_ITEM_ID_CHARS} characters (got {value[:40]!r}).")
    return value


def read(spec: SourceSpec, io: SourceIO) -> bytes:
    raise FetchError("A document watch reads the document Vigil stores; nothing is fetched.")


def normalize(spec: SourceSpec, body: bytes, max_text_bytes: int) -> Content:
    """The document; its digest covers all of it, though the text a wake may quote is cut at max_text_bytes."""
    return replace(json_content(body, max_text_bytes), fingerprint="document:" + sha256_hex(body))

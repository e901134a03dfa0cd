"""Documents the platform keeps in Vigil, versioned for optimistic concurrency, and the monitors watching them.

A write bumps the claim of every armed monitor watching the document, in the same transaction, so the checks
the caller then queues are the only current ones (models/claims.py): however many writes land at once, each
watch evaluates the latest version, and a check message that is lost leaves the sweep to read it again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import peewee

from models.db import database, iso, write_transaction
from models.tables import ACTIVE, Document, Monitor

#: a document is a JSON object of at most this many bytes, as stored (DOCUMENT_MAX_BYTES)
DEFAULT_MAX_BYTES = 1024 * 1024


class DocumentRefused(ValueError):
    """A write or read the documents API answers with `status`; str() says what to fix."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Written:
    document: Document
    created: bool
    #: (monitor id, claim seq) of each armed watch of this document, for the caller to queue after commit
    claims: list[tuple[str, int]]


def watch_key(user_id: int, item_type: str, item_id: str) -> str:
    return f"{user_id}:{item_type}:{item_id}"


def encode(body: object, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The document as stored: canonical JSON (sorted keys), refused unless it is an object within max_bytes."""
    if not isinstance(body, dict):
        raise DocumentRefused(f"A document is a JSON object; this body is {_json_kind(body)}.", 400)
    try:
        text = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:
        raise DocumentRefused("The document holds NaN or Infinity, which JSON has no numbers for; send null or a "
                              "string instead.", 400) from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise DocumentRefused("The document holds text that is not valid Unicode (a lone surrogate such as "
                              "\\ud800); send well-formed UTF-8.", 400) from None
    if size > max_bytes:
        raise DocumentRefused(f"The document is {size:,} bytes; a document may be at most {max_bytes:,} bytes "
                              "(DOCUMENT_MAX_BYTES).", 413)
    return text


def etag(version: int) -> str:
    return f'"{version}"'


def matches(if_match: str, version: int) -> bool:
    """Whether an If-Match header names this version: "3", W/"3", a list of them, or *."""
    wanted = {part.strip().removeprefix("W/").strip('"') for part in if_match.split(",")}
    return "*" in wanted or str(version) in wanted


def put_document(user_id: int, item_type: str, item_id: str, text: str, if_match: str | None,
                 if_none_match: str | None, now: datetime) -> Written:
    """Store a new version (or the first); 412 when If-Match names another version or If-None-Match: * finds one."""
    with write_transaction():
        current = _locked(user_id, item_type, item_id)
        if current is None:
            if if_match is not None:
                raise DocumentRefused(f"There is no document {item_type}/{item_id} yet, so If-Match can't hold; "
                                      "leave If-Match out to create it.", 412)
            document = _insert(user_id, item_type, item_id, text, now)
            created = document is not None
            current = document or _locked(user_id, item_type, item_id)  # created meanwhile by another write
        else:
            created = False
        if not created:
            if if_none_match is not None and if_none_match.strip() == "*":
                raise DocumentRefused(f"The document {item_type}/{item_id} exists (version {current.version}) and "
                                      "If-None-Match: * asks to create it only; read it first, then write with "
                                      "If-Match.", 412)
            if if_match is not None and not matches(if_match, current.version):
                raise DocumentRefused(f"The document {item_type}/{item_id} is at version {current.version}, not "
                                      f"{if_match.strip()}; read it again (GET gives its ETag) and retry with "
                                      "that version in If-Match.", 412)
            Document.update(body=text, version=Document.version + 1, updated_at=now) \
                .where(Document.id == current.id).execute()
            current.body, current.version, current.updated_at = text, current.version + 1, now
            document = current
        return Written(document, created, expedite(watch_key(user_id, item_type, item_id), now))


def _locked(user_id: int, item_type: str, item_id: str) -> Document | None:
    query = Document.select().where((Document.user == user_id) & (Document.item_type == item_type)
                                    & (Document.item_id == item_id))
    if database.for_update:
        query = query.for_update()
    return query.first()


def _insert(user_id: int, item_type: str, item_id: str, text: str, now: datetime) -> Document | None:
    try:
        with database.atomic():
            return Document.create(user=user_id, item_type=item_type, item_id=item_id, version=1, body=text,
                                   created_at=now, updated_at=now)
    except peewee.IntegrityError:  # another write created it between our look and our insert
        return None


def expedite(key: str, now: datetime) -> list[tuple[str, int]]:
    """Claim every armed monitor watching `key` for a check now; returns the claims to queue."""
    watching = Monitor.select(Monitor.id).where((Monitor.watch_key == key) & (Monitor.status == ACTIVE))
    ids = [row.id for row in watching]
    if not ids:
        return []
    Monitor.update(claim_seq=Monitor.claim_seq + 1, check_count=Monitor.check_count + 1,
                   prev_checked_at=Monitor.last_checked_at, last_checked_at=now) \
        .where(Monitor.id.in_(ids) & (Monitor.status == ACTIVE)).execute()
    return [(row.id, row.claim_seq) for row in Monitor.select(Monitor.id, Monitor.claim_seq)
            .where(Monitor.id.in_(ids) & (Monitor.status == ACTIVE))]


def get_document(user_id: int, item_type: str, item_id: str) -> Document | None:
    return Document.get_or_none((Document.user == user_id) & (Document.item_type == item_type)
                                & (Document.item_id == item_id))


def delete_document(user_id: int, item_type: str, item_id: str, if_match: str | None) -> None:
    """Delete it; 404 when there is none, 412 when If-Match names another version. Its watches stay armed."""
    with write_transaction():
        current = _locked(user_id, item_type, item_id)
        if current is None:
            raise DocumentRefused(f"There is no document {item_type}/{item_id}.", 404)
        if if_match is not None and not matches(if_match, current.version):
            raise DocumentRefused(f"The document {item_type}/{item_id} is at version {current.version}, not "
                                  f"{if_match.strip()}; nothing was deleted.", 412)
        current.delete_instance()
        # a document written again later is a new fact: its watches start over, as if the condition were false
        Monitor.update(check_state={"holds": False}, raw_hash="", content_hash="") \
            .where((Monitor.watch_key == watch_key(user_id, item_type, item_id)) & (Monitor.status == ACTIVE)).execute()


_BODY_SQL = "SELECT body, version FROM documents WHERE user_id = {p} AND item_type = {p} AND item_id = {p}"


def stored_body(user_id: int, item_type: str, item_id: str) -> tuple[bytes, int] | None:
    """What a check reads: the document's stored JSON and its version, or None while there is none."""
    row = database.execute_sql(_BODY_SQL.format(p=database.param), (user_id, item_type, item_id)).fetchone()
    return None if row is None else (row[0].encode("utf-8"), row[1])


def document_json(document: Document) -> dict:
    return {"item_type": document.item_type, "item_id": document.item_id, "version": document.version,
            "created_at": iso(document.created_at), "updated_at": iso(document.updated_at),
            "doc": json.loads(document.body)}


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else "not JSON"

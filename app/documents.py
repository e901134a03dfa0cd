"""PUT/GET/DELETE /api/documents/{item_type}/{item_id}: records the platform keeps in Vigil, and the watches on them.

A PUT stores a new version and, in the same transaction, claims every armed watch of the document; their checks
are queued once it has committed (the expedited check). ETag is the version; If-Match makes a write conditional.
"""

from __future__ import annotations

import json

from litestar import Controller, Request, Response, delete, get, put
from litestar.concurrency import sync_to_thread
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.params import FromPath

from app.auth import api_user, check_csrf
from app.openapi import errors
from engine.errors import SpecError
from engine.sources.document import check_item_id, check_item_type
from models import connection, utcnow
from models.documents import (
    DocumentRefused, delete_document, document_json, encode, etag, get_document, matches, put_document,
)
from tasks.checks import queue_claims
from tasks.runtime import current

NO_STORE = {"Cache-Control": "no-store"}


class DocumentsController(Controller):
    path = "/api/documents"

    @put("/{item_type:str}/{item_id:path}", status_code=200, responses=errors(400, 401, 403, 412, 413, 429))
    async def put_one(self, request: Request, item_type: FromPath[str], item_id: FromPath[str]) -> Response:
        """Store a version of the document (a JSON object); 201 for the first. Answers its version and ETag."""
        body = await request.body()
        return await sync_to_thread(_put, request, item_type, item_id, body)

    @get("/{item_type:str}/{item_id:path}", sync_to_thread=True, responses=errors(400, 401, 404, 429))
    def get_one(self, request: Request, item_type: FromPath[str], item_id: FromPath[str]) -> Response:
        """The document with its version; ETag is the version, and If-None-Match with it answers 304."""
        item_type, item_id = _names(item_type, item_id)
        user, _ = api_user(request)
        with connection():
            document = get_document(user.id, item_type, item_id)
        if document is None:
            raise NotFoundException(f"There is no document {item_type}/{item_id}.")
        headers = {**NO_STORE, "ETag": etag(document.version)}
        if_none_match = request.headers.get("if-none-match")
        if if_none_match and matches(if_none_match, document.version):
            return Response(b"", status_code=304, headers=headers)
        return Response(document_json(document), headers=headers)

    @delete("/{item_type:str}/{item_id:path}", status_code=204, sync_to_thread=True,
            responses=errors(400, 401, 403, 404, 412, 429))
    def delete_one(self, request: Request, item_type: FromPath[str], item_id: FromPath[str]) -> None:
        """Delete it (If-Match makes that conditional). Watches of it stay armed, waiting for a new one."""
        item_type, item_id = _names(item_type, item_id)
        user, from_session = api_user(request)
        if from_session:
            check_csrf(request, None)
        with connection():
            try:
                delete_document(user.id, item_type, item_id, request.headers.get("if-match"))
            except DocumentRefused as exc:
                raise HTTPException(detail=str(exc), status_code=exc.status) from None


def _put(request: Request, item_type: str, item_id: str, body: bytes) -> Response:
    item_type, item_id = _names(item_type, item_id)
    user, from_session = api_user(request)
    if from_session:
        check_csrf(request, None)
    settings = current().settings
    try:
        text = encode(_parse(body), settings.DOCUMENT_MAX_BYTES)
        now = utcnow()
        with connection():
            written = put_document(user.id, item_type, item_id, text, request.headers.get("if-match"),
                                   request.headers.get("if-none-match"), now)
    except DocumentRefused as exc:
        return _refused(exc)
    queue_claims(written.claims, now)
    document = written.document
    return Response({"item_type": item_type, "item_id": item_id, "version": document.version,
                     "updated_at": document_json(document)["updated_at"], "watches_checked": len(written.claims)},
                    status_code=201 if written.created else 200, headers={**NO_STORE, "ETag": etag(document.version)})


def _parse(body: bytes) -> object:
    if not body.strip():
        raise DocumentRefused("The body is empty; send the document as a JSON object.", 400)
    try:
        return json.loads(body, parse_constant=_no_constant)
    except _Constant as exc:
        raise DocumentRefused(f"The document holds {exc}, which JSON has no numbers for; send null or a string "
                              "instead.", 400) from None
    except RecursionError:
        raise DocumentRefused("The document is nested too deeply to store.", 400) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise DocumentRefused(f"The body is not valid JSON ({str(exc)[:120]}); send the document as a JSON "
                              "object.", 400) from None


class _Constant(ValueError):
    pass


def _no_constant(name: str):
    raise _Constant(name)


def _names(item_type: str, item_id: str) -> tuple[str, str]:
    item_id = item_id.removeprefix("/")
    try:
        return check_item_type(item_type), check_item_id(item_id)
    except SpecError as exc:
        raise ValidationException(str(exc)) from None


def _refused(exc: DocumentRefused) -> Response:
    return Response({"detail": str(exc), "status_code": exc.status}, status_code=exc.status, headers=NO_STORE)

"""Who is heard at all: an API call without any credential is answered 401 before its body is read or checked,
and an integer id no row can have is 404 before it reaches the database.

Handlers still authenticate properly (a token that names no account is 401 there); this only makes sure that a
caller with nothing gets 401, not a 400 that describes what the body should have been.
"""

from __future__ import annotations

import json

from litestar import Request
from litestar.exceptions import NotFoundException
from litestar.types import ASGIApp, Receive, Scope, Send

#: API paths a caller without a token or session may use: each checks a credential of its own (a link's token in
#: the path, a device token, a pairing code) or is public
OPEN_PREFIXES = ("/api/triggers/", "/api/approvals/", "/api/runner/", "/api/tool/schema")
SESSION_COOKIE = b"vigil_session"
#: the largest id a row can have (ids are 32-bit integer columns on PostgreSQL)
MAX_ID = 2**31 - 1
_UNAUTHORIZED = json.dumps({"status_code": 401, "detail": "A valid runtime token is required: send Authorization: "
                                                          "Bearer <token>."}).encode()


def _credentialed(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"authorization" and value[:7].lower() == b"bearer " and value[7:].strip():
            return True
        if name == b"cookie" and SESSION_COOKIE + b"=" in value:
            return True
    return False


def needs_credential(path: str) -> bool:
    return path.startswith("/api/") and not path.startswith(OPEN_PREFIXES)


def credential_gate(app: ASGIApp) -> ASGIApp:
    """Litestar middleware: 401 at once for an API call that carries neither a bearer token nor a session."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and needs_credential(scope["path"]) and not _credentialed(scope):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                    (b"cache-control", b"no-store"),
                                    (b"content-length", str(len(_UNAUTHORIZED)).encode())]})
            await send({"type": "http.response.body", "body": _UNAUTHORIZED})
            return
        await app(scope, receive, send)

    return middleware


async def ids_in_range(request: Request) -> None:
    """before_request: an integer path id outside 1..MAX_ID names nothing (and would overflow the column): 404."""
    for value in request.path_params.values():
        if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= MAX_ID:
            raise NotFoundException("Nothing has this id.")

"""Who is heard at all: an API call without any credential is answered 401 before its body is read or checked,
and an integer path id no row can have is 404 before it reaches the database (one middleware, after routing, so
it costs no hook of its own per request).

Handlers still authenticate properly (a token that names no account is 401 there); this only makes sure that a
caller with nothing gets 401, not a 400 that describes what the body should have been.
"""

from __future__ import annotations

import json

from litestar.types import ASGIApp, Receive, Scope, Send

#: API paths a caller without a token or session may use: each checks a credential of its own (a link's token in
#: the path, a device token, a pairing code) or is public
OPEN_PREFIXES = ("/api/triggers/", "/api/approvals/", "/api/runner/", "/api/tool/schema")
SESSION_COOKIE = b"vigil_session"
#: the largest id a row can have (ids are 32-bit integer columns on PostgreSQL)
MAX_ID = 2**31 - 1
_NO_SUCH_ID = json.dumps({"status_code": 404, "detail": "Nothing has this id."}).encode()
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
            await _answer(send, 401, _UNAUTHORIZED, (b"www-authenticate", b"Bearer"))
            return
        if not ids_in_range(scope.get("path_params") or {}):
            await _answer(send, 404, _NO_SUCH_ID)
            return
        await app(scope, receive, send)

    return middleware


def ids_in_range(path_params: dict) -> bool:
    """Whether every integer path id is within 1..MAX_ID: one outside names nothing (and would overflow the
    column), so it is 404 before it reaches the database."""
    return all(not isinstance(value, int) or isinstance(value, bool) or 1 <= value <= MAX_ID
               for value in path_params.values())


async def _answer(send: Send, status: int, body: bytes, *headers: tuple[bytes, bytes]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"cache-control", b"no-store"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})

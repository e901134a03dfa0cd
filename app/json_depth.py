"""A JSON body nested deeper than MAX_DEPTH is refused with 400 before any parser sees it.

Parsers recurse: msgspec (Litestar's bodies), json (trigger checks, MCP's SDK) and the code that walks a parsed
body all fail with RecursionError somewhere near 1,000 levels, which answered 500. No request Vigil serves needs
more than a few levels, so every JSON body (application/json, or +json) is looked at once, as it arrives, before
the app reads it: a body with at most MAX_DEPTH brackets can't be too deep and costs two byte counts; only a body
with more brackets than that is scanned, and the scan visits brackets, quotes and backslashes only.
"""

from __future__ import annotations

import json
import re

from litestar.types import ASGIApp, Message, Receive, Scope, Send

#: the deepest nesting of objects and arrays a JSON body may have
MAX_DEPTH = 64
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')
_REFUSED = json.dumps({"detail": f"The JSON body is nested deeper than {MAX_DEPTH} levels of objects and arrays; "
                                 "send a flatter document."}).encode()


def too_deep(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether objects and arrays in `body` nest deeper than `limit` (brackets inside strings don't count)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth, in_string, skip = 0, False, -1
    for found in _STRUCTURE.finditer(body):
        at = found.start()
        if at == skip:
            continue  # the character a backslash escapes
        char = body[at]
        if in_string:
            if char == 0x5C:  # backslash
                skip = at + 1
            elif char == 0x22:
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        elif char in (0x5D, 0x7D):
            depth -= 1
    return False


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return False


def json_depth(max_bytes: int):
    """Litestar middleware: reads a JSON body whole (the app would, to parse it), refuses it if too deep, and hands
    the same bytes on. A body past `max_bytes` (API_MAX_BODY_BYTES) is passed on as it came, for the app's 413."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS") or not _is_json(scope) \
                    or _declared_length(scope) > max_bytes:  # the app answers 413 without waiting for the body
                await app(scope, receive, send)
                return
            messages, body, whole = await _read(receive, max_bytes)
            if whole and too_deep(body):
                await _refuse(send)
                return
            replay = iter(messages)

            async def replayed() -> Message:
                return next(replay, None) or await receive()

            await app(scope, replayed, send)

        return middleware

    return wrap


def _declared_length(scope: Scope) -> int:
    """The request's Content-Length, or 0 when it has none (chunked) or it is not a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


async def _read(receive: Receive, max_bytes: int) -> tuple[list[Message], bytes, bool]:
    """The messages read, the body they carry, and whether that is the whole body (not cut at `max_bytes`)."""
    messages: list[Message] = []
    body = bytearray()
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, bytes(body), False
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return messages, bytes(body), True
        if len(body) > max_bytes:
            return messages, bytes(body), False


async def _refuse(send: Send) -> None:
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"), (b"cache-control", b"no-store"),
                            (b"content-length", str(len(_REFUSED)).encode())]})
    await send({"type": "http.response.body", "body": _REFUSED})

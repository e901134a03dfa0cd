"""A runner's POST of records, served below Litestar (issue 27).

A busy stream POSTs a batch every 200 ms, and each went through the whole Litestar request path: five
middlewares, the router, the body's extraction and validation, the response object, the headers hook. By
per-thread CPU and py-spy that was the larger part of the web's cost per batch on the event loop. This ASGI
wrapper answers exactly that route (`POST /api/runner/runs/{run_id}/records`) itself and hands everything else
to the app unchanged. What the middlewares do for this route it does too, in the same words: the body is capped
at API_MAX_BODY_BYTES (413), refused when nested deeper than app/json_depth.py allows (400), the work runs in the
public lane's threads (app/capacity.py) — embedded, a small batch is stored on the event loop itself when SQLite's
write lock is free at once (app/runner.store_records_now) — an outage answers app/unavailable.py's 503, and every answer carries
app/headers.py's headers. Checking and storing are app/runner.py's own functions, which its Litestar route (what
the in-process test client and the OpenAPI document see) calls as well.
"""

from __future__ import annotations

import asyncio
import logging
import re

import msgspec
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Receive, Scope, Send

from app.capacity import PUBLIC, lane_pool
from app.headers import HEADERS
from app.json_depth import MAX_DEPTH, too_deep
from app.runner import checked_records, store_records_answer, store_records_now
from app.unavailable import BODY as UNAVAILABLE_BODY, RETRY_AFTER
from tasks.broker import UNAVAILABLE

log = logging.getLogger(__name__)

#: the route Litestar declares as /api/runner/runs/{run_id:str}/records
PATH = re.compile(r"/api/runner/runs/([^/]+)/records")


def records_route(app: ASGIApp, max_body: int) -> ASGIApp:
    """`app`, with the runner's records POST answered before it."""

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            match = PATH.fullmatch(scope["path"])
            if match is not None:
                await _records(scope, receive, send, match.group(1), max_body)
                return
        await app(scope, receive, send)

    return asgi


class _Refused(Exception):
    def __init__(self, status: int, detail: str, *headers: tuple[bytes, bytes]) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


async def _records(scope: Scope, receive: Receive, send: Send, run_id: str, max_body: int) -> None:
    try:
        body = await _body(scope, receive, max_body)
        if too_deep(body):
            raise _Refused(400, f"The JSON body is nested deeper than {MAX_DEPTH} levels of objects and arrays; "
                                "send a flatter document.")
        try:
            data = msgspec.json.decode(body)
        except msgspec.DecodeError:
            raise _Refused(400, "The body is not JSON: send {\"records\": [{\"seq\", \"kind\", …}, …]}.") from None
        records = checked_records(data, len(body))
        token = _bearer(scope)
        done = store_records_now(token, run_id, records)  # embedded, a small batch: here, without a thread
        if done is None:
            done = await asyncio.get_running_loop().run_in_executor(lane_pool(PUBLIC), store_records_answer, token,
                                                                    run_id, records)
        answer, status = done
        await _send(send, status, answer)
    except HTTPException as exc:  # checked_records' ValidationException, the 401 of an unknown token
        await _send(send, exc.status_code, {"status_code": exc.status_code, "detail": exc.detail},
                    *((name.lower().encode(), value.encode()) for name, value in (exc.headers or {}).items()))
    except _Refused as exc:  # worded as app/json_depth.py and app/__init__._too_large word them
        await _send(send, exc.status, {"detail": exc.detail}, *exc.headers)
    except UNAVAILABLE:
        await _send(send, 503, UNAVAILABLE_BODY, (b"retry-after", str(RETRY_AFTER).encode()))
    except _Gone:
        return  # the runner hung up before its body arrived: nobody to answer
    except Exception:  # noqa: BLE001 - as Litestar does: logged with its traceback, a bare 500 to the caller
        log.exception("a runner's records POST failed")
        await _send(send, 500, {"status_code": 500, "detail": "Internal Server Error"})


class _Gone(Exception):
    """The client disconnected while its body was read."""


async def _body(scope: Scope, receive: Receive, cap: int) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length":
            if not value.isdigit() or int(value) > cap:
                raise _too_large(cap)
            break
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise _too_large(cap)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _too_large(cap: int) -> _Refused:
    return _Refused(413, f"The request body is over {cap} bytes (API_MAX_BODY_BYTES); send less.",
                    (b"connection", b"close"))


def _bearer(scope: Scope) -> str | None:
    """The token of `Authorization: Bearer …`, as app/auth.bearer_token reads it."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


async def _send(send: Send, status: int, body: dict, *headers: tuple[bytes, bytes]) -> None:
    payload = msgspec.json.encode(body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            (b"cache-control", b"no-store"), *headers, *HEADERS]})
    await send({"type": "http.response.body", "body": payload})

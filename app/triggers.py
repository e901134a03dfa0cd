"""POST /api/triggers/{token}: a sender wakes a conversation. No model runs here: the delivery is stored,
answered 202, and handed to the relay that queues it for a worker (tasks/deliveries.py)."""

from __future__ import annotations

import time

from litestar import Controller, Request, Response, post, route
from litestar.concurrency import sync_to_thread
from litestar.enums import HttpMethod
from litestar.params import FromPath

from adapters.metrics import TRIGGER_DELIVERIES
from app.openapi import Accepted, ErrorBody, errors
from engine.signatures import delivery_id, is_github_ping, verify
from models import connection, utcnow
from models.triggers import LinkEnded, find_link, is_live, store_delivery
from tasks.deliveries import relay
from tasks.runtime import current

NOT_FOUND = {"detail": "Not found."}


def _answer(status: int, body: dict) -> Response:
    return Response(body, status_code=status, headers={"Cache-Control": "no-store"})


class TriggersController(Controller):
    path = "/api/triggers"

    @route("/{token:str}", http_method=[HttpMethod.GET, HttpMethod.HEAD], status_code=405, sync_to_thread=False,
           responses=errors())
    def preview(self, token: FromPath[str]) -> Response[ErrorBody]:
        """Link previews and mail scanners fetch links: nothing happens on GET."""
        return _answer(405, {"detail": "Trigger links take POST only; a GET (a link preview, say) does nothing."})

    # request_max_body_size=None: the link caps its body itself, at TRIGGER_MAX_PAYLOAD_BYTES
    @post("/{token:str}", status_code=202, responses=errors(400, 401, 404, 413, 429), request_max_body_size=None)
    async def deliver(self, request: Request, token: FromPath[str]) -> Response[Accepted]:
        settings = current().settings
        body = await _read_capped(request, settings.TRIGGER_MAX_PAYLOAD_BYTES)
        if body is None:
            return _counted(_answer(413, {"detail": f"The body is over {settings.TRIGGER_MAX_PAYLOAD_BYTES} bytes."}))
        headers = {name.lower(): value for name, value in request.headers.items()}
        return _counted(await sync_to_thread(_deliver, token, headers, body))


def _counted(answer: Response) -> Response:
    """vigil_trigger_deliveries by the status answered (a 503 of an outage is raised, and not counted here)."""
    TRIGGER_DELIVERIES.labels(str(answer.status_code)).inc()
    return answer


async def _read_capped(request: Request, cap: int) -> bytes | None:
    """The body, or None once it is over the cap (declared or streamed, chunked included)."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > cap:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _deliver(token: str, headers: dict, body: bytes) -> Response:
    runtime = current()
    settings = runtime.settings
    with connection():
        link = find_link(token)
        if link is None:
            return _answer(404, NOT_FOUND)
        refusal = _admit(link, headers, body, runtime)
        if refusal is None and link.signature == "github" and is_github_ping(headers):
            refusal = _answer(202, {"accepted": True})
        text = _text(body)
        if refusal is None and text is None:
            refusal = _answer(400, {"detail": "The body must be UTF-8 text without NUL characters."})
        if refusal is not None:  # an ended link answers 404 whatever else is wrong with the request
            return refusal if is_live(link.id, utcnow()) else _answer(404, NOT_FOUND)
        try:
            stored = store_delivery(link, delivery_id(link.signature, headers), text,
                                    headers.get("content-type", ""), utcnow(), settings.TRIGGER_DEDUPE_WINDOW_SECONDS)
        except LinkEnded:
            return _answer(404, NOT_FOUND)
    if stored is not None:
        relay.put(stored)
    return _answer(202, {"accepted": True})


def _admit(link, headers: dict, body: bytes, runtime) -> Response | None:
    """Signature first, so junk from someone who has the URL can't use up the sender's rate."""
    rate = runtime.settings.TRIGGER_RATE_PER_MINUTE
    if link.signature != "none":
        secret = runtime.keyring.decrypt(link.secret_encrypted)
        if not verify(link.signature, secret, headers, body, time.time()):
            if not runtime.limiter.allow("trigger-unverified", str(link.id), rate * 4):
                return _answer(429, {"detail": "Too many unverified requests to this link; slow down."})
            return _answer(401, {"detail": "The signature is missing or wrong."})
    if not runtime.limiter.allow("trigger", str(link.id), rate):
        return _answer(429, {"detail": f"This link takes at most {rate} deliveries a minute; slow down."})
    return None


def _text(body: bytes) -> str | None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text

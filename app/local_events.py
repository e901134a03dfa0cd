"""POST /internal/events: a CLI command on this machine hands an event to the embedded `vigil serve`, whose bus is
in-process (adapters/serve_file.py writes the key to serve.json). In production the command publishes through
Redis instead, and no process advertises a key, so the route is 404 there.

Only a loopback caller with this process's key is heard; everything else, whatever the method or body, is 404,
as for a path that does not exist. Only the events the CLI publishes are taken, shaped as production sends them.
"""

from __future__ import annotations

import ipaddress
import json
from datetime import datetime

from litestar import Request, Response, route
from litestar.exceptions import NotFoundException

from adapters.serve_file import EVENTS_PATH, KEY_HEADER, key_matches
from app.gate import MAX_ID
from tasks.runtime import current

_KEY_HEADER = KEY_HEADER.lower().encode()
_TOKEN_KEYS = {"id", "label", "created_at", "last_used_at"}


def _token_created(data: dict) -> str | None:
    """What is wrong with a token.created payload (models.accounts.token_json), or None."""
    if set(data) != _TOKEN_KEYS:
        return f"token.created data has exactly the keys {sorted(_TOKEN_KEYS)}"
    if not _an_id(data["id"]) or not isinstance(data["label"], str) or len(data["label"]) > 100:
        return "token.created data needs an integer id and a label of at most 100 characters"
    if not _a_time(data["created_at"]) or not (data["last_used_at"] is None or _a_time(data["last_used_at"])):
        return "token.created data needs created_at (and last_used_at, or null) as ISO 8601 times"
    return None


#: the events a command may hand over, each with what checks its data: those vigil/cli.py publishes
EVENTS = {"token.created": _token_created}


@route(EVENTS_PATH, http_method=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def local_event(request: Request) -> Response:
    """{"user_id", "name", "data"}: published on this process's bus to that account's open streams."""
    if request.method != "POST" or not _loopback(request) or not key_matches(_sent_key(request)):
        raise NotFoundException()
    try:
        event = json.loads(await request.body())
    except ValueError:
        return _refused("send a JSON object {user_id, name, data}")
    problem = _problem(event)
    if problem:
        return _refused(problem)
    current().bus.publish(event["user_id"], event["name"], event["data"])
    return Response(None, status_code=204)


def _problem(event) -> str | None:
    if not isinstance(event, dict) or set(event) != {"user_id", "name", "data"}:
        return "send a JSON object with exactly user_id, name and data"
    if not _an_id(event["user_id"]):
        return "user_id must be an account's integer id"
    check = EVENTS.get(event["name"]) if isinstance(event["name"], str) else None
    if check is None:
        return f"name must be one of {', '.join(EVENTS)}"
    if not isinstance(event["data"], dict):
        return "data must be a JSON object"
    return check(event["data"])


def _refused(problem: str) -> Response:
    return Response({"detail": f"The event was not published: {problem}."}, status_code=400,
                    headers={"Cache-Control": "no-store"})


def _sent_key(request: Request) -> bytes | None:
    """The key header's raw bytes (compared as bytes: no decoding of what an attacker sends)."""
    return next((value for name, value in request.scope["headers"] if name == _KEY_HEADER), None)


def _loopback(request: Request) -> bool:
    try:
        address = ipaddress.ip_address(request.client.host if request.client else "")
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _an_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ID


def _a_time(value) -> bool:
    try:
        return isinstance(value, str) and datetime.fromisoformat(value) is not None
    except ValueError:
        return False

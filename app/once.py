"""A value a page shows once after a redirect (POST-redirect-GET), such as a new runtime token: kept encrypted in a
short-lived HttpOnly cookie bound to the browser's session and the page's path, taken and cleared by the next view
of that page, so a reload shows it no more and never makes a second one."""

from __future__ import annotations

import json
import time

from litestar import Request
from litestar.datastructures import Cookie

from app.auth import browser_session
from engine.crypto import DecryptError
from tasks.runtime import current

COOKIE = "vigil_once"
#: how long the value waits for its page; a redirect is followed at once
SECONDS = 120


def keep_once(request: Request, path: str, value: dict) -> Cookie:
    """The cookie that carries `value` (encrypted) to the next view of `path` in this browser session."""
    session = browser_session(request)
    payload = json.dumps({"session": session.id if session else None, "at": time.time(), "value": value})
    return _cookie(path, current().keyring.encrypt(payload), SECONDS)


def take_once(request: Request, path: str) -> tuple[dict | None, list[Cookie]]:
    """The value kept for this view of `path` (None when there is none, or it is stale or another session's),
    and the cookie that clears it."""
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None, []
    cleared = [_cookie(path, "", 0)]
    try:
        data = json.loads(current().keyring.decrypt(raw))
    except (DecryptError, ValueError):
        return None, cleared
    session = browser_session(request)
    if session is None or data.get("session") != session.id or time.time() - data.get("at", 0) > SECONDS:
        return None, cleared
    return data.get("value"), cleared


def _cookie(path: str, value: str, max_age: int) -> Cookie:
    return Cookie(key=COOKIE, value=value, path=path, max_age=max_age, httponly=True, samesite="strict",
                  secure=current().settings.SESSION_COOKIE_SECURE)

"""Login throttling (issue 28): wrong passwords are counted per email tried and per client address, on the limiter
Vigil keeps its rate limits in (Redis; memory when embedded). Past LOGIN_FAILURES_PER_ACCOUNT for an email, or
LOGIN_FAILURES_PER_ADDRESS from an address, within LOGIN_FAILURE_WINDOW_SECONDS, the password is not even checked:
the answer is 429 with Retry-After, for the right password too, and the same whether the account exists or not.
A success resets nothing, so the owner signing in does not give a guesser elsewhere fresh tries.

The check, the password check and the count of a failure run under a lock per email in each process, so a burst
of parallel guesses at one account can't all pass the check before the first failure is counted. Across several
web processes a burst can pass the limit by at most one guess per process."""

from __future__ import annotations

import hashlib
import threading
from typing import Callable, TypeVar

from litestar import Request

from models.accounts import normalize_email
from tasks.runtime import current

T = TypeVar("T")

#: the answer to a sign-in refused while locked, whichever limit it hit and whether the account exists or not
LOCKED = "Too many failed sign-ins for this email or from this address; wait {wait} and try again."
_STRIPES = [threading.Lock() for _ in range(64)]


class LoginLocked(Exception):
    """Signing in is locked for this email or address; `wait` is whole seconds until it is tried again."""

    def __init__(self, wait: int) -> None:
        super().__init__(LOCKED.format(wait=_spoken(wait)))
        self.wait = wait


def checked_login(request: Request, email: str, check: Callable[[], T]) -> T:
    """`check()` (a password check: falsy when wrong) unless signing in is locked for `email` or this request's
    address (LoginLocked); a falsy answer counts as a failure against both. Call in a worker thread."""
    keys = _keys(request, email)
    with _STRIPES[int(keys[0][1][:8], 16) % len(_STRIPES)]:
        wait = max(_limiter().blocked_for(scope, key, amount, _window()) for scope, key, amount in keys)
        if wait:
            raise LoginLocked(wait)
        answer = check()
        if not answer:
            for scope, key, amount in keys:
                _limiter().count(scope, key, amount, _window())
    return answer


def _keys(request: Request, email: str) -> list[tuple[str, str, int]]:
    """(scope, key, allowed failures) of the email tried and of the client's address; the email only as a digest."""
    settings = current().settings
    account = hashlib.sha256(normalize_email(email).encode("utf-8")).hexdigest()[:32]
    address = request.client.host if request.client else "unknown"
    return [("login-account", account, settings.LOGIN_FAILURES_PER_ACCOUNT),
            ("login-address", address, settings.LOGIN_FAILURES_PER_ADDRESS)]


def _limiter():
    return current().limiter


def _window() -> int:
    return current().settings.LOGIN_FAILURE_WINDOW_SECONDS


def _spoken(seconds: int) -> str:
    """`wait` as the message says it: 40 seconds, 1 minute, 15 minutes."""
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = -(-seconds // 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"

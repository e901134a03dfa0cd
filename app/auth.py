"""Who is calling: a runtime token (Authorization: Bearer) or the owner's browser session, and CSRF."""

from __future__ import annotations

import hashlib
import secrets

from litestar import Request
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException, TooManyRequestsException

from engine.tokens import same_secret
from tasks.runtime import current
from models import connection
from models.accounts import user_for_token
from models.tables import User

SESSION_USER = "uid"
SESSION_CSRF = "csrf"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "_csrf"


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def token_user(request: Request, count: bool = True) -> User:
    """The user of the runtime token; 401 when it is missing or unknown, 429 over API_RATE_PER_MINUTE (unless
    `count` is off: the same call looked at again). Call in a worker thread."""
    return user_of_token(bearer_token(request), count)


def user_of_token(token: str | None, count: bool = True) -> User:
    """token_user for a token already taken from its request (the MCP server's). Call in a worker thread."""
    if token and count:
        limit_calls("token:" + hashlib.sha256(token.encode()).hexdigest()[:32])
    user = user_for_token(token) if token else None
    if user is None:
        raise NotAuthorizedException("A valid runtime token is required: send Authorization: Bearer <token>.")
    return user


def session_user(request: Request) -> User | None:
    """The signed-in owner, or None. Call in a worker thread."""
    uid = (request.session or {}).get(SESSION_USER) if "session" in request.scope else None
    if not isinstance(uid, int):
        return None
    with connection():
        return User.get_or_none(User.id == uid)


def api_user(request: Request) -> tuple[User, bool]:
    """A token's user or a session's user; the flag says it came from a session (CSRF applies)."""
    if bearer_token(request):
        with connection():
            return token_user(request), False
    user = session_user(request)
    if user is None:
        raise NotAuthorizedException("Sign in, or send Authorization: Bearer <runtime token>.")
    limit_calls(f"session:{user.id}")
    return user, True


def limit_calls(key: str) -> None:
    """Count one API call of a token or a session; 429 with Retry-After over API_RATE_PER_MINUTE."""
    runtime = current()
    rate = runtime.settings.API_RATE_PER_MINUTE
    if not runtime.limiter.allow("api", key, rate):
        wait = runtime.limiter.retry_after("api", key, rate)
        raise TooManyRequestsException(f"Over {rate} calls a minute with this token; wait {wait} seconds and "
                                       "try again.", headers={"Retry-After": str(wait)})


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use."""
    token = request.session.get(SESSION_CSRF) if request.session else None
    if not token:
        token = secrets.token_urlsafe(32)
        request.set_session({**(request.session or {}), SESSION_CSRF: token})
    return token


def check_csrf(request: Request, submitted: str | None) -> None:
    """Refuse an unsafe request from a session unless it carries the session's CSRF token."""
    expected = (request.session or {}).get(SESSION_CSRF)
    sent = submitted or request.headers.get(CSRF_HEADER)
    if not expected or not sent or not same_secret(expected, sent):
        raise PermissionDeniedException("The form has expired or did not come from this site; reload the page and try again.")

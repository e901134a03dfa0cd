"""Who is calling: a runtime token (Authorization: Bearer) or the owner's browser session, and CSRF.

A browser session lives server-side (models/sessions.py); the `vigil_session` cookie carries only its random id.
A browser that is not signed in gets a random id in the same cookie too, named by no session: its CSRF token (the
login and setup forms') is derived from it, so an anonymous visitor costs no row. Signing in always starts a new
id, and signing out deletes the session, so the old cookie replayed is a visitor's."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from litestar import Request
from litestar.datastructures import Cookie
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException, TooManyRequestsException
from litestar.types import ASGIApp, Receive, Scope, Send

from engine.tokens import same_secret
from tasks.runtime import current
from models import connection, utcnow
from models.accounts import user_for_token
from models.sessions import ID_MAX, Lifetime, end_session, end_sessions, find_session, start_session
from models.tables import BrowserSession, User

SESSION_COOKIE = "vigil_session"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "_csrf"
#: where a request keeps what it learnt of its session (the scope key the middleware sets)
_SCOPE_KEY = "vigil.session"


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
    session = browser_session(request)
    return session.user if session else None


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
    """The CSRF token of the request's session, or of the visitor's cookie (given one now if it has none)."""
    session = browser_session(request)
    if session is not None:
        return session.csrf
    seen = _seen(request)
    if seen.visitor is None:
        seen.visitor = _cookie_id(request) or secrets.token_urlsafe(32)
        if seen.visitor != _cookie_id(request):
            seen.cookie = _cookie(seen.visitor, None)
    return _visitor_csrf(seen.visitor)


def check_csrf(request: Request, submitted: str | None) -> None:
    """Refuse an unsafe request unless it carries the CSRF token of its session (or, not signed in, of its
    visitor's cookie)."""
    session = browser_session(request)
    visitor = _seen(request).visitor or _cookie_id(request)
    expected = session.csrf if session else (_visitor_csrf(visitor) if visitor else None)
    sent = submitted or request.headers.get(CSRF_HEADER)
    if not expected or not sent or not same_secret(expected, sent):
        raise PermissionDeniedException("The form has expired or did not come from this site; reload the page and try again.")


def browser_session(request: Request) -> BrowserSession | None:
    """The live session the request's cookie names (looked up once a request), its user loaded; None when the
    browser is not signed in. Call in a worker thread."""
    seen = _seen(request)
    if not seen.looked_up:
        seen.looked_up = True
        cookie = _cookie_id(request)
        if cookie:
            with connection():
                seen.session = find_session(cookie, _lifetime(), utcnow())
    return seen.session


def sign_in(request: Request, user: User) -> None:
    """Start a new session of `user` (a new id: never the visitor's) and send its cookie with the answer."""
    settings = current().settings
    with connection():
        row, session_id = start_session(user, _lifetime(), utcnow())
    seen = _seen(request)
    seen.looked_up, seen.session, seen.visitor = True, row, None
    seen.cookie = _cookie(session_id, settings.SESSION_MAX_SECONDS)


def sign_out(request: Request, everywhere: User | None = None) -> None:
    """End this browser's session (and every session of `everywhere`), and clear its cookie."""
    with connection():
        end_session(_cookie_id(request))
        if everywhere is not None:
            end_sessions(everywhere)
    seen = _seen(request)
    seen.looked_up, seen.session, seen.visitor = True, None, None
    seen.cookie = _cookie("", 0)


def session_cookies(app: ASGIApp) -> ASGIApp:
    """Litestar middleware: sends the session cookie a handler set (sign_in, sign_out, a visitor's first form)."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        seen = scope[_SCOPE_KEY] = _Seen()

        async def send_with_cookie(message) -> None:
            if message["type"] == "http.response.start" and seen.cookie is not None:
                message = {**message, "headers": [*message.get("headers", ()), seen.cookie.to_encoded_header()]}
            await send(message)

        await app(scope, receive, send_with_cookie)

    return middleware


@dataclass
class _Seen:
    """What one request learnt of its session, and the cookie its answer sets."""
    looked_up: bool = False
    session: BrowserSession | None = None
    visitor: str | None = None
    cookie: Cookie | None = None


def _seen(request: Request) -> _Seen:
    return request.scope.setdefault(_SCOPE_KEY, _Seen())  # without the middleware (a mount), nothing is sent


def _cookie_id(request: Request) -> str | None:
    value = request.cookies.get(SESSION_COOKIE)
    return value if value and len(value) <= ID_MAX else None


def _cookie(value: str, max_age: int | None) -> Cookie:
    return Cookie(key=SESSION_COOKIE, value=value, max_age=max_age, path="/", httponly=True, samesite="lax",
                  secure=current().settings.SESSION_COOKIE_SECURE)


def _visitor_csrf(visitor: str) -> str:
    """A visitor's CSRF token: a keyed digest of its cookie's id, so nothing is stored."""
    key = hashlib.sha256(f"visitor-csrf:{current().settings.SECRET_KEY}".encode()).digest()
    return hmac.new(key, visitor.encode("utf-8"), hashlib.sha256).hexdigest()


def _lifetime() -> Lifetime:
    settings = current().settings
    return Lifetime(idle=timedelta(seconds=settings.SESSION_IDLE_SECONDS),
                    longest=timedelta(seconds=settings.SESSION_MAX_SECONDS))

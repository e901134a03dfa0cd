"""The public approval page /approve/<token> and its JSON twin /api/approvals/<token>.

Opening changes nothing; only a POST carrying the page's nonce with the page's cookie, from our own origin, decides;
the first decision wins. The nonce is only in the HTML page, bound to a random value in an HttpOnly, SameSite=Strict
cookie that page sets for this link's two paths, so a client holding only the link (an agent's tool step, say) can't
decide; the JSON GET never gives it. Vigil's own requests never reach Vigil (engine/addresses.py's guard refuses its
own origins and listening addresses); the User-Agent check here is only an extra.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post, route
from litestar.datastructures import Cookie
from litestar.enums import HttpMethod
from litestar.params import FromPath, JSONBody
from litestar.response import Template

from app.openapi import ApprovalState, errors
from app.pages import Form
from engine.links import app_base, origin, public_base
from engine.tokens import token_digest
from models import connection, utcnow
from models.approvals import ApprovalClosed, decide, find, view
from models.monitors import load_for_check
from tasks.events import publish_monitor
from tasks.runtime import current

HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Robots-Tag": "noindex, nofollow",
           "Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY"}
#: what Vigil's own outbound clients send; a request carrying it is one of ours (an extra: the guard is what refuses)
OWN_AGENT = "Vigil/"
#: the cookie the page sets, per link, that its nonce is bound to
COOKIE = "vigil_approve"
_COOKIE_VALUE = re.compile(r"[A-Za-z0-9_-]{32,64}")


class ApprovalsController(Controller):
    @route("/approve/{token:str}", http_method=[HttpMethod.GET, HttpMethod.HEAD], sync_to_thread=True)
    def page(self, request: Request, token: FromPath[str]) -> Response:
        if _own_fetcher(request):
            return _refused_fetcher()
        with connection():
            found = find(token)
            if found is None:
                return _page(token, None, status=404)
            shown = view(found, utcnow())
            if shown.state != "open":  # no form, so no nonce and no cookie
                return _page(token, shown)
            browser = _browser(request) or secrets.token_urlsafe(32)
            return _page(token, shown, browser, cookies=_cookies(token, browser))

    @post("/approve/{token:str}", sync_to_thread=True)
    def decide_form(self, request: Request, token: FromPath[str], data: Annotated[dict[str, str], Form]) -> Response:
        refusal = _refusal(request, token, data.get("nonce"))
        if refusal is not None:
            return refusal
        status, found, message = _decide(token, data.get("decision", ""), data.get("comment", ""))
        return _page(token, view(found, utcnow()) if found else None, _browser(request), status=status,
                     message=message)

    @get("/api/approvals/{token:str}", sync_to_thread=True, responses=errors(403, 404))
    def read(self, request: Request, token: FromPath[str]) -> Response[ApprovalState]:
        if _own_fetcher(request):
            return _refused_fetcher(as_json=True)
        with connection():
            found = find(token)
            if found is None:
                return Response({"detail": "Not found."}, status_code=404, headers=HEADERS)
            return Response(view(found, utcnow()).as_json(), headers=HEADERS)

    @post("/api/approvals/{token:str}", status_code=200, sync_to_thread=True,
          responses=errors(400, 403, 404, 409, 410))
    def decide_json(self, request: Request, token: FromPath[str], data: JSONBody[Any]) -> Response[ApprovalState]:
        data = data if isinstance(data, dict) else {}
        refusal = _refusal(request, token, data.get("nonce"), as_json=True)
        if refusal is not None:
            return refusal
        status, found, message = _decide(token, str(data.get("decision", "")), str(data.get("comment") or ""))
        body = view(found, utcnow()).as_json() if found and status == 200 else {"detail": message}
        return Response(body, status_code=status, headers=HEADERS)


def nonce(token: str, browser: str) -> str:
    """The form nonce a rendered page carries: bound to this link, the page's cookie and this server's key."""
    key = current().settings.SECRET_KEY.encode()
    return hmac.new(key, f"approve:{token_digest(token)}:{browser}".encode(), hashlib.sha256).hexdigest()[:32]


def _browser(request: Request) -> str | None:
    """The page's cookie this browser sent, if it is one we could have set."""
    value = request.cookies.get(COOKIE, "")
    return value if _COOKIE_VALUE.fullmatch(value) else None


def _cookies(token: str, browser: str) -> list[Cookie]:
    """The page's cookie, for the form's path and the JSON twin's, and no other: HttpOnly, SameSite=Strict."""
    secure = current().settings.SESSION_COOKIE_SECURE
    return [Cookie(key=COOKIE, value=browser, path=path, httponly=True, samesite="strict", secure=secure)
            for path in (f"/approve/{token}", f"/api/approvals/{token}")]


def _decide(token: str, decision: str, comment: str) -> tuple[int, object, str]:
    with connection():
        found = find(token)
        if found is None:
            return 404, None, "This approval request does not exist."
        try:
            woke = decide(found, decision, comment, utcnow())
        except ApprovalClosed as exc:
            return exc.status, find(token), exc.message
        monitor = load_for_check(found.monitor_id)
        publish_monitor(monitor, woke)
        return 200, find(token), "Thank you: your decision was sent."


def _refusal(request: Request, token: str, sent_nonce: str | None, as_json: bool = False) -> Response | None:
    """Our own fetchers, a foreign Origin, no page cookie, or a missing/wrong nonce: nothing is decided."""
    if _own_fetcher(request):
        return _refused_fetcher(as_json)
    sent_origin, browser = request.headers.get("origin"), _browser(request)
    # Under Referrer-Policy: no-referrer a browser's form POST says "Origin: null": no origin, not a foreign one.
    if sent_origin and sent_origin != "null" and sent_origin.lower() not in _our_origins(request):
        problem = "The request came from another site."
    elif browser is None:
        problem = ("A decision can only be sent from the approval page: open the link in a browser and choose there "
                   "(this request did not carry the page's cookie).")
    elif not sent_nonce or not hmac.compare_digest(str(sent_nonce).encode(), nonce(token, browser).encode()):
        problem = "The form has expired; reload the page and choose again."
    else:
        return None
    if as_json:
        return Response({"detail": problem}, status_code=403, headers=HEADERS)
    return Response(problem, status_code=403, media_type="text/plain", headers=HEADERS)


def _our_origins(request: Request) -> set[str]:
    settings = current().settings
    api = public_base(settings.PUBLIC_API_BASE_URL, settings.API_URL)
    return {origin(api), origin(app_base(settings.PUBLIC_APP_URL, settings.SERVE_UI, api)),
            origin(str(request.base_url))}


def _own_fetcher(request: Request) -> bool:
    return request.headers.get("user-agent", "").startswith(OWN_AGENT)


def _refused_fetcher(as_json: bool = False) -> Response:
    """403 for one of our own fetchers; in JSON on the JSON twin, like its other refusals."""
    problem = "Vigil's own clients can't open approval links."
    if as_json:
        return Response({"detail": problem}, status_code=403, headers=HEADERS)
    return Response(problem, status_code=403, media_type="text/plain", headers=HEADERS)


def _page(token: str, approval, browser: str | None = None, status: int = 200, message: str | None = None,
          cookies: list[Cookie] | None = None) -> Template:
    return Template("pages/approve.html", status_code=status, headers=HEADERS, cookies=cookies,
                    context={"approval": approval, "nonce": nonce(token, browser) if approval and browser else "",
                             "message": message, "token": token})

"""Errors a person sees in a browser as a page: a 404, 403 or 409 on a page route (a request that accepts
text/html, not /api/…, not an htmx swap) renders pages/error.html; everything else keeps Litestar's JSON answer."""

from __future__ import annotations

from litestar import Request, Response
from litestar.exceptions import HTTPException
from litestar.exceptions.responses import create_exception_response
from litestar.response import Template

#: what each status says to a person, and where it sends them
TITLES = {403: "Not allowed", 404: "Not found", 409: "Already done"}
#: paths that are never pages, whatever the Accept header says
MACHINE_PATHS = ("/api/", "/mcp", "/static/", "/ui/events", "/healthz", "/readyz", "/metrics")


def wants_page(request: Request) -> bool:
    """A browser navigating to a page: it accepts HTML, the path is a page's, and htmx did not send it."""
    if request.url.path.startswith(MACHINE_PATHS) or request.headers.get("hx-request"):
        return False
    return "text/html" in request.headers.get("accept", "")


def http_error(request: Request, exc: HTTPException) -> Response:
    """The HTML page for a browser's 403/404/409 on a page route; Litestar's JSON answer otherwise."""
    if exc.status_code not in TITLES or not wants_page(request):
        return create_exception_response(request, exc)
    return Template("pages/error.html", status_code=exc.status_code, headers=exc.headers or None,
                    context={"status": exc.status_code, "title": TITLES[exc.status_code], "detail": exc.detail})

"""MCP connections: POST/GET/DELETE /api/connections and Settings → Connections. The owner's browser session only
(CSRF checked): a runtime token can neither add a server whose tools Vigil runs as the owner, nor see one."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.exceptions import HTTPException, PermissionDeniedException
from litestar.params import Body, FromPath
from litestar.response import Redirect, Template

from adapters.mcp_client import McpError, list_tools
from app.auth import bearer_token, csrf_token, session_user
from app.devices import OWNER_ONLY, owner_session
from app.openapi import FormPost, errors, form_answers
from app.pages import Form
from models import connection, utcnow
from models.connections import (
    ToolRefused, add_connection, check_connection, connection_json, remove_connection, user_connections,
)
from models.conversations import user_conversations
from tasks.events import publish_monitor
from tasks.mcp import forget
from tasks.runtime import current, own_endpoints


class ConnectionsController(Controller):
    @post("/api/connections", status_code=201, sync_to_thread=True, responses=errors(400, 401, 403, 409, 413))
    def add(self, request: Request, data: Annotated[Any, Body()]) -> Response:
        """Add an MCP server {name, url, bearer_token?}: its tools are listed first, so a server that can't be
        reached, or isn't one, is refused and nothing is stored."""
        user = owner_session(request)
        body = data if isinstance(data, dict) else {}
        try:
            row, tools = _add(user, body.get("name"), body.get("url"), body.get("bearer_token"))
        except ToolRefused as exc:
            return Response({"detail": str(exc), "status_code": exc.status}, status_code=exc.status)
        return Response({**connection_json(row), "tools": [t.name for t in tools]}, status_code=201)

    @get("/api/connections", sync_to_thread=True, responses=errors(401, 403))
    def list_all(self, request: Request) -> Response:
        user = _session_only(request)
        with connection():
            return Response({"connections": [connection_json(c) for c in user_connections(user)]},
                            headers={"Cache-Control": "no-store"})

    @delete("/api/connections/{name:str}", status_code=204, sync_to_thread=True, responses=errors(400, 401, 403, 404))
    def remove(self, request: Request, name: FromPath[str]) -> None:
        """Remove it; every watch of its tools ends and says so."""
        user = owner_session(request)
        with connection():
            try:
                ended = remove_connection(user, name, utcnow())
            except ToolRefused as exc:
                raise HTTPException(detail=str(exc), status_code=exc.status) from None
            for monitor, woke in ended:
                publish_monitor(monitor, woke)

    @get("/settings/connections", sync_to_thread=True)
    def page(self, request: Request) -> Response:
        return _page(request, session_user(request))

    @post("/settings/connections", status_code=303, sync_to_thread=True, operation_class=FormPost,
          responses=form_answers(403, 413, pages=(400, 409)))
    def add_from_form(self, request: Request,
                      data: Annotated[dict[str, str], Form]) -> Response:
        user = owner_session(request, data.get("_csrf"))
        try:
            _add(user, data.get("name"), data.get("url"), data.get("bearer_token") or None)
        except ToolRefused as exc:
            return _page(request, user, error=str(exc), status=exc.status,  # the form keeps what was typed,
                         typed={key: data.get(key, "") for key in ("name", "url")})  # not the token
        return Redirect("/settings/connections", status_code=303)


def _add(user, name, url, token):
    """Checked, listed (no database connection held while the server answers), then stored."""
    name, url = check_connection(name, url)
    if token is not None and (not isinstance(token, str) or len(token) > 4000):
        raise ToolRefused("bearer_token must be text (at most 4,000 characters).")
    settings = current().settings
    try:
        tools = list_tools(url, token, timeout=settings.CREATE_FETCH_TIMEOUT_SECONDS,
                           allow_loopback=settings.FETCH_ALLOW_LOOPBACK, own=own_endpoints(settings),
                           egress=settings.egress)
    except McpError as exc:
        raise ToolRefused(f"The MCP server at {url} could not be added: {exc.message}") from None
    with connection():
        row = add_connection(user, name, url, token, current().keyring, utcnow())
    forget(row.id)
    return row, tools


def _session_only(request: Request):
    if bearer_token(request):
        raise PermissionDeniedException(OWNER_ONLY)
    user = session_user(request)
    if user is None:
        raise PermissionDeniedException("Sign in first.")
    return user


def _page(request: Request, user, error: str | None = None, status: int = 200, typed: dict | None = None) -> Response:
    if user is None:
        return Redirect("/login?next=/settings/connections")
    with connection():
        context = {"user": user, "connections": [connection_json(c) for c in user_connections(user)],
                   "conversations": user_conversations(user), "error": error, "typed": typed or {}}
    return Template("pages/connections.html", context={**context, "csrf": csrf_token(request)}, status_code=status)

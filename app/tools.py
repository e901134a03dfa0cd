"""The agents' tool registry: PUT/GET/DELETE /api/agents/{agent_id}/tools/{name}, and Settings → Tools.

A runtime registers its agent's tools so a monitor can re-run one headless (tool sources). Header values are
secrets: stored encrypted, answered masked, never logged. A PUT that changes a tool's executable surface ends
the watches armed on the old one, each telling its conversation.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, put
from litestar.exceptions import HTTPException, ValidationException
from litestar.params import Body, FromPath
from litestar.response import Redirect, Template

from app.auth import api_user, check_csrf, csrf_token, session_user, token_user
from app.openapi import errors
from models import connection, utcnow
from models.conversations import user_conversations
from models.tools import ToolRefused, agent_tools, delete_tool, put_tool, tool_json
from tasks.events import publish_monitor
from tasks.runtime import current

NO_STORE = {"Cache-Control": "no-store"}


class ToolsController(Controller):
    @put("/api/agents/{agent_id:str}/tools/{name:str}", status_code=200, sync_to_thread=True,
         responses=errors(400, 401, 413, 429))
    def put_one(self, request: Request, agent_id: FromPath[str], name: FromPath[str],
                data: Annotated[Any, Body()]) -> Response:
        """Register or replace one of the agent's tools (runtime token); 201 for a new one."""
        agent_id = _agent(agent_id)
        with connection():
            user = token_user(request)
            try:
                stored = put_tool(user, agent_id, name, data, current().keyring, utcnow())
            except ToolRefused as exc:
                return Response({"detail": str(exc), "status_code": exc.status}, status_code=exc.status)
            for monitor, woke in stored.ended:
                publish_monitor(monitor, woke)
            body = {**tool_json(stored.tool), "watches_ended": len(stored.ended)}
        return Response(body, status_code=201 if stored.created else 200, headers=NO_STORE)

    @get("/api/agents/{agent_id:str}/tools", sync_to_thread=True, responses=errors(400, 401, 429))
    def list_tools(self, request: Request, agent_id: FromPath[str]) -> Response:
        """The agent's tools, header values masked."""
        agent_id = _agent(agent_id)
        user, _ = api_user(request)
        with connection():
            return Response({"tools": [tool_json(t) for t in agent_tools(user, agent_id)]}, headers=NO_STORE)

    @delete("/api/agents/{agent_id:str}/tools/{name:str}", status_code=204, sync_to_thread=True,
            responses=errors(400, 401, 403, 404, 429))
    def delete_one(self, request: Request, agent_id: FromPath[str], name: FromPath[str]) -> None:
        """Remove a tool; the watches of it end and say so."""
        agent_id = _agent(agent_id)
        user, from_session = api_user(request)
        if from_session:
            check_csrf(request, None)
        with connection():
            try:
                ended = delete_tool(user, agent_id, name, utcnow())
            except ToolRefused as exc:
                raise HTTPException(detail=str(exc), status_code=exc.status) from None
            for monitor, woke in ended:
                publish_monitor(monitor, woke)

    @get("/settings/tools", sync_to_thread=True)
    def tools_page(self, request: Request) -> Response:
        user = session_user(request)
        if user is None:
            return Redirect("/login?next=/settings/tools")
        with connection():
            context = {"user": user, "tools": [tool_json(t) for t in agent_tools(user)],
                       "conversations": user_conversations(user)}
        return Template("pages/tools.html", context={**context, "csrf": csrf_token(request)})


def _agent(agent_id: str) -> str:
    if not agent_id or len(agent_id) > 200 or not agent_id.isprintable():
        raise ValidationException("agent_id must be printable text of 1 to 200 characters.")
    return agent_id

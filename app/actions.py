"""Seed 001's actions: POST /api/actions/monitors/create and /cancel, for platforms and workflow steps.

The same monitors as the tool's monitor_create, in seed 001's field names (engine/actions.py translates them);
answers are HTTP: 200 with {monitorId, monitorState, expiresAtIso, notes} (and approveUrl for a watch awaiting the
owner's approval), 400 for a field to fix, 409 for a limit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from litestar import Controller, Request, Response, post
from litestar.params import Body

from app.auth import token_user
from app.openapi import errors
from app.tool import create_context, queue_first_check
from engine.actions import MAX_TTL_SECONDS, in_seed_terms, translate_create
from engine.errors import SpecError
from models import connection, utcnow
from models.monitors import MonitorNotFound, TransitionRefused, change_status, seed_state
from models.tool_actions import LimitReached, Prepared, ToolError, conversation_to_wake, prepare_create
from tasks.events import publish_created, publish_monitor


class ActionsController(Controller):
    path = "/api/actions/monitors"

    @post("/create", status_code=200, sync_to_thread=True, responses=errors(400, 401, 409, 413, 429))
    def create(self, request: Request, data: Annotated[Any, Body()]) -> Response:
        """Arm a dynadata_doc or time watch (seed 001's fields); agent_tool needs the tool registry."""
        try:
            call = translate_create(data, utcnow())
        except SpecError as exc:
            return _refused(str(exc), 400)
        with connection():
            user = token_user(request)
            try:
                conversation = conversation_to_wake(user, call.conversation_id, call.channel, call.agent_id)
                created = prepare_create(user, conversation, call.arguments, _seed_context(), utcnow(),
                                         call.woken_by)
            except LimitReached as exc:
                return _refused(in_seed_terms(str(exc)), 409)
            except ToolError as exc:
                return _refused(in_seed_terms(str(exc)), 400)
            assert not isinstance(created, Prepared)  # documents and times take no first check
            monitor, result = created
            queue_first_check(monitor)
            publish_created(monitor)
        return Response(_created(monitor, result))

    @post("/cancel", status_code=200, sync_to_thread=True, responses=errors(400, 401, 404, 409, 429))
    def cancel(self, request: Request, data: Annotated[Any, Body()]) -> Response:
        """Cancel an armed monitor of this account; its armed slot frees at once."""
        monitor_id = data.get("monitorId") if isinstance(data, dict) else None
        if not isinstance(monitor_id, str) or not monitor_id:
            return _refused("monitorId is required: the id create returned.", 400)
        with connection():
            user = token_user(request)
            try:
                monitor = change_status(user, monitor_id, "cancel")
            except MonitorNotFound:
                return _refused(f"There is no monitor {monitor_id!r} in this account.", 404)
            except TransitionRefused as exc:
                return _refused(f"The monitor can't be cancelled: {exc}.", 409)
            publish_monitor(monitor)
        return Response({"monitorId": monitor.id, "monitorState": seed_state(monitor)})


def _created(monitor, result: dict) -> dict:
    """The answer in seed 001's names; a watch that waits for the owner's approval carries the owner's page where
    it is approved (approveUrl), which its note points at."""
    answer = {"monitorId": monitor.id, "monitorState": seed_state(monitor), "expiresAtIso": result["expires_at"],
              "notes": [note.replace("approve_url", "approveUrl") for note in result.get("notes", [])]}
    if result.get("approve_url"):
        answer["approveUrl"] = result["approve_url"]
    return answer


def _seed_context():
    """The tool's create context, with seed 001's longest lifetime (7 days) instead of seed 000's."""
    ctx = create_context()
    return replace(ctx, limits=replace(ctx.limits, max_ttl=min(ctx.limits.max_ttl, MAX_TTL_SECONDS)))


def _refused(detail: str, status: int) -> Response:
    return Response({"detail": detail, "status_code": status}, status_code=status)

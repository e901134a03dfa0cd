"""POST /api/tool/monitor: the monitor tool as agent runtimes call it."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, post
from litestar.exceptions import ValidationException
from litestar.params import Body

from models import connection, utcnow
from models.conversations import ConversationRefused, conversation_for
from models.tool_actions import CreateContext, ToolError, monitor_cancel, monitor_create, monitor_list
from app.auth import token_user
from app.openapi import TOOL_CALL, ToolReply, errors
from engine.links import app_base, public_base
from app.settings import limits_from
from tasks.events import publish_monitor
from tasks.runtime import current

ACTIONS = ("monitor_create", "monitor_list", "monitor_cancel")


class ToolController(Controller):
    path = "/api/tool"

    @post("/monitor", status_code=200, sync_to_thread=True, responses=errors(400, 401))
    def monitor(self, request: Request, data: Annotated[Any, Body(schema_extra=TOOL_CALL)]) -> ToolReply:
        action, arguments, context = _parse_body(data)
        with connection():
            user = token_user(request)
            try:
                conversation = conversation_for(user, context["conversation_id"], context.get("channel") or "chat",
                                                context.get("agent_id") or "")
                return {"ok": True, "result": _run(action, user, conversation, arguments)}
            except ConversationRefused:
                return {"ok": False, "error": "This conversation id belongs to another account; use the id of "
                                              "the conversation you are in."}
            except ToolError as exc:
                return {"ok": False, "error": str(exc)}


def _run(action: str, user, conversation, arguments: dict) -> dict:
    if action == "monitor_list":
        return monitor_list(user, conversation)
    if action == "monitor_cancel":
        monitor, result = monitor_cancel(user, conversation, arguments)
    else:
        runtime = current()
        settings = runtime.settings
        if not settings.MONITORS_ENABLED:
            raise ToolError("Monitors are turned off on this Vigil instance; tell the user you can't watch this.")
        api_base = public_base(settings.PUBLIC_API_BASE_URL, settings.API_URL)
        ctx = CreateContext(limits_from(settings), runtime.source_io(), settings.FETCH_MAX_TEXT_BYTES,
                            runtime.judge_policy, runtime.keyring, api_base,
                            app_base(settings.PUBLIC_APP_URL, settings.SERVE_UI, api_base))
        monitor, result = monitor_create(user, conversation, arguments, ctx, utcnow())
    publish_monitor(monitor)
    return result


def _parse_body(data: Any) -> tuple[str, dict, dict]:
    if not isinstance(data, dict):
        raise ValidationException("The body must be a JSON object with action, arguments and context.")
    action, arguments, context = data.get("action"), data.get("arguments", {}), data.get("context")
    if action not in ACTIONS:
        raise ValidationException(f"action must be one of {', '.join(ACTIONS)}.")
    if not isinstance(arguments, dict):
        raise ValidationException("arguments must be a JSON object.")
    if not isinstance(context, dict) or not isinstance(context.get("conversation_id"), str) \
            or not context["conversation_id"].strip() or len(context["conversation_id"]) > 200:
        raise ValidationException("context.conversation_id is required: the runtime's own conversation id (at most 200 characters).")
    for name in ("channel", "agent_id"):
        if context.get(name) is not None and not isinstance(context[name], str):
            raise ValidationException(f"context.{name} must be a string.")
    if _holds_nul(data):
        raise ValidationException("Text in the call must not contain NUL characters (\\u0000); remove them.")
    return action, arguments, context


def _holds_nul(data: Any) -> bool:
    """Whether any string (key or value) holds U+0000, which PostgreSQL text can't store. No recursion: the
    body may be nested as deep as the JSON parser allows."""
    todo = [data]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return False

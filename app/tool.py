"""POST /api/tool/monitor: the monitor tool as agent runtimes call it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.concurrency import sync_to_thread
from litestar.exceptions import ValidationException
from litestar.params import Body, FromQuery

from models import connection, utcnow
from models.coalesce import seconds_error
from models.conversations import conversation_for, find_conversation
from models.dry_run import dry_run_result, first_read, prepare_dry_run, wants_dry_run
from models.tool_actions import (
    WATCH_ACTIONS, CreateContext, Prepared, ToolError, first_check, prepare_create, store_create, watch_list,
    watch_start, watch_stop,
)
from models.tool_monitors import monitor_cancel, monitor_list
import tool_schema
from app.auth import token_user
from app.capacity import Busy, create_gate
from app.openapi import TOOL_CALL, ToolReply, errors
from engine.links import app_base, public_base
from app.settings import limits_from
from adapters.mcp_client import McpError, list_tools
from engine.sources import DOCUMENT_SOURCES, SourceIO
from models.connections import credentials, duplicated_names, end_duplicated_watches, find_connection
from models.tables import ACTIVE, Conversation, User
from tasks.checks import queue_claims
from tasks.events import announce_conversation, publish_created, publish_monitor
from tasks.rendered import first_reading, keep_picture, source_policy
from tasks.runtime import current, own_endpoints

ACTIONS = ("monitor_create", "monitor_list", "monitor_cancel", *WATCH_ACTIONS)
#: GET /api/tool/schema?format=: the one schema, as each vendor's tool list takes it
FORMATS = {"openai": tool_schema.for_openai, "openai-responses": tool_schema.for_openai_responses,
           "anthropic": tool_schema.for_anthropic, "mcp": tool_schema.for_mcp, "seed002": tool_schema.for_watch}


class ToolController(Controller):
    path = "/api/tool"

    @get("/schema", responses=errors(400))
    async def schema(self, format: FromQuery[str] = "openai") -> Response:
        """The monitor tool's schema (no token needed): format openai (Chat Completions), openai-responses (the
        Responses API's flat function tool), anthropic, mcp or seed002."""
        if format not in FORMATS:
            raise ValidationException(f"format must be one of {', '.join(FORMATS)}.")
        return Response(FORMATS[format](), headers={"Cache-Control": "public, max-age=300"})

    @post("/monitor", status_code=200, responses=errors(400, 401, 413, 429))
    async def monitor(self, request: Request, data: Annotated[Any, Body(schema_extra=TOOL_CALL)]) -> ToolReply:
        action, arguments, context = parse_call(data)
        return await run_call(lambda count: token_user(request, count), action, arguments, context)


#: who is calling: the token's user, counted against API_RATE_PER_MINUTE when asked (401/429 otherwise)
Caller = Callable[[bool], User]


async def run_call(caller: Caller, action: str, arguments: dict, context: dict) -> dict:
    """One tool call, as the REST endpoint and the MCP server both run it. Short calls are one unit of work. A
    polled monitor_create is three: validate (a connection), its first check (no connection, in the create pool,
    bounded per process and per account), store (a connection)."""
    source = arguments.get("source") if action == "monitor_create" else None
    listing = (None, "")
    if isinstance(source, dict) and source.get("type") == "tool" and isinstance(source.get("connection"), str):
        listing = await _list_connection(caller, source["connection"])
    first = await sync_to_thread(_call, caller, action, arguments, context, listing)
    if not isinstance(first, Prepared):
        return first
    settings = current().settings
    gate = create_gate(settings.CREATE_CONCURRENCY, settings.CREATE_CONCURRENCY_PER_ACCOUNT)
    deadline = settings.CREATE_FETCH_TIMEOUT_SECONDS
    checked_at = utcnow()
    read = first_check if first.dry_run is None else first_read
    try:  # a page may be rendered in a browser (tasks/rendered.py)
        outcome, first = await gate.run(first.user_id, lambda: first_reading(
            first, read, checked_at, picture=first.dry_run is None), deadline + 1)
    except Busy as exc:
        return {"ok": False, "error": str(exc)}
    except asyncio.TimeoutError:
        return {"ok": False, "error": f"The first check took longer than {deadline:g} seconds, so no monitor "
                                     "was created; try again, or watch a source that answers sooner."}
    if first.dry_run is not None:
        return _dry_reply(first, outcome)
    return await sync_to_thread(_store, caller, first, outcome, checked_at)


async def _list_connection(caller: Caller, name: str) -> tuple[tuple | None, str]:
    """An MCP connection's tools, for a watch of one: listed in the create pool with no database connection held,
    bounded like a first check. (None, why) when they can't be."""
    found = await sync_to_thread(_connection_credentials, caller, name)
    if found is None:
        return None, ""  # no such connection: monitor_create says so, naming the ones there are
    user_id, url, token = found
    settings = current().settings
    gate = create_gate(settings.CREATE_CONCURRENCY, settings.CREATE_CONCURRENCY_PER_ACCOUNT)
    deadline = settings.CREATE_FETCH_TIMEOUT_SECONDS
    try:
        tools = await gate.run(user_id, lambda: list_tools(url, token, timeout=deadline,
                                                           allow_loopback=settings.FETCH_ALLOW_LOOPBACK,
                                                           own=own_endpoints(settings), egress=settings.egress),
                              deadline + 1)
    except Busy as exc:
        return None, str(exc)
    except asyncio.TimeoutError:
        return None, f"The MCP connection {name!r} did not list its tools within {deadline:g} seconds; try again."
    except McpError as exc:
        return None, f"The MCP connection {name!r} could not list its tools: {exc.message}"
    if duplicated_names(tools):
        await sync_to_thread(_end_duplicated, user_id, name, tools)
    return tuple(tools), ""


def _end_duplicated(user_id: int, name: str, tools: list) -> None:
    """The listing names a tool twice: that tool's live watches end now, as their next poll would end them."""
    with connection():
        for monitor, woke in end_duplicated_watches(user_id, name, tools, utcnow()):
            publish_monitor(monitor, woke)


def _connection_credentials(caller: Caller, name: str) -> tuple[int, str, str | None] | None:
    with connection():
        user = caller(False)
        row = find_connection(user.id, name)
        return None if row is None else (user.id, *credentials(row, current().keyring))


def _call(caller: Caller, action: str, arguments: dict, context: dict,
          listing: tuple[tuple | None, str] = (None, "")) -> dict | Prepared:
    """The reply, or a polled monitor_create that still needs its first check."""
    if wants_dry_run(action, arguments):
        return _dry_call(caller, arguments, context, listing)
    with connection():
        user = caller(True)
        conversation = conversation_for(user, context["conversation_id"], context.get("channel") or "chat",
                                        context.get("agent_id") or "", context.get("coalesce_seconds"))
        announce_conversation(conversation)  # a new one shows in the owner's open sidebars, whatever the action
        try:
            if action == "monitor_list":
                return {"ok": True, "result": monitor_list(user, conversation, arguments)}
            if action == "monitor_cancel":
                return _published(*monitor_cancel(user, conversation, arguments))
            if action == "list":
                return {"ok": True, "result": watch_list(user, conversation)}
            if action == "stop":
                return _published(*watch_stop(user, conversation, arguments))
            if action == "start":
                return _created(*watch_start(user, conversation, arguments, context.get("device"),
                                               create_context(), utcnow(), _woken_by(context)))
            prepared = prepare_create(user, conversation, arguments, create_context(*listing), utcnow(),
                                      _woken_by(context))
            if isinstance(prepared, Prepared):
                return prepared
            queue_first_check(prepared[0])
            return _created(*prepared)
        except ToolError as exc:
            return {"ok": False, "error": str(exc)}


def _dry_call(caller: Caller, arguments: dict, context: dict, listing: tuple[tuple | None, str]) -> dict | Prepared:
    """monitor_create with dry_run: answered now, or a Prepared still to read; it stores nothing, not even the
    conversation."""
    with connection():
        user = caller(True)
        try:
            prepared = prepare_dry_run(user, _conversation_as_is(user, context), arguments, create_context(*listing),
                                       utcnow(), _woken_by(context))
        except ToolError as exc:
            return {"ok": False, "error": str(exc)}
    return prepared if isinstance(prepared, Prepared) else {"ok": True, "result": prepared[1]}


def _conversation_as_is(user: User, context: dict) -> Conversation:
    """The caller's conversation, or an unsaved one standing in for it."""
    external = context["conversation_id"]
    return find_conversation(user, external) or Conversation(user=user, external_id=external,
                                                             channel=context.get("channel") or "chat",
                                                             agent_id=context.get("agent_id") or "")


def _dry_reply(prepared: Prepared, outcome) -> dict:
    try:
        return {"ok": True, "result": dry_run_result(prepared, outcome)}
    except ToolError as exc:
        return {"ok": False, "error": str(exc)}


def _store(caller: Caller, prepared: Prepared, outcome, checked_at) -> dict:
    with connection():
        caller(False)  # a token revoked while the first check ran creates nothing
        try:
            monitor, result = store_create(prepared, outcome, checked_at, utcnow())
            if outcome.picture is not None:
                keep_picture(current(), monitor.id, outcome)
            return _created(monitor, result)
        except ToolError as exc:
            return {"ok": False, "error": str(exc)}


def queue_first_check(monitor) -> None:
    """A document watch is checked at once (its condition may hold already); the rest wait for their time."""
    if (monitor.source or {}).get("type") in DOCUMENT_SOURCES and monitor.status == ACTIVE:
        queue_claims([(monitor.id, monitor.claim_seq)], utcnow())


def _published(monitor, result: dict) -> dict:
    publish_monitor(monitor)
    return {"ok": True, "result": result}


def _created(monitor, result: dict) -> dict:
    """A new monitor: its row (and its conversation, if new) appear on the owner's open pages."""
    publish_created(monitor)
    return {"ok": True, "result": result}


def create_context(mcp_listing: tuple | None = None, mcp_error: str = "") -> CreateContext:
    runtime = current()
    settings = runtime.settings
    if not settings.MONITORS_ENABLED:
        raise ToolError("Monitors are turned off on this Vigil instance; tell the user you can't watch this.")
    api_base = public_base(settings.PUBLIC_API_BASE_URL, settings.API_URL)
    io = runtime.source_io()  # its policy says whether pages may be rendered in a browser (issue 31)
    return CreateContext(limits_from(settings), SourceIO(io.fetcher, source_policy(runtime)),
                         settings.FETCH_MAX_TEXT_BYTES, runtime.judge_policy, runtime.keyring, api_base,
                         app_base(settings.PUBLIC_APP_URL, settings.SERVE_UI, api_base),
                         tools_enabled=settings.TOOL_SOURCES_ENABLED, mcp_listing=mcp_listing, mcp_error=mcp_error,
                         fires_per_day=runtime.lifecycle.max_fires_per_conversation_day)


def parse_call(data: Any) -> tuple[str, dict, dict]:
    if not isinstance(data, dict):
        raise ValidationException("The body must be a JSON object with action, arguments and context.")
    action, arguments, context = data.get("action"), data.get("arguments", {}), data.get("context")
    if action in WATCH_ACTIONS and "arguments" not in data:  # seed 002's flat form: monitor(action, command, …)
        arguments = {name: data[name] for name in ("command", "description", "device", "id") if name in data}
    if action not in ACTIONS:
        raise ValidationException(f"action must be one of {', '.join(ACTIONS)}.")
    if not isinstance(arguments, dict):
        raise ValidationException("arguments must be a JSON object.")
    if not isinstance(context, dict) or not isinstance(context.get("conversation_id"), str) \
            or not context["conversation_id"].strip() or len(context["conversation_id"]) > 200:
        raise ValidationException("context.conversation_id is required: the runtime's own conversation id (at most 200 characters).")
    for name in ("channel", "agent_id", "device"):
        if context.get(name) is not None and not isinstance(context[name], str):
            raise ValidationException(f"context.{name} must be a string.")
    problem = seconds_error(context.get("coalesce_seconds"))
    if problem:
        raise ValidationException(problem)
    if _holds_nul(data):
        raise ValidationException("Text in the call must not contain NUL characters (\\u0000); remove them.")
    return action, arguments, context


def _woken_by(context: dict) -> int | None:
    """context.woken_by: the id of the wake message that started this run (depth-1 chaining)."""
    value = context.get("woken_by")
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isascii()
                                                                   and value.isdigit())):
        raise ValidationException("context.woken_by must be the id of the wake message that started this run.")
    return int(value)


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

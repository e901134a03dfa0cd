"""The agents' declared tools, and the monitors that re-run them (tool sources).

A tool is registered by its agent's runtime (PUT /api/agents/{agent}/tools/{name}); its header values are secrets,
kept encrypted and never answered back. Each watch records the fingerprint of the tool it was armed on: a PUT that
changes the executable surface, or a DELETE, ends every watch of it at once with one wake saying so. A tool marked
requires_approval is armed only by the owner, on the same card as a device's command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime

import peewee

from engine.crypto import Keyring
from engine.errors import SpecError
from engine.spec import MonitorSpec
from engine.tools import (
    ToolDef, check_arguments, fingerprint, is_read_only, parse_tool, tool_from_record, tool_to_record,
)
from models.compiled import Compiled
from models.db import database, iso, write_transaction
from models.due import sooner
from models.monitors import create_event_monitor, load_for_check
from models.results import end_any_in_error, write_wake
from models.tables import (
    ACTIVE, AWAITING, CANCELLED, NOT_ENDED, AgentTool, AuditEvent, Conversation, McpConnection, Monitor, ToolApproval,
    User,
)

MASK = "••••••••"


class ToolRefused(ValueError):
    """A registry call or a watch that can't be made; str() says what to fix, `status` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def tool_key(user_id: int, agent_id: str, name: str) -> str:
    """The watch key of a tool's monitors (Monitor.watch_key): a PUT or DELETE of the tool finds them with it."""
    return f"tool:{user_id}:{agent_id}:{name}"


def connection_key(user_id: int, connection: str, tool: str) -> str:
    """A connection tool's watch key: "tool:" like a declared tool's (so the tool-watch limit counts both),
    the connection marked with @ where an agent id would be."""
    return f"tool:{user_id}:@{connection}:{tool}"


@dataclass(frozen=True)
class Stored:
    tool: AgentTool
    created: bool
    #: the watches the change ended, each with the wake that told its conversation
    ended: list


def put_tool(user: User, agent_id: str, name: str, body: object, keyring: Keyring, now: datetime) -> Stored:
    """Register or replace a tool. A changed executable surface ends the watches armed on the old one."""
    try:
        tool = parse_tool(name, body)
    except SpecError as exc:
        raise ToolRefused(str(exc)) from None
    record, headers = tool_to_record(tool)
    secret = keyring.encrypt(json.dumps(headers)) if any(headers) else ""
    new_print = fingerprint(tool)
    with write_transaction():
        row = _locked(user.id, agent_id, name)
        if row is None:
            try:
                with database.atomic():
                    row = AgentTool.create(user=user.id, agent_id=agent_id, name=name, definition=record,
                                           headers_encrypted=secret, fingerprint=new_print, created_at=now,
                                           updated_at=now)
                return Stored(row, True, [])
            except peewee.IntegrityError:  # registered meanwhile by another call: replace that one
                row = _locked(user.id, agent_id, name)
        changed = row.fingerprint != new_print
        AgentTool.update(definition=record, headers_encrypted=secret, fingerprint=new_print, updated_at=now) \
            .where(AgentTool.id == row.id).execute()
        row.definition, row.fingerprint, row.updated_at = record, new_print, now
        ended = end_watches(tool_key(user.id, agent_id, name), f"The tool {name!r} was edited (its parameters, steps "
                            "or output changed), so the watch stopped rather than run a version you did not arm.",
                            now) if changed else []
        return Stored(row, False, ended)


def delete_tool(user: User, agent_id: str, name: str, now: datetime) -> list:
    """Remove a tool; its watches end and say so. Returns them with their wakes."""
    with write_transaction():
        row = _locked(user.id, agent_id, name)
        if row is None:
            raise ToolRefused(f"The agent {agent_id!r} has no tool {name!r}.", 404)
        row.delete_instance()
        return end_watches(tool_key(user.id, agent_id, name), f"The tool {name!r} was removed, so the watch "
                           "stopped.", now)


def end_watches(key: str, reason: str, now: datetime, like: bool = False) -> list:
    """End every live watch with this key (a LIKE pattern when `like`), each telling its conversation once."""
    matching = Monitor.watch_key ** key if like else Monitor.watch_key == key
    ended = []
    for monitor in Monitor.select(Monitor.id).where(matching & Monitor.status.in_(NOT_ENDED)):
        full = load_for_check(monitor.id)
        woke = end_any_in_error(full, reason, now)
        if woke is not False:
            ended.append((load_for_check(monitor.id), woke))
    return ended


def _locked(user_id: int, agent_id: str, name: str) -> AgentTool | None:
    query = AgentTool.select().where((AgentTool.user == user_id) & (AgentTool.agent_id == agent_id)
                                     & (AgentTool.name == name))
    if database.for_update:
        query = query.for_update()
    return query.first()


def agent_tools(user: User, agent_id: str | None = None) -> list[AgentTool]:
    query = AgentTool.select().where(AgentTool.user == user.id)
    if agent_id is not None:
        query = query.where(AgentTool.agent_id == agent_id)
    return list(query.order_by(AgentTool.agent_id, AgentTool.name))


def tool_json(row: AgentTool) -> dict:
    """What the registry answers: the definition with every header value masked."""
    definition = row.definition
    steps = [{"kind": "http", "method": s["method"], "url": s["url"],
              "headers": {name: MASK for name in s.get("header_names", [])}, "query": s.get("query") or {},
              **({"body": s["body"]} if s.get("body") is not None else {}), "read_only": s.get("read_only", False)}
             for s in definition["steps"]]
    return {"agent_id": row.agent_id, "name": row.name, "description": definition.get("description", ""),
            "parameters": definition["parameters"], "steps": steps,
            "output": {"main": definition["output_main"]} if definition.get("output_main") else None,
            "requires_approval": definition.get("requires_approval", False), "fingerprint": row.fingerprint,
            "read_only": is_read_only(tool_from_record(definition, [])), "updated_at": iso(row.updated_at)}


def load_tool(row: AgentTool, keyring: Keyring) -> ToolDef:
    """The tool as it runs, header values decrypted (never to be logged or answered)."""
    headers = json.loads(keyring.decrypt(row.headers_encrypted)) if row.headers_encrypted else []
    return tool_from_record(row.definition, headers)


#: every poll of a tool watch looks its tool up: the SQL is built once (peewee took ~1 ms of CPU per build)
_FIND_TOOL = Compiled(lambda user_id, agent_id, name: AgentTool.select().where(
    (AgentTool.user == user_id) & (AgentTool.agent_id == agent_id) & (AgentTool.name == name)))


def find_tool(user_id: int, agent_id: str, name: str) -> AgentTool | None:
    return _FIND_TOOL.first(user_id, agent_id, name)


def resolve_watch(user: User, conversation: Conversation, spec: MonitorSpec) -> tuple[MonitorSpec, ToolDef]:
    """The tool a watch names, checked for watching: it exists on that agent, its arguments fit, it has an
    output.main and reads only. Returns the spec with what was resolved (agent, tool id, fingerprint)."""
    source = spec.source
    agent = source.agent_id or conversation.agent_id
    if not agent:
        raise ToolRefused("Say whose tool it is with source.agent_id (the calling agent is the default, and this "
                          "call named none).")
    row = find_tool(user.id, agent, source.tool)
    if row is None:
        names = ", ".join(repr(t.name) for t in agent_tools(user, agent)) or "none registered"
        raise ToolRefused(f"The agent {agent!r} has no tool {source.tool!r} (its tools: {names}); the runtime "
                          "registers tools with PUT /api/agents/{agent_id}/tools/{name}.")
    tool = tool_from_record(row.definition, [])
    try:
        arguments = check_arguments(tool, source.arguments)
    except SpecError as exc:
        raise ToolRefused(str(exc)) from None
    if not tool.output_main:
        raise ToolRefused(f"The tool {tool.name!r} declares no output.main, so a condition on it could never "
                          "become true; it can't be watched.")
    if not is_read_only(tool):
        step = next(i for i, s in enumerate(tool.steps) if s.method not in ("GET", "HEAD") and not s.read_only)
        raise ToolRefused(f"Only read-only tools may be watched: step {step} of {tool.name!r} is a "
                          f"{tool.steps[step].method} not marked read_only, so it might change something each poll.")
    resolved = replace(source, agent_id=agent, arguments=arguments, tool_id=row.id, tool_fingerprint=row.fingerprint)
    return replace(spec, source=resolved), tool


def create_tool_monitor(user: User, conversation: Conversation, spec: MonitorSpec, needs_approval: bool,
                        now: datetime) -> Monitor:
    """A watch of a declared or a connection's tool: armed at once (its first poll is due now), or awaiting the
    owner's approval of this exact call."""
    source = spec.source
    monitor = create_event_monitor(user, conversation, spec, now)
    key = (connection_key(user.id, source.connection, source.tool) if source.connection
           else tool_key(user.id, source.agent_id, source.tool))
    state = {"holds": False} if spec.check.type == "cel" else None  # a cel condition may hold on the first poll
    fields = {Monitor.polled: True, Monitor.watch_key: key, Monitor.check_state: state, Monitor.next_check_at: now}
    if needs_approval:
        fields[Monitor.status] = AWAITING
        ToolApproval.create(monitor=monitor.id, tool_key=key, arguments=source.arguments,
                            fingerprint=source.tool_fingerprint, created_at=now)
    else:
        _audit(monitor, source, "read_only_hint" if source.connection else "read_only")
    Monitor.update(fields).where(Monitor.id == monitor.id).execute()
    if not needs_approval:
        sooner(now)  # armed: its first poll is due now (the event monitor it was created as rang for its expiry)
    return load_for_check(monitor.id)


def decide_tool(user: User, monitor_id: str, approve: bool, now: datetime) -> tuple[Monitor, object]:
    """The owner's decision on an awaiting tool call: approved arms it (first poll now); denied cancels it and
    tells the agent once."""
    with write_transaction():
        approval = (ToolApproval.select().join(Monitor)
                    .where((ToolApproval.monitor == monitor_id) & (Monitor.user == user)).first())
        monitor = load_for_check(monitor_id) if approval else None
        if monitor is None or monitor.status != AWAITING or approval.decision is not None:
            raise ToolRefused("This tool call is not waiting for approval any more.", 409)
        source = monitor.source
        if source.get("connection"):  # an MCP tool: its listing is checked again at every poll
            connected = McpConnection.get_or_none((McpConnection.user == user.id)
                                                  & (McpConnection.name == source["connection"]))
            current = approval.fingerprint if connected else None
        else:
            row = find_tool(user.id, source.get("agent_id"), source.get("tool"))
            current = row.fingerprint if row is not None else None
        if current != approval.fingerprint or approval.fingerprint != source.get("tool_fingerprint") \
                or approval.arguments != source.get("arguments") or approval.tool_key != monitor.watch_key:
            raise ToolRefused("The tool or its call changed since it was asked for; it can't be approved.", 409)
        ToolApproval.update(decision="approved" if approve else "denied", decided_at=now) \
            .where(ToolApproval.id == approval.id).execute()
        if approve:
            Monitor.update(status=ACTIVE, next_check_at=now, updated_at=now) \
                .where((Monitor.id == monitor.id) & (Monitor.status == AWAITING)).execute()
            sooner(now)  # its first poll is due now
            _audit(monitor, source, "approved")
            return load_for_check(monitor_id), None
        Monitor.update(status=CANCELLED, updated_at=now) \
            .where((Monitor.id == monitor.id) & (Monitor.status == AWAITING)).execute()
        _audit(monitor, source, "denied")
        text = (f"The user denied re-running the tool {source.get('tool')!r} for \"{monitor.description}\"; the "
                "monitor was cancelled. Don't call it another way; ask the user what to do.")
        monitor.status = CANCELLED
        woke = write_wake(monitor, "tool_denied", "denied", text, {"tool": source.get("tool")})
        return load_for_check(monitor_id), woke


def _audit(monitor: Monitor, source: dict | object, decision: str) -> None:
    get = source.get if isinstance(source, dict) else lambda name: getattr(source, name)
    detail = {"agent_id": get("agent_id"), "connection": get("connection"), "tool": get("tool"),
              "arguments": get("arguments"),
              "fingerprint": get("tool_fingerprint"), "decision": decision}
    AuditEvent.create(user=monitor.user_id, action="tool.armed", monitor=monitor.id,
                      detail=json.dumps(detail, ensure_ascii=False))


def armed_tool_watches(user: User) -> int:
    return Monitor.select().where((Monitor.user == user) & Monitor.status.in_(NOT_ENDED)
                                  & (Monitor.watch_key.startswith("tool:"))).count()

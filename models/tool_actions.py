"""The monitor tool's actions as an agent calls them: monitor_create, and seed 002's start/stop/list
(monitor_list and monitor_cancel are in models/tool_monitors.py).

Each returns the result for the model or raises ToolError with one sentence saying what to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from engine.crypto import Keyring
from engine.links import DEFAULT_BASE, unreachable_reason
from engine.signatures import example_body, example_curl, new_secret
from engine.pipeline import BASELINE, Outcome, Prior, run_check
from engine.durations import describe_duration
from engine.forecast import ALREADY_HOLDS, already_holds
from engine.placeholders import values as placeholder_values
from engine.sources.time_source import fire_time, format_time
from engine.schedule import next_check_at
from engine.shared_fetch import fetch_key
from engine.sources import DOCUMENT_SOURCES, SourceIO
from engine.spec import Limits, MonitorSpec, SpecError, channel_refusal, dry_run_of, parse_create
from engine.tools import ToolDef, vouched_writes
from models.db import iso, utcnow
from models.judging import DEFAULT_MODEL, JudgePolicy, resolve_model
from models.approvals import create_request
from models.commands import CommandRefused, create_command_monitor, resolve_device
from models.runs import is_stream, watcher_live, watcher_states
from models.guardrails import GuardrailRefused, LineageUnknown, check_armed_limits, with_lineage
from models.triggers import create_link
from models.monitors import (
    create_event_monitor, create_monitor, create_document_monitor, create_time_monitor, user_monitors,
)
from models.conversations import conversation_for, find_conversation
from models.documents import stored_body
from models.connections import find_connection, resolve_connection_watch, user_connections
from models.tools import ToolRefused, armed_tool_watches, create_tool_monitor, resolve_watch
from models.tables import AWAITING, Conversation, Device, User
from models.tool_errors import LimitReached, ToolError
from models.tool_monitors import monitor_cancel


@dataclass(frozen=True)
class CreateContext:
    """What monitor_create needs of the instance: its limits, how sources are read, the judge catalog."""
    limits: Limits
    io: SourceIO
    max_text_bytes: int
    judge: JudgePolicy
    keyring: Keyring | None = None
    base_url: str = DEFAULT_BASE
    app_url: str = DEFAULT_BASE
    #: TOOL_SOURCES_ENABLED
    tools_enabled: bool = True
    #: a tool watch on an MCP connection: the connection's tools, listed by the caller with no database connection
    #: held (or why they could not be)
    mcp_listing: tuple | None = None
    mcp_error: str = ""
    #: MONITOR_MAX_FIRES_PER_CONVERSATION_DAY, for a dry run's wakes_left
    fires_per_day: int = 20


@dataclass(frozen=True)
class DryRunPlan:
    """What a dry run knows before its read: the cost forecast, and whether arming it now would be refused."""
    forecast: dict
    limits: str


@dataclass(frozen=True)
class McpRun:
    """A dry run's one call of a read-only tool on an MCP connection: where, as whom (its bearer token, decrypted,
    never shown), and what."""
    url: str
    token: str | None = field(repr=False)
    tool: str
    arguments: dict


@dataclass(frozen=True)
class Prepared:
    """A polled monitor_create that passed validation and waits for its first check (taken with no database
    connection held: it may take as long as the source does)."""
    user_id: int
    conversation_id: int | None
    spec: MonitorSpec
    notes: list[str]
    limits: Limits | None = None
    #: a dry run: its read is evaluated as a new reading and nothing is stored (dry_run_result)
    dry_run: DryRunPlan | None = None
    #: a dry run of a declared tool that needs no approval: the tool as it runs (header values decrypted)
    tool: ToolDef | None = None
    #: a dry run of a read-only MCP connection tool: the call it makes once
    mcp: McpRun | None = None


def monitor_create(user: User, conversation: Conversation, arguments: object, ctx: CreateContext, now: datetime):
    """Validate, take the baseline check, store the monitor, in one go. Returns (monitor, result).

    The web tier runs the same three steps apart (prepare_create, first_check, store_create), so that no
    connection is held while the source answers."""
    prepared = prepare_create(user, conversation, arguments, ctx, now)
    if not isinstance(prepared, Prepared):
        return prepared
    return store_create(prepared, first_check(prepared, ctx.io, ctx.max_text_bytes, now), now, utcnow())


def prepare_create(user: User, conversation: Conversation, arguments: object, ctx: CreateContext,
                   now: datetime, woken_by: int | None = None) -> Prepared | tuple:
    """Validate the call. A link monitor needs no first check and is stored now: (monitor, result)."""
    spec, notes, dry_run, _ = validate_create(user, conversation, arguments, ctx, woken_by)
    if dry_run:  # models/dry_run.py answers it, through the monitor tool
        raise ToolError("dry_run works through the monitor tool's monitor_create; leave it out here.")
    try:
        return _create_now(user, conversation, spec, notes, ctx, now)
    except GuardrailRefused as exc:  # another create from the same wake got there first (one_per_wake)
        raise LimitReached(str(exc)) from None


def _create_now(user: User, conversation: Conversation, spec: MonitorSpec, notes: list[str], ctx: CreateContext,
                now: datetime) -> Prepared | tuple:
    if spec.source.type == "webhook":
        return _create_trigger(user, conversation, spec, notes, ctx, now)
    if spec.source.type == "approval":
        return _create_approval(user, conversation, spec, notes, ctx, now)
    if spec.source.type == "command":
        return _create_command(user, conversation, spec, notes, ctx, now)
    if spec.source.type == "time":
        return _create_time(user, conversation, spec, notes, ctx, now)
    if spec.source.type in DOCUMENT_SOURCES:
        return _create_document(user, conversation, spec, notes, now)
    if spec.source.type == "tool":
        return _create_tool(user, conversation, spec, notes, ctx, now)
    return Prepared(user.id, conversation.id, spec, notes, ctx.limits)


def validate_create(user: User, conversation: Conversation, arguments: object, ctx: CreateContext,
                    woken_by: int | None = None) -> tuple[MonitorSpec, list[str], bool, str]:
    """The call checked as every create checks it: (spec, notes, dry_run, the guardrail that refuses arming it
    now). A refusal raises, except a guardrail's on a dry run, which says it instead ("" when there is none)."""
    refusal = channel_refusal(conversation.channel)
    if refusal:
        raise ToolError(refusal)
    try:
        dry_run = dry_run_of(arguments)
        spec, notes = parse_create(arguments, ctx.limits, ctx.io.policy)
    except SpecError as exc:
        raise ToolError(str(exc)) from None
    limit = ""
    try:
        spec = _guarded(user, conversation, spec, woken_by, ctx.limits)
    except LimitReached as exc:
        if not dry_run:
            raise
        limit = str(exc)
    notes += _judge_notes(user, spec.condition, spec.judge_model, ctx.judge)
    return spec, notes, dry_run, limit


def _guarded(user: User, conversation: Conversation, spec: MonitorSpec, woken_by: int | None,
             limits: Limits) -> MonitorSpec:
    """The spec with its lineage, within the armed limits; LimitReached when a guardrail refuses it."""
    try:
        spec = with_lineage(user, spec, woken_by)
        check_armed_limits(user, conversation, limits)
    except GuardrailRefused as exc:
        raise LimitReached(str(exc)) from None
    except LineageUnknown as exc:
        raise ToolError(str(exc)) from None
    return spec


def first_check(prepared: Prepared, io: SourceIO, max_text_bytes: int, now: datetime) -> Outcome:
    """The baseline check: engine only, no database."""
    return run_check(io, prepared.spec.source, prepared.spec.check, Prior(), max_text_bytes, now=now,
                     placeholders=placeholder_values(now, None, None))


def first_check_failed(spec: MonitorSpec, outcome: Outcome) -> ToolError:
    where = spec.source.url or spec.source.path or f"the tool {spec.source.tool!r}"
    return ToolError(f"The first check of {where} failed, so no monitor was created: {outcome.error}")


def store_create(prepared: Prepared, outcome: Outcome, checked_at: datetime, now: datetime):
    """Store the monitor with its baseline, if the conversation is still the caller's. Returns (monitor, result)."""
    spec, notes = prepared.spec, list(prepared.notes)
    if outcome.kind != BASELINE:
        raise first_check_failed(spec, outcome)
    conversation = Conversation.get_or_none((Conversation.id == prepared.conversation_id)
                                            & (Conversation.user == prepared.user_id))
    if conversation is None:
        raise ToolError("The conversation was removed while the first check ran, so no monitor was created.")
    if prepared.limits is not None:  # another call may have taken the last slot while this first check ran
        try:
            check_armed_limits(conversation.user, conversation, prepared.limits)
        except GuardrailRefused as exc:
            raise LimitReached(str(exc)) from None
    if already_holds(spec.check, outcome.verdict.state):
        notes.append(ALREADY_HOLDS)
    try:
        monitor = create_monitor(conversation.user, conversation, spec, outcome, checked_at,
                                 next_check_at(now, spec.interval_seconds, slot=fetch_key(
                                     {"type": spec.source.type, "url": spec.source.url}) or None))
    except GuardrailRefused as exc:  # another create from the same wake was stored while this first check ran
        raise LimitReached(str(exc)) from None
    return monitor, {
        "monitor_id": monitor.id, "status": monitor.status, "baseline": outcome.verdict.summary,
        "next_check_at": iso(monitor.next_check_at), "expires_at": iso(monitor.expires_at),
        "wakes_left": monitor.wakes_left, "notes": notes,
    }


SECRET_HIDDEN = "hidden from you; the user reveals it on the link card in this chat"


def _create_trigger(user: User, conversation: Conversation, spec, notes: list[str], ctx: CreateContext,
                    now: datetime):
    """A webhook monitor: its link, and how a sender calls it; the signing secret stays with the user."""
    scheme = spec.source.signature
    monitor = create_event_monitor(user, conversation, spec, now)
    token = create_link(monitor, scheme, new_secret(scheme), spec.source.max_hits, ctx.keyring)
    url = f"{ctx.base_url}/api/triggers/{token}"
    reason = unreachable_reason(ctx.base_url)
    notes += reach_notes(ctx.base_url) + wake_limit_notes(monitor.max_wakes)
    return monitor, {
        "monitor_id": monitor.id, "status": monitor.status, "url": url, "method": "POST", "signature": scheme,
        "secret": SECRET_HIDDEN if scheme != "none" else None, "reachable_from_internet": reason is None,
        "example_curl": example_curl(url, scheme, example_body(spec.check)), "expires_at": iso(monitor.expires_at),
        "max_hits": spec.source.max_hits, "max_wakes": monitor.max_wakes, "wakes_left": monitor.wakes_left,
        "notes": notes,
    }


def wake_limit_notes(max_wakes: int) -> list[str]:
    """The default max_wakes of 1 in words: the first delivery that wakes ends the link (later POSTs get 404)."""
    if max_wakes != 1:
        return []
    return ["This link ends after 1 wake: the first delivery that wakes you ends it and later POSTs get 404. "
            "For a sender that posts progress several times, create it with max_wakes set to how many you want."]


def reach_notes(base_url: str) -> list[str]:
    reason = unreachable_reason(base_url)
    if not reason:
        return []
    return [f"Outside services can't reach this link yet ({reason}); tell the user it works from this machine only "
            "until the instance has a public PUBLIC_API_BASE_URL."]


def _create_approval(user: User, conversation: Conversation, spec, notes: list[str], ctx: CreateContext,
                     now: datetime):
    """An approval monitor: only the page link to forward, never anything that decides."""
    monitor = create_event_monitor(user, conversation, spec, now)
    token = create_request(monitor, now, ctx.keyring)
    return monitor, {
        "monitor_id": monitor.id, "status": monitor.status, "approval_url": f"{ctx.app_url}/approve/{token}",
        "options": list(spec.source.options), "expires_at": iso(monitor.expires_at), "notes": notes,
    }


def _create_time(user: User, conversation: Conversation, spec, notes: list[str], ctx: CreateContext,
                 now: datetime):
    """A time watch: its moment fixed now (a delay from now), within the monitor's lifetime, never in the past."""
    fire_at = fire_at_for(spec, ctx, now)
    spec = replace(spec, source=replace(spec.source, fire_at=format_time(fire_at), delay=None))
    monitor = create_time_monitor(user, conversation, spec, now, fire_at)
    return monitor, {"monitor_id": monitor.id, "status": monitor.status, "fire_at": format_time(fire_at),
                     "expires_at": iso(monitor.expires_at), "notes": notes}


def fire_at_for(spec, ctx: CreateContext, now: datetime) -> datetime:
    """A time watch's moment, in the future and within the monitor's lifetime; ToolError otherwise."""
    fire_at = fire_time(spec.source, now)
    if fire_at <= now:
        raise ToolError(f"source.fire_at {format_time(fire_at)} has already passed (it is {format_time(now)} now); "
                        "give a time in the future, or a delay.")
    expires_at = now + timedelta(seconds=spec.ttl_seconds)
    if fire_at >= expires_at:
        raise ToolError(f"The time {format_time(fire_at)} is past the monitor's lifetime (it would expire at "
                        f"{format_time(expires_at)}); give a longer expires_in, at most "
                        f"{describe_duration(ctx.limits.max_ttl)}, or an earlier time.")
    return fire_at


def _create_document(user: User, conversation: Conversation, spec, notes: list[str], now: datetime):
    """A document (or ingest) watch: armed now, its condition parse-checked only; the caller queues its first
    check, which fires at once if the condition already holds."""
    source = spec.source
    if stored_body(user.id, source.item_type, source.item_id) is None:
        notes.append(no_document_yet(source))
    monitor = create_document_monitor(user, conversation, spec, now)
    return monitor, {"monitor_id": monitor.id, "status": monitor.status, "item_type": source.item_type,
                     "item_id": source.item_id, "condition": spec.check.expr, "expires_at": iso(monitor.expires_at),
                     "wakes_left": monitor.wakes_left, "notes": notes}


def _create_tool(user: User, conversation: Conversation, spec, notes: list[str], ctx: CreateContext,
                 now: datetime):
    """One of the agent's read-only tools, re-run as the owner with no model: armed at once, or, for a tool that
    requires approval, waiting for the owner to approve this exact call (the agent gets the page's link)."""
    spec, needs_approval = resolved_tool(user, conversation, spec, ctx)
    refuse_past_tool_limit(user, ctx)
    monitor = create_tool_monitor(user, conversation, spec, needs_approval, now)
    source = spec.source
    result = {"monitor_id": monitor.id, "status": monitor.status, "tool": source.tool,
              **({"connection": source.connection} if source.connection else {"agent_id": source.agent_id}),
              "arguments": source.arguments, "interval_seconds": monitor.interval_seconds,
              "expires_at": iso(monitor.expires_at), "wakes_left": monitor.wakes_left, "notes": notes}
    if monitor.status == AWAITING:
        result["approve_url"] = f"{ctx.app_url}/commands/{monitor.id}"
        notes.append(f"{needs_approval_words(source)}: nothing runs until the user approves this exact call on the "
                     "conversation page or at approve_url. Tell the user, and give them the link.")
    else:
        notes.append("Its first poll runs now; a condition that already holds wakes you then.")
    return monitor, result


def resolved_tool(user: User, conversation: Conversation, spec, ctx: CreateContext) -> tuple[MonitorSpec, bool]:
    """The watch's tool resolved and checked for watching, and whether the owner must approve it first."""
    if not ctx.tools_enabled:
        raise ToolError("Tool watches are turned off on this Vigil instance (TOOL_SOURCES_ENABLED); tell the user.")
    try:
        if spec.source.connection:
            return _resolve_connection(user, spec, ctx)
        spec, tool = resolve_watch(user, conversation, spec)
        return spec, tool.requires_approval or bool(vouched_writes(tool))
    except ToolRefused as exc:
        raise ToolError(str(exc)) from None


def refuse_past_tool_limit(user: User, ctx: CreateContext) -> None:
    if armed_tool_watches(user) >= ctx.limits.max_armed_tool_watches:
        raise LimitReached(f"This account already has {ctx.limits.max_armed_tool_watches} armed tool watches, the "
                           "most it may have (each one is a recurring poll); cancel one and its slot frees at once.")


def needs_approval_words(source) -> str:
    why = ("doesn't say it only reads (readOnlyHint)" if source.connection
           else "needs its owner's approval for each watch of it (it asks for it, or a step other than GET or HEAD "
           "is only marked read_only)")
    return f"The tool {source.tool!r} {why}"


def _resolve_connection(user: User, spec, ctx: CreateContext):
    if find_connection(user.id, spec.source.connection) is None:
        names = ", ".join(repr(c.name) for c in user_connections(user)) or "none yet"
        raise ToolRefused(f"There is no MCP connection {spec.source.connection!r} (the owner's connections: {names}; "
                          "the owner adds one in Settings → Connections).")
    if ctx.mcp_listing is None:
        raise ToolRefused(ctx.mcp_error or f"The tools of the MCP connection {spec.source.connection!r} could not be "
                          "listed; try again.")
    return resolve_connection_watch(user, spec, list(ctx.mcp_listing))


def _create_command(user: User, conversation: Conversation, spec, notes: list[str], ctx: CreateContext,
                    now: datetime):
    """A command on one of the owner's devices: armed at once on a `full` device, else waiting for the owner
    to approve this exact command; the agent gets the approval page's link to hand over, never a way to decide."""
    spec, device = device_for(user, spec)
    monitor = create_command_monitor(user, conversation, spec, device, now)
    result = {"monitor_id": monitor.id, "status": monitor.status, "device": device.name,
              "command": spec.source.command, "mode": spec.source.mode, "expires_at": iso(monitor.expires_at),
              "notes": notes}
    if monitor.status == AWAITING:
        result["approve_url"] = f"{ctx.app_url}/commands/{monitor.id}"
        notes.append(f"The device {device.name!r} asks its owner to approve each command: nothing runs until the "
                     "user approves this exact command on the conversation page or at approve_url. Tell the user, "
                     "and give them the link.")
    elif spec.source.mode == "stream":
        notes.append("The watcher is starting on the device; each line it prints wakes you.")
    else:
        notes.append("The first run on the device is the baseline; it never wakes you.")
    return monitor, result


def device_for(user: User, spec) -> tuple[MonitorSpec, Device]:
    try:
        return resolve_device(user, spec)
    except CommandRefused as exc:
        raise ToolError(str(exc)) from None


def no_document_yet(source) -> str:
    return (f"There is no document {source.item_type}/{source.item_id} yet; the watch waits for its first PUT "
            "/api/documents write.")


def _judge_notes(user: User, condition: str, model_name: str, policy: JudgePolicy) -> list[str]:
    """judge_model names a model in the account's own Settings → Models; another account's is as unknown."""
    if model_name and not condition:
        raise ToolError("judge_model only applies with a condition; add the condition or leave judge_model out.")
    if not condition:
        return []
    if resolve_model(user.id, model_name, policy) is not None:
        return []
    if model_name and model_name != DEFAULT_MODEL:
        raise ToolError(f"There is no judge model named {model_name!r} in this account's Settings → Models; "
                        "leave judge_model out to use the default.")
    return ["No judge model is configured, so matches will wake you marked as not checked against the "
            "condition; decide yourself whether it holds."]


def conversation_to_wake(user: User, conversation_id: str | None, channel: str, agent_id: str) -> Conversation:
    """Seed 001's conversationId. A workflow run has no conversation of its own, so a workflow step names an
    existing chat conversation of the account to wake; without one it is refused as seed 000 refuses it."""
    if channel == "workflow":
        if conversation_id is None:
            raise ToolError(f"{channel_refusal('workflow')} A workflow step may name the chat conversation to wake "
                            "with conversationId.")
        conversation = find_conversation(user, conversation_id)
        if conversation is None or channel_refusal(conversation.channel):
            raise ToolError(f"conversationId {conversation_id!r} is not a chat conversation of this account; a "
                            "workflow step can only wake a conversation that exists already.")
        return conversation
    if conversation_id is None:
        raise ToolError("conversationId is required: the conversation the monitor wakes.")
    return conversation_for(user, conversation_id, channel, agent_id)


#: seed 002's call shape: a watcher in the calling conversation
WATCH_ACTIONS = ("start", "stop", "list")
WATCH_PREFIX = "mon_"


def watch_start(user: User, conversation: Conversation, arguments: object, context_device: str | None,
                ctx: CreateContext, now: datetime, woken_by: int | None = None):
    """action=start: a stream monitor over `command`, labelled `description`. Returns (monitor, result)."""
    if not isinstance(arguments, dict):
        raise ToolError("start needs arguments: command (the watcher) and description (its label).")
    unknown = sorted(set(arguments) - {"command", "description", "device"})
    if unknown:
        raise ToolError(f"Unknown argument '{unknown[0]}'; start takes command, description and device.")
    device = arguments.get("device") or context_device or _only_device(user)
    source = {"type": "command", "device": device, "command": arguments.get("command"), "mode": "stream"}
    monitor, result = prepare_create(user, conversation, {"description": arguments.get("description"),
                                                          "source": source}, ctx, now, woken_by)
    watch_id = WATCH_PREFIX + monitor.id
    if monitor.status == AWAITING:
        message = (f"Monitor {watch_id} is waiting: the user must approve running this command on "
                   f"{result['device']!r} first ({result['approve_url']}). Nothing runs until then. Stop it with "
                   f"action=stop, id={watch_id}.")
    else:
        message = (f"Started monitor {watch_id}: watching \"{monitor.description}\". Stop it with action=stop, "
                   f"id={watch_id}.")
    return monitor, {**result, "id": watch_id, "message": message}


def _only_device(user: User) -> str:
    names = [d.name for d in Device.select(Device.name).where((Device.user == user) & Device.revoked_at.is_null())]
    if len(names) == 1:
        return names[0]
    if not names:
        raise ToolError("No device is paired with this account yet; ask the user to pair one in Settings → Devices "
                        "(or run `vigil runner pair` on it), then try again.")
    raise ToolError(f"The user has several devices ({', '.join(repr(n) for n in sorted(names))}); say which one "
                    "with device.")


def watch_stop(user: User, conversation: Conversation, arguments: object):
    """action=stop: cancel one of this conversation's watches. Returns (monitor, result)."""
    watch_id = arguments.get("id") if isinstance(arguments, dict) else None
    if not isinstance(watch_id, str) or not watch_id:
        raise ToolError("stop needs id: the mon_… id that start returned (or see action=list).")
    monitor, result = monitor_cancel(user, conversation, {"monitor_id": watch_id.removeprefix(WATCH_PREFIX)})
    message = (f"Monitor {WATCH_PREFIX}{monitor.id} had stopped already." if "note" in result
               else f"Stopped monitor {WATCH_PREFIX}{monitor.id}.")
    return monitor, {**result, "id": WATCH_PREFIX + monitor.id, "message": message}


def watch_list(user: User, conversation: Conversation) -> dict:
    """action=list: this conversation's watches whose process runs or is about to start; a paused or ended watch
    whose watcher has stopped is gone, as seed 002's registry forgets a watch whose command ended."""
    streams = [m for m in user_monitors(user, conversation, live=True) if is_stream(m)]
    watchers = watcher_states(streams)
    return {"watches": [{"id": WATCH_PREFIX + m.id, "description": m.description, "command": m.source["command"],
                         "device": m.source["device"], "status": m.status, "watcher": watchers[m.id]}
                        for m in streams if watcher_live(m, watchers[m.id])]}

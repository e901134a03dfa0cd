"""monitor_create with dry_run (issue 18): try a monitor before arming it.

Validated exactly as a create is (models/tool_actions.validate_create), a guardrail that would refuse arming it
reported rather than refusing, and nothing stored: no monitor, run, event, trigger link, approval or message. A
source a create reads first is read the same way (the same gate and timeout, with no connection held) and the
check is evaluated on it as a new reading, so the answer says whether it would fire on what is there now; no
judge is asked. The forecast is engine/forecast.py's.
"""

from __future__ import annotations

from datetime import datetime

from engine.errors import ContentError
from engine.forecast import dry_reading
from engine.http import FetchError
from engine.pipeline import ERROR, Outcome, Prior, check_body, run_check
from engine.placeholders import values as placeholder_values
from engine.sources import DOCUMENT_SOURCES, SourceIO
from engine.sources.time_source import format_time
from engine.spec import MonitorSpec
from adapters.mcp_client import McpError, call_tool
from engine.tools import ToolDef, mcp_run_body, poll_tool
from models.connections import credentials, find_connection
from models.documents import stored_body
from models.forecast_data import forecast_for
from models.tables import Conversation, Device, User
from models.tool_actions import (
    CreateContext, DryRunPlan, LimitReached, McpRun, Prepared, device_for, fire_at_for, first_check_failed,
    needs_approval_words, no_document_yet, reach_notes, refuse_past_tool_limit, resolved_tool, validate_create,
)
from models.tools import find_tool, load_tool

#: the sources a dry run reads as a create's first check does (a declared tool too, when it needs no approval)
READ_SOURCES = ("page", "json", "feed", "file", "metric")
JUDGE_SKIPPED = ("A dry run asks no judge model; armed, the judge would be asked whether the condition holds each "
                 "time the check matches.")


def wants_dry_run(action: str, arguments: object) -> bool:
    """Whether a tool call asks for a dry run; one whose dry_run is not a boolean is refused here too, so that
    refusal stores nothing either."""
    return action == "monitor_create" and isinstance(arguments, dict) and arguments.get("dry_run", False) is not False


def prepare_dry_run(user: User, conversation: Conversation, arguments: object, ctx: CreateContext, now: datetime,
                    woken_by: int | None = None) -> Prepared | tuple:
    """A Prepared when the source is read first (first_read, then dry_run_result), else (None, result) now."""
    spec, notes, _, limit = validate_create(user, conversation, arguments, ctx, woken_by)
    kind, ends_at, reading, tool, mcp = spec.source.type, None, None, None, None
    if kind == "webhook":
        notes.append(f"Armed, this would create a trigger link (POST, signature {spec.source.signature}) that wakes "
                     "you on each delivery its check passes; a dry run creates no link.")
        notes += reach_notes(ctx.base_url)
    elif kind == "approval":
        notes.append("Armed, this would create an approval link for a person to decide on, and the decision would "
                     "wake you once; a dry run creates no link.")
    elif kind == "command":
        spec, device = device_for(user, spec)
        notes.append(_would_run(spec, device))
    elif kind == "time":
        ends_at = fire_at_for(spec, ctx, now)
        notes.append(f"Armed, it would wake you once at {format_time(ends_at)}.")
    elif kind in DOCUMENT_SOURCES:
        reading = _document_reading(user, spec, notes, ctx, now)
    elif kind == "tool":
        spec, tool, mcp, limit = _tool_to_run(user, conversation, spec, notes, ctx, limit)
    plan = DryRunPlan(forecast_for(user.id, conversation.id, spec, ctx.fires_per_day, now, ends_at),
                      _limits_words(limit))
    prepared = Prepared(user.id, conversation.id, spec, notes, dry_run=plan, tool=tool, mcp=mcp)
    if kind in READ_SOURCES or tool is not None or mcp is not None:
        return prepared
    return None, dry_run_result(prepared, reading, fires_at_once=kind in DOCUMENT_SOURCES)


def first_read(prepared: Prepared, io: SourceIO, max_text_bytes: int, now: datetime) -> Outcome:
    """A create's first check, evaluated as a new reading (an empty prior state): engine only, no database."""
    values = placeholder_values(now, None, None)
    if prepared.tool is not None:
        return _tool_poll(prepared, io, max_text_bytes, now, values)
    if prepared.mcp is not None:
        return _mcp_poll(prepared, io, max_text_bytes, now)
    return run_check(io, prepared.spec.source, prepared.spec.check, Prior(state={}), max_text_bytes, now=now,
                     placeholders=values)


def dry_run_result(prepared: Prepared, outcome: Outcome | None, fires_at_once: bool = False) -> dict:
    """The answer: what the check makes of what was read (None: nothing could be), the forecast and the limits.
    A read that failed is refused as a create refuses it."""
    spec = prepared.spec
    if outcome is not None and outcome.kind == ERROR:
        raise first_check_failed(spec, outcome)
    reading = dry_reading(spec.check, outcome, fires_at_once)
    notes = prepared.notes + reading.pop("notes") + ([JUDGE_SKIPPED] if spec.condition else [])
    return {"dry_run": True, **reading, "notes": notes, "forecast": prepared.dry_run.forecast,
            "limits": prepared.dry_run.limits}


def _tool_poll(prepared: Prepared, io: SourceIO, max_text_bytes: int, now: datetime, values: dict) -> Outcome:
    """One poll of a declared read-only tool, as a worker runs it (tasks/checks.run_tool_poll)."""
    source = prepared.spec.source
    try:
        _, body = poll_tool(prepared.tool, source.arguments or {}, io.fetcher, values, None)
    except FetchError as exc:
        return Outcome(ERROR, error=exc.message)
    except ContentError as exc:
        return Outcome(ERROR, error=str(exc))
    return check_body(source, prepared.spec.check, Prior(state={}), body, max_text_bytes, now)


def _mcp_poll(prepared: Prepared, io: SourceIO, max_text_bytes: int, now: datetime) -> Outcome:
    """One call of a read-only MCP connection tool, as a worker's poll makes it (tasks/checks._run_connection_tool),
    within the create's timeout and address rules."""
    run, policy = prepared.mcp, io.fetcher.policy
    try:
        result = call_tool(run.url, run.token, run.tool, run.arguments, timeout=policy.timeout,
                           allow_loopback=policy.allow_loopback, own=policy.own, egress=policy.egress)
    except McpError as exc:
        return Outcome(ERROR, error=exc.message)
    body = mcp_run_body(result.is_error, result.text, result.structured)
    return check_body(prepared.spec.source, prepared.spec.check, Prior(state={}), body, max_text_bytes, now)


def _limits_words(refusal: str) -> str:
    if not refusal:
        return "within the limits: arming this now would be allowed"
    return f"at the limit: {refusal} Arming this now would be refused."


def _document_reading(user: User, spec: MonitorSpec, notes: list[str], ctx: CreateContext,
                      now: datetime) -> Outcome | None:
    """A document watch's condition over the stored document, as its first check evaluates it; None without one."""
    stored = stored_body(user.id, spec.source.item_type, spec.source.item_id)
    if stored is None:
        notes.append(no_document_yet(spec.source))
        return None
    outcome = check_body(spec.source, spec.check, Prior(state={"holds": False}), stored[0], ctx.max_text_bytes, now)
    if outcome.kind == ERROR:
        notes.append(f"The condition can't be evaluated on the document as it is ({outcome.error}); armed, that "
                     "would count as a failed check.")
        return None
    return outcome


def _tool_to_run(user: User, conversation: Conversation, spec: MonitorSpec, notes: list[str], ctx: CreateContext,
                 limit: str) -> tuple[MonitorSpec, ToolDef | None, McpRun | None, str]:
    """A tool watch resolved as a create resolves it; a tool that needs no approval (a declared one, or an MCP one
    that says it only reads) is run once, as armed it would be at once; one that needs the owner's approval is
    not."""
    spec, needs_approval = resolved_tool(user, conversation, spec, ctx)
    try:
        refuse_past_tool_limit(user, ctx)
    except LimitReached as exc:
        limit = limit or str(exc)
    source = spec.source
    if needs_approval:
        notes.append(f"{needs_approval_words(source)}: armed, it would wait for the user to approve this exact call, "
                     "so a dry run can't run it.")
        return spec, None, None, limit
    if source.connection:
        url, token = credentials(find_connection(user.id, source.connection), ctx.keyring)
        return spec, None, McpRun(url, token, source.tool, dict(source.arguments or {})), limit
    return spec, load_tool(find_tool(user.id, source.agent_id, source.tool), ctx.keyring), None, limit


def _would_run(spec: MonitorSpec, device: Device) -> str:
    what = ("start a watcher whose every printed line wakes you" if spec.source.mode == "stream"
            else "run the command every interval, its first run the baseline")
    approval = "" if device.approval_mode == "full" else ", once the user approves this exact command"
    return f"Armed, this would {what} on the device {device.name!r}{approval}; a dry run runs nothing on a device."

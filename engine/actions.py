"""Seed 001's call shape: the `actions/monitors/create` fields, as written there, turned into monitor_create's
arguments. Each refusal is one sentence saying what to fix; nothing here touches a database."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from engine.errors import SpecError
from engine.sources.time_source import format_time, parse_time

WATCH_TYPES = ("dynadata_doc", "time", "agent_tool")
FIELDS = ("watchType", "itemType", "itemId", "condition", "fireAt", "delayMinutes", "agentId", "toolName",
          "toolArgs", "intervalMinutes", "note", "conversationId", "ttlMinutes", "channel", "wokenBy", "description")
#: which watch type each type-specific field belongs to
_OWN_FIELDS = {"dynadata_doc": ("itemType", "itemId", "condition"), "time": ("fireAt", "delayMinutes"),
               "agent_tool": ("agentId", "toolName", "toolArgs", "intervalMinutes", "condition")}
DEFAULT_TTL_MINUTES = 1440
MAX_TTL_MINUTES = 10080
#: seed 001's lifetimes, in the seconds monitor_create's limits are in
MAX_TTL_SECONDS = MAX_TTL_MINUTES * 60


@dataclass(frozen=True)
class CreateCall:
    """A seed 001 create, translated: the arguments for monitor_create, and who to wake."""
    arguments: dict
    conversation_id: str | None
    channel: str
    agent_id: str
    woken_by: int | None


def translate_create(body: object, now: datetime | None = None) -> CreateCall:
    """monitor_create's arguments for a seed 001 call; raises SpecError. `now` (naive UTC) lets a fireAt past
    the lifetime be refused in seed 001's words."""
    if not isinstance(body, dict):
        raise SpecError("The body must be a JSON object with watchType and its fields.")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise SpecError(f"Unknown field '{unknown[0]}'; the fields are {', '.join(FIELDS)}.")
    watch_type = body.get("watchType")
    if watch_type not in WATCH_TYPES:
        raise SpecError(f"watchType must be one of {', '.join(WATCH_TYPES)} (got {watch_type!r}).")
    for other, names in _OWN_FIELDS.items():
        stray = [name for name in names if name in body and name not in _OWN_FIELDS[watch_type]]
        if stray:
            raise SpecError(f"{stray[0]} belongs to {other} watches; take it out of a {watch_type} watch.")
    given_ttl = body.get("ttlMinutes")
    ttl = _minutes(DEFAULT_TTL_MINUTES if given_ttl is None else given_ttl, "ttlMinutes", MAX_TTL_MINUTES)
    arguments = {"expires_in": round(ttl * 60), "description": _description(body, watch_type)}
    if body.get("note") is not None:
        arguments["note"] = body["note"]
    if watch_type == "dynadata_doc":
        arguments.update(_document(body))
    elif watch_type == "agent_tool":
        arguments.update(_agent_tool(body))
    else:
        arguments["source"] = _time(body, ttl, now)
    return CreateCall(arguments, _text(body, "conversationId"), _text(body, "channel") or "chat",
                      _text(body, "agentId") or "", _woken_by(body.get("wokenBy")))


def _document(body: dict) -> dict:
    condition = _condition(body, "dynadata_doc", "has(doc.status) && doc.status == 'done'")
    return {"source": {"type": "document", "item_type": body.get("itemType"), "item_id": body.get("itemId")},
            "check": {"type": "cel", "expr": condition}}


def _agent_tool(body: dict) -> dict:
    """toolName + toolArgs on agentId (default: the calling agent), polled every intervalMinutes, clamped to 5–1440
    (the floor is TOOL_MIN_INTERVAL_SECONDS) with a note: 0 asks for the fastest allowed."""
    condition = _condition(body, "agent_tool", "data.reached == true")
    source = {"type": "tool", "tool": body.get("toolName"), "arguments": body.get("toolArgs") or {}}
    if body.get("agentId") is not None:
        source["agent_id"] = body["agentId"]
    arguments = {"source": source, "check": {"type": "cel", "expr": condition}}
    if body.get("intervalMinutes") is not None:
        arguments["interval"] = round(_interval_minutes(body["intervalMinutes"]) * 60)
    return arguments


def _condition(body: dict, watch_type: str, example: str) -> str:
    condition = body.get("condition")
    if not isinstance(condition, dict) or not isinstance(condition.get("expr"), str) or set(condition) - {"expr"}:
        raise SpecError(f"condition is required for {watch_type}: a CEL descriptor {{\"expr\": \"…\"}}, e.g. "
                        f"{{\"expr\": \"{example}\"}}.")
    return condition["expr"]


def _time(body: dict, ttl_minutes: float, now: datetime | None) -> dict:
    fire_at, delay = body.get("fireAt"), body.get("delayMinutes")
    if (fire_at is None) == (delay is None):
        raise SpecError("A time watch takes fireAt (an ISO 8601 time) or delayMinutes, not both and not neither.")
    if fire_at is not None:
        _within_lifetime(fire_at, ttl_minutes, now)
        return {"type": "time", "fire_at": fire_at}
    minutes = _minutes(delay, "delayMinutes", None)
    if minutes >= ttl_minutes:
        raise SpecError(f"delayMinutes ({minutes:g}) is past the watch's lifetime, ttlMinutes ({ttl_minutes:g}); "
                        f"give a longer ttlMinutes (at most {MAX_TTL_MINUTES}) or a shorter delay.")
    return {"type": "time", "delay": max(1, round(minutes * 60))}


def _within_lifetime(fire_at: object, ttl_minutes: float, now: datetime | None) -> None:
    """A fireAt past the watch's lifetime, refused naming ttlMinutes (an unreadable one is refused later)."""
    if now is None:
        return
    try:
        when = parse_time(fire_at)
    except SpecError:
        return
    if when > now and (when - now).total_seconds() >= ttl_minutes * 60:
        raise SpecError(f"fireAt {format_time(when)} is past the monitor's lifetime, ttlMinutes ({ttl_minutes:g}); "
                        f"give a longer ttlMinutes (at most {MAX_TTL_MINUTES}) or an earlier time.")


def _minutes(value: object, name: str, most: int | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(f"{name} must be a number of minutes above 0 (got {value!r}).")
    if most is not None and value > most:
        raise SpecError(f"{name} may be at most {most} ({most // 1440} days) (got {value:g}).")
    return float(value)


def _interval_minutes(value: object) -> float:
    """intervalMinutes as given, 0 included: monitor_create clamps it to the tool floor and says so in notes."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SpecError(f"intervalMinutes must be a number of minutes, 0 or more (got {value!r}); it is clamped "
                        "to 5–1440.")
    return float(value)


def _description(body: dict, watch_type: str) -> str:
    given = body.get("description")
    if given is not None:
        return given  # checked as monitor_create checks it
    note = body.get("note") if isinstance(body.get("note"), str) else ""
    first = next((line.strip() for line in note.splitlines() if line.strip()), "")
    if first:
        return first[:200]
    if watch_type == "time":
        return "Reminder"
    if watch_type == "agent_tool":
        return f"the tool {body.get('toolName')}"[:200]
    return f"{body.get('itemType')}/{body.get('itemId')}"[:200]


def _text(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 200 or "\x00" in value:
        raise SpecError(f"{name} must be text of 1 to 200 characters (got {str(value)[:40]!r}).")
    return value


def _woken_by(value: object) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not ((isinstance(value, int) and value > 0) or (
            isinstance(value, str) and value.isascii() and value.isdigit())):
        raise SpecError("wokenBy must be the id of the wake message that started this run.")
    return int(value)


#: monitor_create's names in a refusal, and seed 001's for the same field
_SEED_NAMES = (("context.woken_by", "wokenBy"), ("source.agent_id", "agentId"), ("source.tool", "toolName"),
               ("source.arguments", "toolArgs"), ("source.fire_at", "fireAt"), ("source.item_type", "itemType"), ("source.item_id", "itemId"),
               ("check.expr", "condition.expr"), ("expires_in", "ttlMinutes"), ("monitor_cancel", "Cancel Monitor"),
               ("monitor_list", "GET /api/monitors"))


def in_seed_terms(message: str) -> str:
    """A monitor_create refusal, naming seed 001's fields instead."""
    for ours, theirs in _SEED_NAMES:
        message = message.replace(ours, theirs)
    return message

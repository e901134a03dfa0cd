"""monitor_list and monitor_cancel as the tool answers them. A listed monitor has the fields an agent acts on,
only those that are set; `verbose` gives the full record (the one GET /api/monitors answers). A cancel is
idempotent: an ended monitor is answered ok with a note.

A stored source holds every field any kind of source may have, most of them null: listed as they are, they cost
the model about 1 KB a monitor for nothing.
"""

from __future__ import annotations

from models.monitors import (
    CANCELLED, MonitorNotFound, TransitionRefused, change_status, load_for_check, monitor_json, user_monitors,
)
from models.runs import is_stream, watcher_states
from models.tables import NOT_ENDED, Conversation, User
from models.tool_errors import ToolError

#: the compact listing's fields, in this order; the rest of the record is for verbose
COMPACT = ("monitor_id", "description", "status", "conversation_id", "source", "check", "condition", "on_match",
           "interval_seconds", "next_check_at", "last_checked_at", "last_error", "wakes_left", "expires_at")
#: a source's fields that Vigil resolved for itself at create (ids, a fingerprint): not for the model
INTERNAL_SOURCE = frozenset({"device_id", "tool_id", "tool_fingerprint"})


def monitor_list(user: User, conversation: Conversation, arguments: object = None) -> dict:
    """This conversation's monitors: the fields that are set, or with verbose: true the full records."""
    verbose = arguments.get("verbose", False) if isinstance(arguments, dict) else False
    if not isinstance(verbose, bool):
        raise ToolError("verbose must be true (full records) or false; leave it out for the short listing.")
    return listed_monitors(user, conversation, verbose)


def monitor_cancel(user: User, conversation: Conversation, arguments: object):
    """Cancel one of this conversation's monitors. Returns (monitor, result). Idempotent: a monitor that has
    ended already (cancelled, done, expired) is answered ok with a note, and nothing changes."""
    monitor_id = arguments.get("monitor_id") if isinstance(arguments, dict) else None
    if not isinstance(monitor_id, str) or not monitor_id:
        raise ToolError("monitor_cancel needs monitor_id: take it from monitor_list.")
    found = {m.id: m for m in user_monitors(user, conversation)}.get(monitor_id)
    if found is None:
        raise ToolError(f"There is no monitor {monitor_id!r} in this conversation; call monitor_list to see its monitors.")
    if found.status not in NOT_ENDED:
        return found, ended_already(found)
    try:
        monitor = change_status(user, monitor_id, "cancel")
    except MonitorNotFound as exc:
        raise ToolError(f"The monitor can't be cancelled: {exc}.") from None
    except TransitionRefused:  # it ended (or was cancelled) meanwhile
        monitor = load_for_check(monitor_id)
        if monitor.status in NOT_ENDED:
            raise ToolError("The monitor changed meanwhile; call monitor_cancel again.") from None
        return monitor, ended_already(monitor)
    return monitor, {"monitor_id": monitor.id, "status": CANCELLED}


def ended_already(monitor) -> dict:
    how = "was cancelled already" if monitor.status == CANCELLED else f"had ended already ({monitor.status})"
    return {"monitor_id": monitor.id, "status": monitor.status,
            "note": f"The monitor {how}, so nothing changed; it no longer wakes you."}


def listed_monitors(user: User, conversation: Conversation, verbose: bool = False) -> dict:
    """This conversation's monitors, newest first; a stream's says whether its watcher's process runs
    (`watcher`)."""
    monitors = user_monitors(user, conversation)
    watchers = watcher_states([m for m in monitors if is_stream(m)])
    listed = [monitor_json(m) if verbose else compact(monitor_json(m)) for m in monitors]
    return {"monitors": [item | ({"watcher": watchers[item["monitor_id"]]} if item["monitor_id"] in watchers
                                 else {}) for item in listed]}


def compact(record: dict) -> dict:
    """The record's COMPACT fields that are set; its source and check likewise."""
    kept = {}
    for name in COMPACT:
        value = record.get(name)
        if name == "source" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in INTERNAL_SOURCE}
        if name in ("source", "check") and isinstance(value, dict):
            value = {k: v for k, v in value.items() if not _empty(v)}
        if not _empty(value):
            kept[name] = value
    return kept


def _empty(value: object) -> bool:
    """None, "", [] and {} say nothing; 0 and false do (no wakes left, a flag turned off)."""
    return value is None or (isinstance(value, (str, list, tuple, dict)) and not value)

"""monitor_list as the tool answers it: each monitor in the fields an agent acts on, only those that are set;
`verbose` gives the full record (the one GET /api/monitors answers).

A stored source holds every field any kind of source may have, most of them null: listed as they are, they cost
the model about 1 KB a monitor for nothing.
"""

from __future__ import annotations

from models.monitors import monitor_json, user_monitors
from models.runs import is_stream, watcher_states
from models.tables import Conversation, User

#: the compact listing's fields, in this order; the rest of the record is for verbose
COMPACT = ("monitor_id", "description", "status", "conversation_id", "source", "check", "condition", "on_match",
           "interval_seconds", "next_check_at", "last_checked_at", "last_error", "wakes_left", "expires_at")
#: a source's fields that Vigil resolved for itself at create (ids, a fingerprint): not for the model
INTERNAL_SOURCE = frozenset({"device_id", "tool_id", "tool_fingerprint"})


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

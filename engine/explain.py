"""What a monitor's checks found, in words: the evidence an owner reads on the monitor page.

Pure: each function takes the check as stored, what a check found, and the time, and returns text or plain data.
Quiet checks leave no rows; they are counted from the check counter each stored event keeps, so the timeline
folds them into spans ("312 quiet checks, 09:00–14:10") with nothing written on a quiet check.
"""

from __future__ import annotations

from datetime import datetime

from engine.checks.base import format_number
from engine.checks.change import describe_change
from engine.checks.hold import since_words
from engine.checks.threshold import OP_NAMES, REARM_SIDE

#: the event kinds that are a check of the source (they count in check_count), as against decisions and notices
CHECK_KINDS = frozenset({"baseline", "changed", "fired", "error", "unreachable", "judge_failed"})
#: the most text of a before or after kept in an event
MAX_SIDE_CHARS = 2000


def change_data(check: dict, summary: str, found: str, before: dict | None, after: dict | None,
                judged: dict | None = None) -> dict:
    """An event's data for a change or a fire: what it read, before → after, the check's reasoning, the judge's
    verdict. `before`/`after` are the check's stored states either side of the check."""
    data = {"summary": summary[:MAX_SIDE_CHARS]}
    if found:
        data["found"] = found[:MAX_SIDE_CHARS]
    before, after = before or {}, after or {}
    if isinstance(after.get("value"), (int, float)):  # a number: before → after
        was = before.get("value")
        data["before"] = format_number(was) if isinstance(was, (int, float)) else "—"
        data["after"] = format_number(after["value"])
    elif isinstance(after.get("text"), str) and isinstance(before.get("text"), str):  # text: what came and went
        data["diff"] = describe_change(before["text"], after["text"], MAX_SIDE_CHARS)
    if judged:
        data["judge"] = judged
    data["reason"] = reason(check, found, before, after, judged)
    return data


def reason(check: dict, found: str, before: dict, after: dict, judged: dict | None = None) -> str:
    """One sentence: why this check fired, or why it did not."""
    if judged is not None:
        said = judged.get("summary") or "no reason given"
        return (f"The check matched and the judge agreed: {said}" if judged.get("match")
                else f"The check matched, but the judge said no: {said}")
    if found:
        return found.splitlines()[0] if check.get("type") == "threshold" else _fired_reason(check, found)
    if check.get("type") == "threshold" and isinstance(after.get("value"), (int, float)):
        return _threshold_reason(check, before, after)
    if after.get("pending"):
        return _holding(check, f"The {check.get('type', 'change').replace('_', ' ')} check holds", after)
    return "Changed, but not in a way the check fires on." + _count_lost(check, before, after)


def _threshold_reason(check: dict, before: dict, after: dict) -> str:
    """Why a threshold did not fire: not past the line, past it already, holding toward check.for, or past it
    again before it re-armed (check.rearm)."""
    shown, limit = format_number(after["value"]), format_number(check.get("value", 0))
    words = OP_NAMES.get(check.get("op", ""), check.get("op", ""))
    rearm, side = check.get("rearm"), REARM_SIDE.get(check.get("op", ""), "")
    latched = rearm is not None and after.get("armed") is False
    if after.get("pending"):
        return _holding(check, f"{shown} is {words} {limit}", after)
    if after.get("holds") and latched and not before.get("holds"):
        return f"{shown} is {words} {limit} again, but not re-armed: it must go {side} {format_number(rearm)} first."
    if after.get("holds") and before.get("holds"):
        if latched:
            return (f"Changed, but {shown} was {words} {limit} already: it fires again only once it has gone {side} "
                    f"{format_number(rearm)}.")
        return f"Changed, but {shown} was {words} {limit} already: it fires when it crosses, not while it stays."
    if latched:
        return f"Changed, but {shown} is not {words} {limit}; it re-arms once it goes {side} {format_number(rearm)}."
    return f"Changed, but {shown} is not {words} {limit}." + _count_lost(check, before, after)


def _holding(check: dict, what: str, after: dict) -> str:
    """"89 is below 90, holding 2 of 3 (since 09:12 UTC): it fires once it has held for 3 checks in a row."."""
    need = check.get("hold_for") or 1
    return (f"{what}, holding {after.get('held', 0)} of {need}{since_words(after.get('since'))}: it fires once it "
            f"has held for {need} checks in a row.")


def _count_lost(check: dict, before: dict, after: dict) -> str:
    """" The count of 2 in a row starts again." when a check.for count under way stopped holding."""
    need, held = check.get("hold_for") or 1, before.get("held") or 0
    if need > 1 and 0 < held < need and not after.get("holds"):
        return f" The count of {held} of {need} in a row starts again."
    return ""


#: why a check of each kind fired, when what it found says it less well
_FIRED = {"change": "The watched part changed.", "every_call": "A delivery came; this check fires on every one."}


def _fired_reason(check: dict, found: str) -> str:
    kind = check.get("type", "change")
    if kind in _FIRED:
        return _FIRED[kind]
    first = next((line for line in found.splitlines() if any(ch.isalnum() for ch in line)), "")
    return f"The {kind.replace('_', ' ')} check held: {first}" if first else f"The {kind.replace('_', ' ')} check held."


def counts_as_check(event: dict) -> bool:
    """Whether a check of the source wrote the event (it counts in check_count): a check kind, or the pause or end
    a check caused."""
    return event["kind"] in CHECK_KINDS or bool((event.get("data") or {}).get("by_check"))


def fold(events: list[dict], check_count: int, last_checked_at: datetime | None) -> list[dict]:
    """The timeline, newest first: each stored event, with the quiet checks between it and the one before folded
    into a {"kind": "quiet", "count", "from", "to"} item. `events` newest first, each with `kind`, `at`
    (datetime) and `check_count` (the counter when it was written); the monitor's counter and last check now."""
    items: list[dict] = []
    newer_count, newer_at = check_count + 1, last_checked_at  # the counter after the latest check, as if next
    for event in events:
        counted = 1 if counts_as_check(event) else 0
        quiet = newer_count - event["check_count"] - 1
        if quiet > 0 and newer_at is not None:
            items.append({"kind": "quiet", "count": quiet, "from": event["at"], "to": newer_at})
        items.append(event)
        newer_count, newer_at = event["check_count"] + 1 - counted, event["at"]
    return items


def why_not(events: list[dict]) -> str | None:
    """The answer to "why didn't it fire?": the newest change that did not fire (and nothing fired after it)."""
    for event in events:
        if event["kind"] == "fired":
            return None
        if event["kind"] == "changed":
            return (event.get("data") or {}).get("reason") or event.get("detail") or None
    return None

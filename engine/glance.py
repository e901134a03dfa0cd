"""What a monitor's row says at a glance (issue 30): its badge, its latest reading, and times in relative words
("2 min ago", "in 3 min") next to the UTC time. Pure: every function takes `now`."""

from __future__ import annotations

from datetime import datetime

from engine.checks.base import format_number

#: a row's badge -> the statuses it stands for; `holding` is an active monitor whose condition holds and is
#: being held for its `for` count (engine/checks/hold.py)
ENDED = ("done", "cancelled", "expired", "error")
#: the longest reading a row shows, in characters
READING_CHARS = 80
_UNITS = ((86400 * 365, "y"), (86400 * 30, "mo"), (86400, "d"), (3600, "h"), (60, "min"))


def badge(status: str, state: dict | None) -> str:
    """The row's badge: its status, or `holding` for an active monitor whose condition is being held."""
    if status == "active" and isinstance(state, dict) and state.get("pending"):
        return "holding"
    return status


def reading(state: dict | None) -> str | None:
    """What the latest check read, from the check's stored state: a number as the check shows it, or the start of
    a text; None when the state keeps neither (an event source, a check not run yet)."""
    if not isinstance(state, dict):
        return None
    value = state.get("value")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_number(value)
    text = state.get("text")
    if isinstance(text, str) and text.strip():
        text = " ".join(text.split())
        return text if len(text) <= READING_CHARS else text[:READING_CHARS - 1] + "…"
    return None


def relative(at: datetime, now: datetime) -> str:
    """`at` in words from `now`: "just now", "2 min ago", "in 3 h"; the largest whole unit, rounded down."""
    seconds = int((at - now).total_seconds())
    span = abs(seconds)
    if span < 45:
        return "just now" if seconds <= 0 else "in a moment"
    amount, unit = max(1, round(span / 60)), "min"
    for size, name in _UNITS:
        if span >= size:
            amount, unit = span // size, name
            break
    return f"in {amount} {unit}" if seconds > 0 else f"{amount} {unit} ago"

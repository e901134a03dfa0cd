"""Durations as people and models write them: "15m", "2h", "1h30m", "7d" or plain seconds."""

from __future__ import annotations

import math
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?\s*[smhdw]\s*)+")


def parse_duration(value: object) -> int | None:
    """Seconds in `value`, or None when it is not a duration."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        # Same rule as text ("0.5" is not a duration); NaN and infinity are not durations either.
        return int(value) if 1 <= value < math.inf else None
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        seconds = float(text)
    elif _WHOLE.fullmatch(text):
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    else:
        return None
    return int(seconds) if seconds >= 1 else None


def describe_duration(seconds: int) -> str:
    """The shortest exact spelling: 300 -> "5m", 5400 -> "1h30m"."""
    if seconds <= 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)

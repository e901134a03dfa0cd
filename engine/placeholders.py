"""Placeholders a source's url or path may hold, filled in on every check: {{now}}, {{last_checked_date}}…"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from urllib.parse import quote

PLACEHOLDERS = ("now", "last_checked_at", "last_changed_at", "last_checked_date")
#: what create-time checks fill placeholders with, so a url is validated as it will be fetched
SAMPLE_TIME = datetime(2024, 1, 31, 12, 0, 0, tzinfo=timezone.utc)

_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


def values(now: datetime, last_checked_at: datetime | None = None,
           last_changed_at: datetime | None = None) -> dict[str, str]:
    """Each placeholder's value; a time not known yet (no check so far) is `now`."""
    checked = last_checked_at or now
    return {"now": _iso(now), "last_checked_at": _iso(checked),
            "last_changed_at": _iso(last_changed_at or now),
            "last_checked_date": _utc(checked).strftime("%Y/%m/%d")}


def sample_values() -> dict[str, str]:
    return values(SAMPLE_TIME)


def fill(text: str, values: dict[str, str], encode: bool = False) -> str:
    """`text` with each known {{name}} replaced; `encode` percent-encodes values (for a url)."""
    def value(match: re.Match) -> str:
        found = values.get(match.group(1))
        if found is None:
            return match.group(0)
        return quote(found, safe="") if encode else found
    return _PLACEHOLDER.sub(value, text)


def unknown(text: str) -> list[str]:
    """The names in {{…}} that are not placeholders, each once, in order."""
    names = (match.group(1) for match in _PLACEHOLDER.finditer(text))
    return list(dict.fromkeys(name for name in names if name not in PLACEHOLDERS))


def has_placeholders(text: str) -> bool:
    # the substring test first: nearly every text has none, and it is a tenth of the regex's cost
    return "{{" in text and _PLACEHOLDER.search(text) is not None


def listed() -> str:
    """'{{now}}, {{last_checked_at}}, …' for error sentences."""
    return ", ".join("{{" + name + "}}" for name in PLACEHOLDERS)


def _utc(moment: datetime) -> datetime:
    """A naive datetime is taken as UTC, as the database stores times."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def _iso(moment: datetime) -> str:
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")

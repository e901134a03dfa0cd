"""Settings → Monitors' filters and search (issue 30): by status (or the `holding` badge), conversation, kind of
source, and words in the description, note or what it watches. One query for the account's monitors; kind, search
and `holding` are read from the rows' own fields."""

from __future__ import annotations

from dataclasses import dataclass

from engine.glance import ENDED, badge
from engine.sources import SOURCE_TYPES
from models.tables import ACTIVE, AWAITING, NOT_ENDED, PAUSED, Conversation, Monitor, User

#: the status filter's choices: a status, the `holding` badge, or a group
STATUSES = (ACTIVE, "holding", PAUSED, AWAITING, *ENDED, "live", "ended")
#: the kind filter's choices: a source type, or a command's stream mode
KINDS = (*SOURCE_TYPES, "stream")
#: the longest search accepted, in characters
SEARCH_CHARS = 200


class FilterRefused(ValueError):
    """A filter value the page can't apply; the message names what to fix."""


@dataclass(frozen=True)
class Filters:
    status: str = ""
    conversation: str = ""
    kind: str = ""
    q: str = ""

    @property
    def any(self) -> bool:
        return bool(self.status or self.conversation or self.kind or self.q)


def parse_filters(status: str | None, conversation: str | None, kind: str | None, q: str | None) -> Filters:
    """The query parameters, checked: an unknown status or kind, or an overlong search, is refused by name."""
    status, conversation, kind, q = ((value or "").strip() for value in (status, conversation, kind, q))
    if status and status not in STATUSES:
        raise FilterRefused(f"status must be one of {', '.join(STATUSES)} (got {status[:40]!r}).")
    if kind and kind not in KINDS:
        raise FilterRefused(f"kind must be one of {', '.join(KINDS)} (got {kind[:40]!r}).")
    if len(q) > SEARCH_CHARS:
        raise FilterRefused(f"The search is {len(q)} characters; use at most {SEARCH_CHARS}.")
    return Filters(status, conversation[:200], kind, q)


def search_monitors(user: User, filters: Filters) -> list[Monitor]:
    """The user's monitors that pass `filters`, newest first."""
    query = (Monitor.select(Monitor, Conversation.id, Conversation.external_id).join(Conversation)
             .where(Monitor.user == user))
    if filters.status in ("live", "ended"):
        live = Monitor.status.in_(NOT_ENDED)
        query = query.where(live if filters.status == "live" else ~live)
    elif filters.status:
        query = query.where(Monitor.status == (ACTIVE if filters.status == "holding" else filters.status))
    if filters.conversation:
        query = query.where(Conversation.external_id == filters.conversation)
    return [monitor for monitor in query.order_by(Monitor.created_at.desc()) if _passes(monitor, filters)]


def kind_of(monitor: Monitor) -> str:
    source = monitor.source or {}
    if source.get("type") == "command" and source.get("mode") == "stream":
        return "stream"
    return str(source.get("type") or "")


def _passes(monitor: Monitor, filters: Filters) -> bool:
    if filters.status == "holding" and badge(monitor.status, monitor.check_state) != "holding":
        return False
    if filters.kind and kind_of(monitor) != filters.kind:
        return False
    return not filters.q or filters.q.casefold() in _searchable(monitor)


def _searchable(monitor: Monitor) -> str:
    source = monitor.source or {}
    words = [monitor.description, monitor.note, monitor.id, monitor.conversation.external_id,
             *(str(source.get(key) or "") for key in ("url", "command", "name", "item_type", "item_id"))]
    return " ".join(words).casefold()

"""New rows on the owner's open pages: a monitor, a conversation or a token created while a page is open (and a
revoked token's row gone).

Each `*.created` event becomes the partials its pages add (app/events.py sends them over /ui/events): the new
row, prepended to Settings → Monitors and to its conversation's table (or, on a page still showing "No monitors
yet", the whole table), a trigger link's, approval link's or command's card on its conversation's page, the
sidebar entry, the token row. What a row needs beyond the event is loaded once per
process and event, however many streams are open (`Shared`), never once per stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from app.pages import approval_cards, trigger_cards
from app.templating import render
from models import connection, utcnow
from models.describe_data import facts_for
from models.monitors import load_for_check
from models.tables import AWAITING, Conversation

log = logging.getLogger(__name__)

#: the events this module turns into partials
CREATED = ("monitor.created", "conversation.created", "token.created", "token.revoked")


class Shared:
    """A value loaded once per key by whichever stream asks first, awaited by every other stream of this process,
    kept `keep_seconds` (an event reaches all of them within that). The load runs on a thread of its own, so a
    stream that closes while it runs takes nothing from the others."""

    def __init__(self, keep_seconds: float = 30.0, most: int = 512) -> None:
        self.keep_seconds, self.most = keep_seconds, most
        self.loads = 0  #: how many loads ran (what a test counts)
        self._lock = threading.Lock()
        self._entries: OrderedDict[Any, tuple[float, concurrent.futures.Future]] = OrderedDict()

    async def get(self, key, load: Callable[[], Any]) -> Any:
        now = time.monotonic()
        with self._lock:
            while self._entries and (len(self._entries) >= self.most or next(iter(self._entries.values()))[0] <= now):
                self._entries.popitem(last=False)
            entry = self._entries.get(key)
            first = entry is None
            if first:
                entry = self._entries[key] = (now + self.keep_seconds, concurrent.futures.Future())
                self.loads += 1
        if first:
            asyncio.get_running_loop().run_in_executor(None, _fill, entry[1], load)
        return await _result_of(entry[1])


def _fill(future: concurrent.futures.Future, load: Callable[[], Any]) -> None:
    try:
        future.set_result(load())
    except Exception as exc:  # noqa: BLE001 - every waiter gets it, and goes without the fragment
        future.set_exception(exc)


async def _result_of(future: concurrent.futures.Future) -> Any:
    """The future's result, awaited so that cancelling this waiter leaves the future to the others."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def settle(done: concurrent.futures.Future) -> None:
        if waiter.done():
            return
        if done.exception() is not None:
            waiter.set_exception(done.exception())
        else:
            waiter.set_result(done.result())

    def copy(done: concurrent.futures.Future) -> None:
        try:
            loop.call_soon_threadsafe(settle, done)
        except RuntimeError:  # the waiter's loop has closed
            pass

    future.add_done_callback(copy)
    return await waiter


#: this process's shared loads of new monitors' rows
monitor_rows = Shared()


async def created_fragments(user, name: str, data: dict, csrf: str = "") -> list[tuple[str, str]]:
    """The partials a `*.created` event adds, each named like the element that takes it."""
    if name == "conversation.created":
        return [("conversations", _conversation_item(data))]
    if name == "token.created":
        return [("tokens", _token_row(data, csrf))]
    if name == "token.revoked" and isinstance(data.get("id"), int):  # its row deletes itself (hx-swap delete)
        return [(f"token-{data['id']}", "revoked")]  # an event with no data is never dispatched
    if name == "monitor.created":
        try:
            rows = await monitor_rows.get(("monitor", data.get("monitor_id")),
                                          lambda: _monitor_rows(data.get("monitor_id")))
        except Exception:  # noqa: BLE001 - a row that can't be rendered is shown by the next reload
            log.exception("the new monitor's row could not be rendered")
            return []
        if rows is None or rows["user_id"] != user.id:
            return []
        # The row first: a page whose table this very event creates must not get the row a second time.
        parts = [("monitors", rows["row"]), (f"monitors-{rows['conversation']}", rows["row"]),
                 ("monitor-table", rows["table"]), (f"monitor-table-{rows['conversation']}", rows["own_table"]),
                 *rows["cards"]]
        if rows["card"]:  # a command or tool watch waiting for the owner: its card, above the table
            parts.append(("awaiting", rows["card"]))
        return parts
    return []


def _monitor_rows(monitor_id) -> dict | None:
    """The new monitor's row, Settings → Monitors' table holding only it (for a page that had none), and the
    approval card of a watch that waits for the owner."""
    if not isinstance(monitor_id, str):
        return None
    with connection():
        monitor = load_for_check(monitor_id)
        if monitor is None:
            return None
        facts = facts_for(monitor, utcnow())
        card = render("partials/_command_card.html", monitor=monitor) if monitor.status == AWAITING else ""
        return {"user_id": monitor.user_id, "conversation": monitor.conversation_id, "card": card,
                "row": render("partials/_monitor_row.html", monitor=monitor, facts=facts),
                "table": render("partials/_monitor_table.html", monitors=[monitor],
                                monitor_facts={monitor.id: facts}),
                "own_table": render("partials/_monitor_table.html", monitors=[monitor],
                                    monitor_facts={monitor.id: facts},
                                    conversation=SimpleNamespace(id=monitor.conversation_id)),
                "cards": _conversation_cards(monitor)}


def _conversation_cards(monitor) -> list[tuple[str, str]]:
    """The card its conversation's page shows above the table, named for that page only: a trigger link's, an
    approval link's, a command's or tool watch's (pages/conversation.html)."""
    at = monitor.conversation_id
    if (monitor.source or {}).get("type") in ("command", "tool"):
        return [(f"command-cards-{at}", render("partials/_command_card.html", monitor=monitor))]
    cards = [(f"trigger-cards-{at}", render("partials/_trigger_card.html", monitor=monitor, card=card))
             for card in trigger_cards([monitor]).values()]
    return cards + [(f"approval-cards-{at}", render("partials/_approval_card.html", monitor=monitor,
                                                    approval=approval))
                    for approval in approval_cards([monitor]).values()]


def _conversation_item(data: dict) -> str:
    conversation = Conversation(id=data.get("id"), external_id=data.get("conversation_id") or "",
                                title=data.get("title") or "")
    conversation.watching = bool(data.get("watching"))
    return render("partials/_conversation_item.html", conversation=conversation)


def _token_row(data: dict, csrf: str) -> str:
    token = SimpleNamespace(id=data.get("id"), label=data.get("label") or "",
                            created_at=_datetime(data.get("created_at")), last_used_at=_datetime(data.get("last_used_at")))
    return render("partials/_token_row.html", token=token, csrf=csrf)


def _datetime(value: str | None) -> datetime | None:
    """An event's ISO time (models.db.iso) as the tables' naive UTC, for the `when` filter."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).replace(tzinfo=None)

"""The signed-in user's event streams: JSON for scripts (/api/events), HTML fragments for pages (/ui/events)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable

from litestar import Controller, Request, get
from litestar.concurrency import sync_to_thread
from litestar.exceptions import NotAuthorizedException
from litestar.response import Stream

from adapters.events import RESUMED
from adapters.metrics import counting_clients
from app.auth import api_user, csrf_token, session_user
from app.live import CREATED, created_fragments
from app.pages import approval_cards, trigger_cards
from app.templating import env, render
from models import connection, utcnow
from models.conversations import find_conversation, is_watching
from models.describe_data import facts_for
from models.devices import device_json, owned_device, user_devices
from models.monitors import load_for_check
from models.tables import Message
from tasks.runtime import current

#: A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_SECONDS = 15.0


class EventsController(Controller):
    @get("/api/events")
    async def api_events(self, request: Request) -> Stream:
        user, _ = await sync_to_thread(api_user, request)
        return _stream(user, _as_json)

    @get("/ui/events")
    async def ui_events(self, request: Request) -> Stream:
        user = await sync_to_thread(session_user, request)
        if user is None:
            raise NotAuthorizedException("Sign in to follow your monitors.")
        csrf = csrf_token(request)  # for the forms of the partials it sends (the session is looked up already)
        return _stream(user, lambda name, data: _as_html(user, name, data, csrf))


def _stream(user, translate: Callable) -> Stream:
    """The user's events as a text/event-stream, written here as bytes (`sse`): Litestar's ServerSentEvent took each
    event through two more iterator layers and a message object with a StringIO, on the event loop, for every
    wake a stream delivers (issue 27)."""
    async def events() -> AsyncIterator[bytes]:
        async with current().bus.subscribe(user.id) as queue:
            yield CONNECTED  # subscribed: nothing after this is missed
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_SECONDS):
                        name, data = await queue.get()
                except TimeoutError:
                    yield KEEPALIVE
                    continue
                if name == RESUMED:  # events were lost while Redis was away: the client reconnects and re-reads
                    return
                for message in await translate(name, data):
                    yield message

    return Stream(counting_clients(events()), media_type="text/event-stream",
                  headers={"Cache-Control": "no-store", "Connection": "keep-alive", "X-Accel-Buffering": "no"})


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def sse(event: str, data: str) -> bytes:
    """One server-sent event, as the WHATWG format has it (a `data:` line for each line of `data`)."""
    lines = "".join(f"data: {line}\r\n" for line in _LINE_BREAK.split(data)) if "\n" in data or "\r" in data \
        else f"data: {data}\r\n"
    return f"event: {_LINE_BREAK.sub('', event)}\r\n{lines}\r\n".encode()


CONNECTED, KEEPALIVE = b": connected\r\n\r\n", b": keep-alive\r\n\r\n"


async def _as_json(name: str, data: dict) -> list[bytes]:
    return [sse(name, json.dumps(data))]


async def _as_html(user, name: str, data: dict, csrf: str = "") -> list[bytes]:
    if name in CREATED:  # loaded once per process, not once per open page
        html = await created_fragments(user, name, data, csrf)
    else:
        html = await sync_to_thread(_fragments, user, name, data, csrf)
    return [sse(event, body) for event, body in html]


def _fragments(user, name: str, data: dict, csrf: str = "") -> list[tuple[str, str]]:
    """The partials an event refreshes, each named like its element id."""
    if name == "device.updated":
        return _device_fragment(user, data, csrf)
    with connection():
        conversation = find_conversation(user, data.get("conversation_id", ""))
        if conversation is None:
            return []
        if name == "monitor.updated":
            monitor = load_for_check(data["monitor_id"])
            if monitor is None:
                return []
            facts = facts_for(monitor, utcnow())
            parts = [(f"monitor-{monitor.id}", render("partials/_monitor_row.html", monitor=monitor, facts=facts))]
            if (monitor.source or {}).get("type") in ("command", "tool"):
                parts.append((f"command-{monitor.id}", render("partials/_command_card.html", monitor=monitor)))
            for approval in approval_cards([monitor]).values():
                parts.append((f"approval-{monitor.id}", render("partials/_approval_card.html", monitor=monitor,
                                                               approval=approval)))
            for card in trigger_cards([monitor]).values():  # its hits, and whether it ended, as they are now
                parts.append((f"trigger-hits-{monitor.id}", render("partials/_trigger_hits.html", monitor=monitor,
                                                                   card=card)))
            return parts
        if name == "conversation.updated":
            conversation.watching = is_watching(conversation.id)
            return [(f"conversation-{conversation.id}",
                     render("partials/_conversation_item.html", conversation=conversation))]
        if name == "message.created":
            message = Message.get_or_none(Message.id == data["id"])
            if message is None:
                return []
            return [(f"messages-{conversation.id}", render("partials/_message.html", message=message))]
    return []


def _device_fragment(user, data: dict, csrf: str) -> list[tuple[str, str]]:
    """A device paired or revoked re-renders the list; any other change refreshes that device's state cells
    in place, so a form the owner is editing is left alone."""
    with connection():
        presence, now = current().presence, utcnow()
        if data.get("listing"):
            devices = [(d, device_json(d, now, presence)) for d in user_devices(user)]
            return [("devices", render("partials/_device_rows.html", devices=devices, csrf=csrf))]
        device = owned_device(user, data.get("id", 0))
        if device is None:
            return []
        state = device_json(device, now, presence)
    cells = env.get_template("partials/_device_cells.html").module
    return [(f"device-{device.id}-{name}", str(getattr(cells, macro)(device, state)))
            for name, macro in (("presence", "presence"), ("seen", "seen"), ("version", "version"),
                                ("running", "running"))]
